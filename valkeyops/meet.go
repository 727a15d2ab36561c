package valkeyops

import (
	"context"
	"fmt"
	"net"
	"strconv"

	"github.com/gomomento/valkey-operator/valkeyops/model"
)

// Introducing the members to each other (CLUSTER MEET) until every view holds every other
// member at the address it answers on; Bootstrap and re-introduction both rely on it.

// dialAddr is the address we dial st on, with the bus port it announces (the client port +
// 10000 when it announces none). A server restarted on its volume may still announce the
// address it had before (its nodes.conf's, when it does not set cluster-announce-ip), so
// re-introducing members goes by where they answer now.
func dialAddr(st *model.NodeState) (ip string, port, bus int, err error) {
	host, p, err := net.SplitHostPort(st.Addr)
	if err != nil {
		return "", 0, 0, err
	}
	port, _ = strconv.Atoi(p)
	bus = port + 10000
	if self := st.Self(); self != nil && self.BusPort != 0 && self.Port == port {
		bus = self.BusPort
	}
	return host, port, bus, nil
}

// meetAddr is the address other nodes should use to reach st: what it announces, else the
// host we dial it on.
func meetAddr(st *model.NodeState) (ip string, port, bus int, err error) {
	host, p, err := net.SplitHostPort(st.Addr)
	if err != nil {
		return "", 0, 0, err
	}
	port, _ = strconv.Atoi(p)
	ip = host
	if self := st.Self(); self != nil {
		if self.IP != "" {
			ip = self.IP
		}
		if self.Port != 0 {
			port = self.Port
		}
		bus = self.BusPort
	}
	if bus == 0 {
		bus = port + 10000
	}
	if net.ParseIP(ip) == nil {
		addrs, err := net.LookupHost(ip)
		if err != nil || len(addrs) == 0 {
			return "", 0, 0, fmt.Errorf("resolve %s: %v", ip, err)
		}
		ip = addrs[0]
	}
	return ip, port, bus, nil
}

// meetAll MEETs every pair in which one side does not know the other (or knows it at another
// address or as failed) and waits until every node knows every other, handshakes finished.
func (a *Admin) meetAll(ctx context.Context, snap *model.Snapshot) error {
	return a.meetAt(ctx, snap, meetAddr, false)
}

// meetAt is meetAll with each node's address given by addrOf; with exact it also waits until
// every node knows every other at that address (not merely knows it).
func (a *Admin) meetAt(ctx context.Context, snap *model.Snapshot, addrOf func(*model.NodeState) (string, int, int, error), exact bool) error {
	type target struct{ ip, port, bus string }
	addrs := map[string]target{}
	for i := range snap.Nodes {
		ip, port, bus, err := addrOf(&snap.Nodes[i])
		if err != nil {
			return model.NewOpError(snap.Nodes[i].Name, "meet", err)
		}
		addrs[snap.Nodes[i].Name] = target{ip, strconv.Itoa(port), strconv.Itoa(bus)}
	}
	meets := map[string][][]string{}
	var from []model.Node
	for i := range snap.Nodes {
		ai := &snap.Nodes[i]
		for j := i + 1; j < len(snap.Nodes); j++ {
			bj := &snap.Nodes[j]
			if knowsWell(ai, bj, addrs[bj.Name].ip) && knowsWell(bj, ai, addrs[ai.Name].ip) {
				continue
			}
			t := addrs[bj.Name]
			if len(meets[ai.Name]) == 0 {
				from = append(from, ai.Node)
			}
			meets[ai.Name] = append(meets[ai.Name], []string{"CLUSTER", "MEET", t.ip, t.port, t.bus})
		}
	}
	if err := parallel(from, func(n model.Node) error {
		_, err := a.multi(ctx, n, "meet", meets[n.Name])
		return err
	}); err != nil {
		return err
	}
	if len(from) == 0 {
		return nil
	}
	nodes := make([]model.Node, len(snap.Nodes))
	for i, st := range snap.Nodes {
		nodes[i] = st.Node
	}
	return a.waitFor(ctx, "meet-wait", formTimeout, func() (bool, error) {
		s, err := a.Observe(ctx, nodes)
		if err != nil {
			return false, err
		}
		for i := range s.Nodes {
			for j := range s.Nodes {
				if i == j {
					continue
				}
				if !s.Nodes[i].Reachable {
					return false, s.Nodes[i].Err
				}
				p := s.Nodes[i].Peer(s.Nodes[j].ID)
				if p == nil || p.InHandshake() || p.NoAddr() {
					return false, fmt.Errorf("%s does not know %s yet", s.Nodes[i].Name, s.Nodes[j].Name)
				}
				if at := addrs[s.Nodes[j].Name].ip; exact && p.IP != at {
					return false, fmt.Errorf("%s knows %s at %s, not %s yet", s.Nodes[i].Name, s.Nodes[j].Name, p.IP, at)
				}
			}
		}
		return true, nil
	})
}

// knowsWell: a's view has b's ID at b's current address and not marked failed.
func knowsWell(a, b *model.NodeState, bIP string) bool {
	p := a.Peer(b.ID)
	if p == nil {
		return false
	}
	if p.Failed() || p.NoAddr() || p.InHandshake() {
		return false
	}
	return p.IP == bIP
}
