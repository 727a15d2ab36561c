// Package ipam hands out pod addresses from the dev network's subnet.
//
// The dev kubelet picks a pod's address itself, before the container exists,
// so that downward-API values such as status.podIP are known when the
// container's environment is built. Addresses are handed out round-robin so a
// freed address is not reused at once: a Valkey cluster may still remember a
// departed node at its old address for a while.
package ipam

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"
)

// ErrExhausted means every address of the subnet is in use.
var ErrExhausted = errors.New("ipam: no free address in subnet")

// Allocator is safe for concurrent use.
type Allocator struct {
	mu     sync.Mutex
	subnet netip.Prefix
	first  netip.Addr // first assignable address (after the gateway)
	last   netip.Addr // last assignable address (before broadcast)
	next   netip.Addr
	used   map[netip.Addr]string
}

// New returns an allocator for an IPv4 subnet whose first host address is
// the gateway.
func New(subnet netip.Prefix) (*Allocator, error) {
	subnet = subnet.Masked()
	if !subnet.Addr().Is4() || subnet.Bits() > 29 {
		return nil, fmt.Errorf("ipam: need an IPv4 subnet of /29 or larger, got %s", subnet)
	}
	gateway := subnet.Addr().Next()
	last := broadcast(subnet).Prev()
	return &Allocator{subnet: subnet, first: gateway.Next(), last: last, next: gateway.Next(), used: map[netip.Addr]string{}}, nil
}

// Gateway is the host's address on the subnet.
func (a *Allocator) Gateway() netip.Addr { return a.subnet.Addr().Next() }

// Subnet is the managed subnet.
func (a *Allocator) Subnet() netip.Prefix { return a.subnet }

// Allocate returns a free address and records owner as its holder.
func (a *Allocator) Allocate(owner string) (netip.Addr, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	start := a.next
	for {
		ip := a.next
		a.next = ip.Next()
		if a.next.Compare(a.last) > 0 {
			a.next = a.first
		}
		if _, taken := a.used[ip]; !taken {
			a.used[ip] = owner
			return ip, nil
		}
		if a.next == start {
			return netip.Addr{}, ErrExhausted
		}
	}
}

// Reserve marks ip as held by owner, e.g. for a container found at start-up.
func (a *Allocator) Reserve(ip netip.Addr, owner string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.subnet.Contains(ip) || ip.Compare(a.first) < 0 || ip.Compare(a.last) > 0 {
		return fmt.Errorf("ipam: %s is not assignable in %s", ip, a.subnet)
	}
	if cur, taken := a.used[ip]; taken && cur != owner {
		return fmt.Errorf("ipam: %s already held by %s", ip, cur)
	}
	a.used[ip] = owner
	return nil
}

// Release frees ip. Releasing a free address is a no-op.
func (a *Allocator) Release(ip netip.Addr) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.used, ip)
}

func broadcast(p netip.Prefix) netip.Addr {
	b := p.Addr().As4()
	hostBits := 32 - p.Bits()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	v |= (1 << hostBits) - 1
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}
