package model

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseClusterNodes(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    []ClusterNode
		wantErr bool
	}{
		{
			name: "primary with ranges, replica, migrating and importing",
			in: "07c37dfeb235213a872192d90877d0cd55635b91 127.0.0.1:30004@31004,host-a replica,slave e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 0 1426238317239 4 connected\n" +
				"e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 127.0.0.1:30001@31001 myself,master - 0 0 1 connected 0-5460 5462 [5461->-292f8b365bb7edb5e285caf0b7e6ddc7265d2f4f] [93-<-67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1]\n",
			want: []ClusterNode{
				{ID: "07c37dfeb235213a872192d90877d0cd55635b91", IP: "127.0.0.1", Port: 30004, BusPort: 31004, Hostname: "host-a",
					Flags: []string{"replica", "slave"}, PrimaryID: "e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca", PongRecv: 1426238317239, ConfigEpoch: 4, BusLink: BusConnected},
				{ID: "e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca", IP: "127.0.0.1", Port: 30001, BusPort: 31001,
					Flags: []string{"myself", "master"}, ConfigEpoch: 1, BusLink: BusConnected,
					Slots:     []SlotRange{{0, 5460}, {5462, 5462}},
					Migrating: map[int]string{5461: "292f8b365bb7edb5e285caf0b7e6ddc7265d2f4f"},
					Importing: map[int]string{93: "67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1"}},
			},
		},
		{
			name: "fresh node without known IP, failed peer without address",
			in: "aaaa :6379@16379 myself,master - 0 0 0 connected\n" +
				"bbbb :0@0 master,fail,noaddr - 1 2 3 disconnected\n",
			want: []ClusterNode{
				{ID: "aaaa", Port: 6379, BusPort: 16379, Flags: []string{"myself", "master"}, BusLink: BusConnected},
				{ID: "bbbb", Flags: []string{"master", "fail", "noaddr"}, PingSent: 1, PongRecv: 2, ConfigEpoch: 3, BusLink: BusDisconnected},
			},
		},
		{
			name: "noflags and ipv6",
			in:   "cccc [::1]:7000@17000 noflags - 0 0 0 connected 16383\n",
			want: []ClusterNode{{ID: "cccc", IP: "::1", Port: 7000, BusPort: 17000, BusLink: BusConnected, Slots: []SlotRange{{16383, 16383}}}},
		},
		{name: "too few fields", in: "aaaa 1.2.3.4:1@2 master -\n", wantErr: true},
		{name: "slot out of range", in: "aaaa 1.2.3.4:1@2 master - 0 0 0 connected 0-16384\n", wantErr: true},
		{name: "reversed range", in: "aaaa 1.2.3.4:1@2 master - 0 0 0 connected 10-5\n", wantErr: true},
		{name: "bad epoch", in: "aaaa 1.2.3.4:1@2 master - 0 0 x connected\n", wantErr: true},
		{name: "empty", in: "\n", want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseClusterNodes(tt.in)
			if tt.wantErr {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestNodeHelpers(t *testing.T) {
	nodes, err := ParseClusterNodes("aaaa 10.0.0.1:6379@16379 myself,master - 0 0 1 connected 0-10\nbbbb 10.0.0.2:6379@16379 slave,fail? aaaa 0 0 1 connected\n")
	require.NoError(t, err)
	assert.True(t, nodes[0].Myself())
	assert.True(t, nodes[0].IsPrimary())
	assert.Equal(t, "10.0.0.1:6379", nodes[0].Addr())
	assert.True(t, nodes[1].IsReplica())
	assert.True(t, nodes[1].Failing())
	assert.False(t, nodes[1].Failed(), "suspected (fail?), not agreed")
	assert.True(t, nodes[0].Connected())
	assert.Empty(t, nodes[0].UnhealthyFlags())
	assert.Equal(t, []string{"fail?"}, nodes[1].UnhealthyFlags())

	nodes, err = ParseClusterNodes("cccc :0@0 master,fail,noaddr - 0 0 1 disconnected\ndddd 10.0.0.4:6379@16379 master,handshake - 0 0 0 connected\n")
	require.NoError(t, err)
	assert.True(t, nodes[0].Failed())
	assert.True(t, nodes[0].Failing())
	assert.True(t, nodes[0].NoAddr())
	assert.False(t, nodes[0].Connected())
	assert.Equal(t, []string{"fail", "noaddr"}, nodes[0].UnhealthyFlags())
	assert.True(t, nodes[1].InHandshake())
	assert.False(t, nodes[1].NoAddr())
	assert.Equal(t, []string{"handshake"}, nodes[1].UnhealthyFlags())
}

func TestSlots(t *testing.T) {
	tests := []struct {
		name string
		n    int
		want []SlotRange
	}{
		{"one", 1, []SlotRange{{0, 16383}}},
		{"three", 3, []SlotRange{{0, 5461}, {5462, 10922}, {10923, 16383}}},
		{"four", 4, []SlotRange{{0, 4095}, {4096, 8191}, {8192, 12287}, {12288, 16383}}},
		{"zero", 0, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := EvenRanges(tt.n)
			assert.Equal(t, tt.want, got)
			if tt.n > 0 {
				assert.Equal(t, SlotCount, CountSlots(got))
			}
		})
	}
	assert.Equal(t, []SlotRange{{1, 3}, {7, 7}}, CompactSlots([]int{3, 1, 2, 7, 2}))
	assert.Equal(t, "1-3 7", FormatRanges([]SlotRange{{1, 3}, {7, 7}}))
	assert.Equal(t, []int{1, 2, 3, 7}, ExpandSlots([]SlotRange{{1, 3}, {7, 7}}))
}
