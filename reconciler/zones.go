package reconciler

import (
	"context"
	"errors"

	"github.com/gomomento/valkey-operator/valkeyops/model"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Availability zones (docs/day2.md, placement): each server's availability-zone setting is its
// Kubernetes node's topology.kubernetes.io/zone label, so zone-aware clients (HELLO's
// availability_zone) can read from a replica in their own zone. A server's config file is
// written before its pod is scheduled, so the zone is not known then: it is set live once the
// pod is bound and its server answers. Nothing of it is in the pod or its spec hash, so an
// operator that starts doing this rolls no existing cluster.
//
// What each server holds is remembered per pod (the server container never restarts in its
// pod, so a pod UID is one server): an idle cluster reads and writes nothing for it. A pod the
// memory does not know (new, or after an operator restart) is read once in the pass's
// observation, and set only when it holds another zone. A node without the label leaves the
// setting as the server started, unset, and costs nothing either.

// ZoneWrites is the port of the zones concern.
type ZoneWrites interface {
	// SetAvailabilityZone sets node's availability-zone setting live.
	SetAvailabilityZone(ctx context.Context, node model.Node, zone string) error
}

// zoneHeld is what a server holds: its zone, or that its release has no such setting (so it
// is never set, nor read again).
type zoneHeld struct {
	zone        string
	unsupported bool
}

// zoneMember is one member as the zones planner sees it.
type zoneMember struct {
	name string
	// want is the zone label of the Kubernetes node its pod is bound to ("" without one).
	want string
	// held is what the memory says the server holds, if known.
	held  zoneHeld
	known bool
	// read is what this pass's observation read of the server, if it was read.
	read   zoneHeld
	readOK bool
}

// zoneSet is one planned CONFIG SET.
type zoneSet struct {
	name, zone string
}

// zonesToRead are the members whose setting must be read before planning: those with a zone
// to hold whose server the memory does not know.
func zonesToRead(members []zoneMember) []string {
	var out []string
	for _, m := range members {
		if m.want != "" && !m.known {
			out = append(out, m.name)
		}
	}
	return out
}

// planZones decides which servers are set to which zone: those known, or just read, to hold
// another zone than their node's. A server not known and not read (unreachable this pass)
// waits for the next pass; one whose release has no such setting is left alone.
func planZones(members []zoneMember) []zoneSet {
	var out []zoneSet
	for _, m := range members {
		now, ok := m.held, m.known
		if !ok {
			now, ok = m.read, m.readOK
		}
		if m.want != "" && ok && !now.unsupported && now.zone != m.want {
			out = append(out, zoneSet{m.name, m.want})
		}
	}
	return out
}

// zoneMembers lists the pass's members with their node's zone and what the memory holds of
// their server.
func (r *Reconciler) zoneMembers(p *pass) []zoneMember {
	// The map is replaced, never changed, once stored (rememberZones), and a cluster's
	// passes never run two at a time: it is safe to read outside the lock.
	var held map[types.UID]zoneHeld
	r.memory.peek(p.key, func(c *clusterMemory) { held = c.zones })
	out := make([]zoneMember, 0, len(p.members))
	for _, m := range p.members {
		pod := p.pods[m.Name]
		if pod == nil {
			continue
		}
		zm := zoneMember{name: m.Name, want: p.zones[pod.Spec.NodeName]}
		zm.held, zm.known = held[pod.UID]
		if p.seen != nil {
			if got, ok := p.seen.zones[m.Name]; ok {
				zm.read.zone, zm.read.unsupported = got.value, errors.Is(got.err, model.ErrUnsupported)
				zm.readOK = got.err == nil || zm.read.unsupported
			}
		}
		out = append(out, zm)
	}
	return out
}

// zonesNeed: the settings of the members the memory does not know, when their node has a zone.
func zonesNeed(r *Reconciler, p *pass) reading {
	return reading{zones: zonesToRead(r.zoneMembers(p))}
}

// setZones sets each planned server's zone and remembers what every member now holds. It
// never ends the pass: a server that refuses is logged and planned again on the next pass.
func (r *Reconciler) setZones(ctx context.Context, p *pass) *outcome {
	members := r.zoneMembers(p)
	sets := planZones(members)
	held := map[string]zoneHeld{}
	for _, m := range members {
		switch {
		case m.known:
			held[m.name] = m.held
		case m.readOK:
			held[m.name] = m.read
		}
	}
	if len(sets) > 0 {
		sctx, cancel := context.WithTimeout(ctx, observeTimeout)
		defer cancel()
		errs := make([]error, len(sets))
		_ = inParallel(len(sets), func(i int) error {
			// planZones names only members, so the lookup finds one.
			errs[i] = p.valkey.Zones.SetAvailabilityZone(sctx, p.membersNamed([]string{sets[i].name})[0], sets[i].zone)
			return nil
		})
		for i, s := range sets {
			if errs[i] != nil {
				delete(held, s.name)
				continue
			}
			held[s.name] = zoneHeld{zone: s.zone}
			p.log.V(1).Info("availability zone set", "node", s.name, "zone", s.zone)
		}
		if err := errors.Join(errs...); err != nil {
			p.log.Info("setting availability zones failed; retried next pass", "error", err.Error())
		}
	}
	r.rememberZones(p, held)
	return nil
}

// rememberZones records what each member's server holds, by pod UID: byName has every
// member whose setting is known after this pass, so a member missing from it (a set that
// failed) is forgotten and read again. Pods that are not members this pass (not ready) keep
// what was known of them; pods that are gone are dropped.
func (r *Reconciler) rememberZones(p *pass, byName map[string]zoneHeld) {
	members := map[string]bool{}
	for _, m := range p.members {
		members[m.Name] = true
	}
	r.memory.with(p.key, func(c *clusterMemory) {
		next := make(map[types.UID]zoneHeld, len(p.pods))
		for name, pod := range p.pods {
			if z, ok := byName[name]; ok {
				next[pod.UID] = z
			} else if z, ok := c.zones[pod.UID]; ok && !members[name] {
				next[pod.UID] = z
			}
		}
		c.zones = next
	})
}

// nodeZone is a Kubernetes node's zone label ("" without one).
func nodeZone(node *corev1.Node) string { return node.Labels[corev1.LabelTopologyZone] }
