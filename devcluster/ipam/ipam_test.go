package ipam

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAllocateRoundRobin(t *testing.T) {
	a, err := New(netip.MustParsePrefix("172.29.3.0/29")) // .1 gateway, .2-.6 assignable, .7 broadcast
	require.NoError(t, err)
	assert.Equal(t, "172.29.3.1", a.Gateway().String())
	var got []string
	for i := 0; i < 5; i++ {
		ip, err := a.Allocate("p")
		require.NoError(t, err)
		got = append(got, ip.String())
	}
	assert.Equal(t, []string{"172.29.3.2", "172.29.3.3", "172.29.3.4", "172.29.3.5", "172.29.3.6"}, got)
	_, err = a.Allocate("p")
	assert.ErrorIs(t, err, ErrExhausted)

	a.Release(netip.MustParseAddr("172.29.3.3"))
	ip, err := a.Allocate("q")
	require.NoError(t, err)
	assert.Equal(t, "172.29.3.3", ip.String())
}

func TestReserve(t *testing.T) {
	a, err := New(netip.MustParsePrefix("172.29.4.0/24"))
	require.NoError(t, err)
	require.NoError(t, a.Reserve(netip.MustParseAddr("172.29.4.2"), "x"))
	assert.Error(t, a.Reserve(netip.MustParseAddr("172.29.4.2"), "y"))
	assert.Error(t, a.Reserve(netip.MustParseAddr("172.29.4.1"), "gateway"))
	assert.Error(t, a.Reserve(netip.MustParseAddr("10.0.0.2"), "outside"))
	ip, err := a.Allocate("z")
	require.NoError(t, err)
	assert.Equal(t, "172.29.4.3", ip.String(), "reserved address is skipped")
}
