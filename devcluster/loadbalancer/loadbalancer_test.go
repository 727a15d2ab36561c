package loadbalancer

import (
	"net"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestPrefix: an instance's addresses are a loopback /16 in 127.100-199, fixed by its name.
func TestPrefix(t *testing.T) {
	for _, instance := range []string{"dev", "t0399e3d7", "tfb6a8bd3"} {
		p := Prefix(instance)
		assert.Equal(t, 16, p.Bits())
		assert.True(t, p.Addr().IsLoopback(), "%s: %s", instance, p)
		b := p.Addr().As4()[1]
		assert.True(t, b >= 100 && b <= 199, "%s: %s", instance, p)
		assert.Equal(t, p, Prefix(instance), "the same name, the same range")
	}
}

// TestAdmitted: no ranges admit anyone; otherwise only a source inside one.
func TestAdmitted(t *testing.T) {
	from := func(ip string) net.Addr { return &net.TCPAddr{IP: net.ParseIP(ip), Port: 40000} }
	ranges := []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24"), netip.MustParsePrefix("127.0.0.0/8")}
	for _, tc := range []struct {
		name   string
		ranges []netip.Prefix
		from   string
		want   bool
	}{
		{"no ranges", nil, "198.51.100.1", true},
		{"inside one", ranges, "192.0.2.44", true},
		{"the host's loopback", ranges, "127.0.0.1", true},
		{"outside all", ranges, "198.51.100.1", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, admitted(tc.ranges, from(tc.from)))
		})
	}
}
