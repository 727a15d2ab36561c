package reconciler

import (
	"context"

	"github.com/gomomento/valkey-operator/reconciler/plan"
	"github.com/gomomento/valkey-operator/valkeyops/model"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Client addresses (external.go): each server announces to clients the address its external
// Service offers, set live once the Service has one, as a live setting (livesetting.go). A
// cluster without external access reads nothing for it, unless it is turning the feature off
// (p.externalClear): then each server is read once and cleared.

// AnnounceWrites is the port of the client-address concern.
type AnnounceWrites interface {
	// SetClientAnnounce sets the client address node announces, live; ports says whether to
	// set the client ports too (Valkey 9.0+ only).
	SetClientAnnounce(ctx context.Context, node model.Node, addr model.ClientAddress, ports bool) error
}

// announceSetting is the client address: wished for each member whose Service has an address,
// and, while the feature is being turned off, the zero address for every member.
var announceSetting = liveSetting[model.ClientAddress]{
	what:   "client addresses",
	memory: func(c *clusterMemory) *map[types.UID]held[model.ClientAddress] { return &c.announced },
	wish: func(p *pass, name string, _ *corev1.Pod) (model.ClientAddress, bool) {
		addr, ok := p.external[name]
		return addr, ok || p.externalClear
	},
	seen: func(o *observation) map[string]setting[model.ClientAddress] { return o.announces },
	set: func(ctx context.Context, p *pass, node model.Node, s liveSet[model.ClientAddress]) error {
		return p.valkey.Announces.SetClientAnnounce(ctx, node, s.value, announcePorts(s))
	},
	done: func(r *Reconciler, p *pass, s liveSet[model.ClientAddress]) {
		if s.value.IP == "" {
			r.event(p, nil, ReasonClientAddress, "ClearClientAddress", "%s announces its pod address to clients again", s.name)
		} else {
			r.event(p, nil, ReasonClientAddress, "AnnounceClientAddress/"+s.name, "%s announces %s to clients", s.name, s.value)
		}
	},
}

// announcePorts says whether a set changes the client ports too: when either side has one (a
// 9.0+ server: the schema of the wish saw to that).
func announcePorts(s liveSet[model.ClientAddress]) bool { return s.value.Port != 0 || s.was.Port != 0 }

// announcesNeed: the client addresses of the members with a wish the memory does not know.
func announcesNeed(r *Reconciler, p *pass) reading {
	return reading{announces: announceSetting.toRead(r, p)}
}

// setAnnounces sets each planned server's client address, each new one recorded in an Event.
// It never ends the pass.
func (r *Reconciler) setAnnounces(ctx context.Context, p *pass) *outcome {
	if announceSetting.apply(ctx, r, p) > 0 && p.externalClear {
		// The Services go once every member is known to announce nothing (external.go).
		p.requeueWithin(r.opts.PollInterval)
	}
	return nil
}

// announcesCleared reports whether every ready server (what the next pass's members will be)
// is known to announce no client address (or to be unable to), so a disabled cluster's
// external Services may go.
func (r *Reconciler) announcesCleared(p *pass) bool {
	memo := announceSetting.heldNow(r, p)
	for _, pod := range p.pods {
		if st, _ := podState(pod); st != plan.PodReady {
			continue
		}
		if h, ok := memo[pod.UID]; !ok || (h.value.IP != "" && !h.unsupported) {
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
	if h := announceSetting.heldNow(r, p)[uid]; h.value.IP != "" {
		return h.value.String()
	}
	return ""
}
