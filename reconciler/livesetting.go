package reconciler

import (
	"context"
	"errors"

	"github.com/gomomento/valkey-operator/valkeyops/model"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Settings set live per pod (zones.go, announce.go). Some of a server's settings are not known
// when its config file is written: its Kubernetes node's zone, its external Service's address.
// Each is set live once known, and nothing of it enters the pod or its spec hash, so an
// operator that starts doing this rolls no existing cluster.
//
// What each server holds is remembered per pod UID (the server container never restarts in its
// pod, so a pod UID is one server): an idle cluster reads and writes nothing for these. A pod
// the memory does not know (new, or after an operator restart) is read once in the pass's
// observation and set only when it holds something else. A release without the setting is
// neither set nor read again.

// held is what a server holds of a live setting, or that its release has no such setting.
type held[T comparable] struct {
	value       T
	unsupported bool
}

// liveMember is one member as a live setting's planner sees it.
type liveMember[T comparable] struct {
	name string
	// want is what it should hold; wanted whether this pass has a wish for it at all.
	want   T
	wanted bool
	// held is what the memory says the server holds, if known.
	held  held[T]
	known bool
	// read is what this pass's observation read of the server, if it was read.
	read   held[T]
	readOK bool
}

// liveSet is one planned set: the value, and what the server held before it.
type liveSet[T comparable] struct {
	name       string
	value, was T
}

// liveToRead are the members with a wish whose server the memory does not know: their
// setting is read before planning.
func liveToRead[T comparable](members []liveMember[T]) []string {
	var out []string
	for _, m := range members {
		if m.wanted && !m.known {
			out = append(out, m.name)
		}
	}
	return out
}

// planLive decides which servers are set to what: those with a wish known, or just read, to
// hold something else. A server neither known nor read (unreachable this pass) waits for the
// next pass; one whose release has no such setting is left alone.
func planLive[T comparable](members []liveMember[T]) []liveSet[T] {
	var out []liveSet[T]
	for _, m := range members {
		now, ok := m.held, m.known
		if !ok {
			now, ok = m.read, m.readOK
		}
		if m.wanted && ok && !now.unsupported && now.value != m.want {
			out = append(out, liveSet[T]{name: m.name, value: m.want, was: now.value})
		}
	}
	return out
}

// liveSetting is one setting set live per pod: where the cluster's memory keeps it, what each
// member should hold, what the observation read of it, and how one server is set.
type liveSetting[T comparable] struct {
	// what names the setting in logs ("availability zones").
	what string
	// memory is the setting's map, by pod UID, in a cluster's memory.
	memory func(c *clusterMemory) *map[types.UID]held[T]
	// wish is what member name, in pod, should hold this pass, if there is a wish for it.
	wish func(p *pass, name string, pod *corev1.Pod) (T, bool)
	// seen is what an observation read of the setting, by member name.
	seen func(o *observation) map[string]setting[T]
	// set sets one server; done reports one set that succeeded.
	set  func(ctx context.Context, p *pass, node model.Node, s liveSet[T]) error
	done func(r *Reconciler, p *pass, s liveSet[T])
}

// heldNow is what the memory holds of the setting for p's cluster. The map is replaced, never
// changed, once stored (remember), and a cluster's passes never run two at a time: it is safe
// to read outside the lock.
func (l liveSetting[T]) heldNow(r *Reconciler, p *pass) map[types.UID]held[T] {
	var out map[types.UID]held[T]
	r.memory.peek(p.key, func(c *clusterMemory) { out = *l.memory(c) })
	return out
}

// members lists the pass's members with their wish and what is known of their server.
func (l liveSetting[T]) members(r *Reconciler, p *pass) []liveMember[T] {
	memo := l.heldNow(r, p)
	var seen map[string]setting[T]
	if p.seen != nil {
		seen = l.seen(p.seen)
	}
	out := make([]liveMember[T], 0, len(p.members))
	for _, m := range p.members {
		pod := p.pods[m.Name]
		if pod == nil {
			continue
		}
		lm := liveMember[T]{name: m.Name}
		lm.want, lm.wanted = l.wish(p, m.Name, pod)
		lm.held, lm.known = memo[pod.UID]
		if got, ok := seen[m.Name]; ok {
			lm.read = held[T]{value: got.value, unsupported: errors.Is(got.err, model.ErrUnsupported)}
			lm.readOK = got.err == nil || lm.read.unsupported
		}
		out = append(out, lm)
	}
	return out
}

// toRead names the members whose setting this pass's observation must read.
func (l liveSetting[T]) toRead(r *Reconciler, p *pass) []string {
	return liveToRead(l.members(r, p))
}

// apply sets each planned server and remembers what every member now holds; it returns how
// many sets were planned. A server that refuses is logged and planned again on the next pass.
func (l liveSetting[T]) apply(ctx context.Context, r *Reconciler, p *pass) int {
	members := l.members(r, p)
	sets := planLive(members)
	byName := map[string]held[T]{}
	for _, m := range members {
		switch {
		case m.known:
			byName[m.name] = m.held
		case m.readOK:
			byName[m.name] = m.read
		}
	}
	if len(sets) > 0 {
		sctx, cancel := context.WithTimeout(ctx, observeTimeout)
		defer cancel()
		errs := make([]error, len(sets))
		_ = inParallel(len(sets), func(i int) error {
			// planLive names only members, so the lookup finds one.
			errs[i] = l.set(sctx, p, p.membersNamed([]string{sets[i].name})[0], sets[i])
			return nil
		})
		for i, s := range sets {
			if errs[i] != nil {
				delete(byName, s.name)
				continue
			}
			byName[s.name] = held[T]{value: s.value}
			l.done(r, p, s)
		}
		if err := errors.Join(errs...); err != nil {
			p.log.Info("setting "+l.what+" failed; retried next pass", "error", err.Error())
		}
	}
	l.remember(r, p, byName)
	return len(sets)
}

// remember records what each member's server holds, by pod UID: byName has every member
// whose setting is known after this pass, so a member missing from it (a set that failed) is
// forgotten and read again. Pods that are not members this pass (not ready) keep what was
// known of them; pods that are gone are dropped.
func (l liveSetting[T]) remember(r *Reconciler, p *pass, byName map[string]held[T]) {
	members := map[string]bool{}
	for _, m := range p.members {
		members[m.Name] = true
	}
	r.memory.with(p.key, func(c *clusterMemory) {
		old := *l.memory(c)
		next := make(map[types.UID]held[T], len(p.pods))
		for name, pod := range p.pods {
			if h, ok := byName[name]; ok {
				next[pod.UID] = h
			} else if h, ok := old[pod.UID]; ok && !members[name] {
				next[pod.UID] = h
			}
		}
		*l.memory(c) = next
	})
}
