package model

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// healthyView builds the views of a 2-primary, 1-replica-each cluster where every node sees
// the same table.
func healthyCluster() *Snapshot {
	type n struct {
		name, id, primary string
		slots             []SlotRange
	}
	ns := []n{
		{"p0", "id-p0", "", []SlotRange{{0, 8191}}},
		{"p1", "id-p1", "", []SlotRange{{8192, 16383}}},
		{"r0", "id-r0", "id-p0", nil},
		{"r1", "id-r1", "id-p1", nil},
	}
	s := &Snapshot{}
	for i, me := range ns {
		st := NodeState{Node: Node{Name: me.name, Shard: i % 2}, Reachable: true, ID: me.id, ClusterState: "ok",
			KnownNodes: len(ns), SlotsAssigned: SlotCount, PrimaryLink: PrimaryLinkUp, Slots: me.slots}
		if me.primary == "" {
			st.Role = RolePrimary
		} else {
			st.Role, st.PrimaryID = RoleReplica, me.primary
		}
		for _, o := range ns {
			cn := ClusterNode{ID: o.id, BusLink: BusConnected, PongRecv: 1, Slots: o.slots, PrimaryID: o.primary}
			if o.primary == "" {
				cn.Flags = []string{"master"}
			} else {
				cn.Flags = []string{"slave"}
			}
			if o.id == me.id {
				cn.Flags = append([]string{"myself"}, cn.Flags...)
			}
			st.View = append(st.View, cn)
		}
		s.Nodes = append(s.Nodes, st)
	}
	return s
}

func TestHealth(t *testing.T) {
	tests := []struct {
		name     string
		mutate   func(s *Snapshot)
		shards   int
		replicas int
		want     []string
	}{
		{name: "healthy", shards: 2, replicas: 1},
		{name: "fewer replicas wanted is still healthy", shards: 2, replicas: 0},
		{name: "too few shards", shards: 3, replicas: 1, want: []string{"2 slot-holding primaries, want 3"}},
		{name: "too few replicas", shards: 2, replicas: 2, want: []string{
			"primary p0 has 1 of 2 linked replicas", "primary p1 has 1 of 2 linked replicas"}},
		{
			name: "unreachable node is reported, and its replica-less primary too", shards: 2, replicas: 1,
			mutate: func(s *Snapshot) { s.Nodes[2] = NodeState{Node: s.Nodes[2].Node} },
			want:   []string{"node r0 unreachable", "primary p0 has 0 of 1 linked replicas"},
		},
		{
			name: "cluster_state fail and missing slots", shards: 2, replicas: 1,
			mutate: func(s *Snapshot) {
				s.Nodes[1].Slots = []SlotRange{{8192, 16000}}
				s.Nodes[3].ClusterState = "fail"
				s.Nodes[3].SlotsAssigned = 16001
			},
			want: []string{"383 slots not owned by an observed primary (16001-16383)",
				"node r1 reports cluster_state \"fail\"", "node r1 sees 16001 of 16384 slots assigned"},
		},
		{
			name: "pfail flag and broken link", shards: 2, replicas: 1,
			mutate: func(s *Snapshot) {
				s.Nodes[0].View[1].Flags = []string{"master", "fail?"}
				s.Nodes[3].PrimaryLink = PrimaryLinkDown
			},
			want: []string{"node p0 flags id-p1 as fail?", "primary p1 has 0 of 1 linked replicas", "replica r1 link to primary is \"down\""},
		},
		{
			name: "node that does not know a peer", shards: 2, replicas: 1,
			mutate: func(s *Snapshot) { s.Nodes[0].View = s.Nodes[0].View[:3] },
			want:   []string{"node p0 does not know r1"},
		},
		{
			name: "open slot", shards: 2, replicas: 1,
			mutate: func(s *Snapshot) { s.Nodes[0].View[0].Migrating = map[int]string{5: "id-p1"} },
			want:   []string{"node p0 has open slots (importing 0, migrating 1)"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := healthyCluster()
			if tt.mutate != nil {
				tt.mutate(s)
			}
			assert.Equal(t, tt.want, Health(s, tt.shards, tt.replicas))
		})
	}
	assert.Equal(t, []string{"no nodes observed"}, Health(&Snapshot{}, 1, 0))
}

func TestBestReplica(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(s *Snapshot)
		want   string
	}{
		{name: "linked replica in sync", want: "r0"},
		{name: "link down", mutate: func(s *Snapshot) { s.Nodes[2].PrimaryLink = PrimaryLinkDown }},
		{name: "syncing", mutate: func(s *Snapshot) { s.Nodes[2].SyncInProgress = true }},
		{name: "too far behind", mutate: func(s *Snapshot) { s.Nodes[0].ReplOffset = MaxSyncLag + 10 }},
		{name: "a replica that has not learned every primary's slots yet cannot count their votes", mutate: func(s *Snapshot) {
			s.Nodes[2].SlotsAssigned, s.Nodes[2].ClusterState = 8192, "fail"
		}},
		{name: "a replica the other primary still sees as a primary would not get its vote", mutate: func(s *Snapshot) {
			s.Nodes[1].View[2].Flags, s.Nodes[1].View[2].PrimaryID = []string{"master"}, ""
		}},
		{name: "a replica its own primary does not list yet would not get its vote", mutate: func(s *Snapshot) {
			s.Nodes[0].View = append(s.Nodes[0].View[:2], s.Nodes[0].View[3:]...)
		}},
		{name: "a replica whose bus link to the other primary has not carried a PONG yet", mutate: func(s *Snapshot) {
			s.Nodes[2].View[1].PongRecv = 0
		}},
		{name: "a primary whose bus link to the replica is down", mutate: func(s *Snapshot) {
			s.Nodes[1].View[2].BusLink = BusDisconnected
		}},
		{name: "highest offset wins", want: "r2", mutate: func(s *Snapshot) {
			r2 := s.Nodes[2]
			r2.Name, r2.ID, r2.ReplOffset = "r2", "id-r2", 5
			s.Nodes = append(s.Nodes, r2)
			for i := range s.Nodes {
				s.Nodes[i].View = append(s.Nodes[i].View, ClusterNode{ID: "id-r2", Flags: []string{"slave"}, PrimaryID: "id-p0", BusLink: BusConnected, PongRecv: 1})
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := healthyCluster()
			if tt.mutate != nil {
				tt.mutate(s)
			}
			got := BestReplica(s, "id-p0")
			if tt.want == "" {
				assert.Nil(t, got)
				return
			}
			if assert.NotNil(t, got) {
				assert.Equal(t, tt.want, got.Name)
			}
		})
	}
}
