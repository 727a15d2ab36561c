package reconciler

import (
	"context"
	"errors"

	"github.com/gomomento/valkey-operator/reconciler/plan"
	"github.com/gomomento/valkey-operator/valkeyops/model"
	"k8s.io/apimachinery/pkg/types"
)

// Client addresses (external.go): each server announces to clients the address its external
// Service offers, set live once the Service has one. It follows the zones concern's shape
// (zones.go): what each server announces is remembered per pod UID, so an idle cluster reads
// and writes nothing for it; a pod the memory does not know is read once in the pass's
// observation and set only when it announces something else. A cluster without external
// access reads nothing either, unless it is turning the feature off (p.externalClear): then
// each server is read once and cleared.

// AnnounceWrites is the port of the client-address concern.
type AnnounceWrites interface {
	// SetClientAnnounce sets the client address node announces, live; ports says whether to
	// set the client ports too (Valkey 9.0+ only).
	SetClientAnnounce(ctx context.Context, node model.Node, addr model.ClientAddress, ports bool) error
}

// announceHeld is what a server announces, or that its release cannot (never set, nor read
// again).
type announceHeld struct {
	addr        model.ClientAddress
	unsupported bool
}

// announceMember is one member as the planner sees it.
type announceMember struct {
	name string
	// want is the address it should announce; wanted whether this pass has a wish for it
	// (an address of its Service, or the zero one while clearing).
	want   model.ClientAddress
	wanted bool
	// held is what the memory says the server announces, if known.
	held  announceHeld
	known bool
	// read is what this pass's observation read of it, if it was read.
	read   announceHeld
	readOK bool
}

// announceSet is one planned CONFIG SET.
type announceSet struct {
	name  string
	addr  model.ClientAddress
	ports bool
}

// announcesToRead are the members with a wish whose server the memory does not know.
func announcesToRead(members []announceMember) []string {
	var out []string
	for _, m := range members {
		if m.wanted && !m.known {
			out = append(out, m.name)
		}
	}
	return out
}

// planAnnounces decides which servers are set to which client address: those known, or just
// read, to announce another. The ports are set when either side has one (a 9.0+ server: the
// schema of the wish saw to that). A server neither known nor read waits for the next pass;
// one whose release cannot announce is left alone.
func planAnnounces(members []announceMember) []announceSet {
	var out []announceSet
	for _, m := range members {
		now, ok := m.held, m.known
		if !ok {
			now, ok = m.read, m.readOK
		}
		if m.wanted && ok && !now.unsupported && now.addr != m.want {
			out = append(out, announceSet{m.name, m.want, m.want.Port != 0 || now.addr.Port != 0})
		}
	}
	return out
}

// announceMembers lists the pass's members with their wish and what is known of them.
func (r *Reconciler) announceMembers(p *pass) []announceMember {
	var held map[types.UID]announceHeld
	r.memory.peek(p.key, func(c *clusterMemory) { held = c.announced })
	out := make([]announceMember, 0, len(p.members))
	for _, m := range p.members {
		pod := p.pods[m.Name]
		if pod == nil {
			continue
		}
		am := announceMember{name: m.Name}
		am.want, am.wanted = p.external[m.Name]
		am.wanted = am.wanted || p.externalClear
		am.held, am.known = held[pod.UID]
		if p.seen != nil {
			if got, ok := p.seen.announces[m.Name]; ok {
				am.read.addr, am.read.unsupported = got.value, errors.Is(got.err, model.ErrUnsupported)
				am.readOK = got.err == nil || am.read.unsupported
			}
		}
		out = append(out, am)
	}
	return out
}

// announcesNeed: the client addresses of the members with a wish the memory does not know.
func announcesNeed(r *Reconciler, p *pass) reading {
	return reading{announces: announcesToRead(r.announceMembers(p))}
}

// setAnnounces sets each planned server's client address, records each new one in an Event,
// and remembers what every member now announces. It never ends the pass: a server that
// refuses is logged and planned again on the next pass.
func (r *Reconciler) setAnnounces(ctx context.Context, p *pass) *outcome {
	members := r.announceMembers(p)
	sets := planAnnounces(members)
	held := map[string]announceHeld{}
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
			// planAnnounces names only members, so the lookup finds one.
			errs[i] = p.valkey.Announces.SetClientAnnounce(sctx, p.membersNamed([]string{sets[i].name})[0], sets[i].addr, sets[i].ports)
			return nil
		})
		for i, s := range sets {
			if errs[i] != nil {
				delete(held, s.name)
				continue
			}
			held[s.name] = announceHeld{addr: s.addr}
			if s.addr.IP == "" {
				r.event(p, nil, ReasonClientAddress, "ClearClientAddress", "%s announces its pod address to clients again", s.name)
			} else {
				r.event(p, nil, ReasonClientAddress, "AnnounceClientAddress/"+s.name, "%s announces %s to clients", s.name, s.addr)
			}
		}
		if err := errors.Join(errs...); err != nil {
			p.log.Info("setting client addresses failed; retried next pass", "error", err.Error())
		}
		if p.externalClear {
			// The Services go once every member is known to announce nothing (external.go).
			p.requeueWithin(r.opts.PollInterval)
		}
	}
	r.rememberAnnounces(p, held)
	return nil
}

// rememberAnnounces records what each member's server announces, by pod UID, the way
// rememberZones does.
func (r *Reconciler) rememberAnnounces(p *pass, byName map[string]announceHeld) {
	members := map[string]bool{}
	for _, m := range p.members {
		members[m.Name] = true
	}
	r.memory.with(p.key, func(c *clusterMemory) {
		next := make(map[types.UID]announceHeld, len(p.pods))
		for name, pod := range p.pods {
			if a, ok := byName[name]; ok {
				next[pod.UID] = a
			} else if a, ok := c.announced[pod.UID]; ok && !members[name] {
				next[pod.UID] = a
			}
		}
		c.announced = next
	})
}

// announcesCleared reports whether every ready server (what the next pass's members will be)
// is known to announce no client address (or
// to be unable to), so a disabled cluster's external Services may go.
func (r *Reconciler) announcesCleared(p *pass) bool {
	var held map[types.UID]announceHeld
	r.memory.peek(p.key, func(c *clusterMemory) { held = c.announced })
	for _, pod := range p.pods {
		if st, _ := podState(pod); st != plan.PodReady {
			continue
		}
		if h, ok := held[pod.UID]; !ok || (h.addr.IP != "" && !h.unsupported) {
			return false
		}
	}
	return true
}

// clientAddr is the client address a member's server was told to announce, as Observe needs
// it (model.Node.ClientAddr, "" for none): its Service's, else, while the feature is being
// turned off, the one the memory says it still announces.
func (r *Reconciler) clientAddr(p *pass, name string, uid types.UID) string {
	if a := p.external[name]; a.IP != "" {
		return a.String()
	}
	var held announceHeld
	r.memory.peek(p.key, func(c *clusterMemory) { held = c.announced[uid] })
	if held.addr.IP != "" {
		return held.addr.String()
	}
	return ""
}
