package reconciler

import (
	"context"
	"errors"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// errServerExited ends a pass's reads of the servers early: one of the cluster's servers
// exited while they ran (cause of the read context's cancellation).
var errServerExited = errors.New("a server of the cluster exited during the pass's reads")

// A pod event can cut short the reads a pass is making of its cluster's servers
// (clusterMemory.reads). When a zone goes dark, the first pass to run may have started from a
// cache that still showed its pods Ready: it would wait on each dead server until its
// deadline, and only the pass after it could fail their slots over. The kubelet reports the
// exits at once, so the pass stops reading as soon as one arrives, and the next pass plans
// from the fresh cache.

// readsBegin returns the context for a pass's reads of cluster key's servers, cancelled with
// errServerExited should one of its servers exit meanwhile, and the function that ends it.
// Only reads run under it: an action is never cut short half-way by an event.
func (m *memory) readsBegin(ctx context.Context, key types.NamespacedName) (context.Context, func()) {
	rctx, cancel := context.WithCancelCause(ctx)
	m.with(key, func(c *clusterMemory) { c.reads = cancel })
	return rctx, func() {
		m.peek(key, func(c *clusterMemory) { c.reads = nil })
		cancel(nil)
	}
}

// serverExited interrupts cluster key's reads under way, if any.
func (m *memory) serverExited(key types.NamespacedName) {
	m.peek(key, func(c *clusterMemory) {
		if c.reads != nil {
			c.reads(errServerExited)
		}
	})
}

// beginReads starts a pass's reads of its members (memory.readsBegin) and, once they can be
// interrupted, looks at the members' pods in the cache again: an exit that arrived after the
// pass listed its pods but before its reads began would otherwise interrupt nothing, and the
// reads would wait on a dead server until their deadline.
func (r *Reconciler) beginReads(ctx context.Context, p *pass) (context.Context, func()) {
	rctx, end := r.memory.readsBegin(ctx, p.key)
	for _, m := range p.members {
		pod := &corev1.Pod{}
		if err := r.client.Get(ctx, types.NamespacedName{Namespace: p.key.Namespace, Name: m.Name}, pod); err == nil && serverExited(pod) {
			r.memory.serverExited(p.key)
			break
		}
	}
	return rctx, end
}

// interrupted reports whether ctx (from begin) was ended by a server's exit.
func interrupted(ctx context.Context) bool {
	return errors.Is(context.Cause(ctx), errServerExited)
}

// podEvents enqueues a Valkey pod's cluster on every event, and on an update that shows the
// pod's server newly exited it first interrupts that cluster's reads under way.
type podEvents struct {
	handler.EventHandler // enqueues the pod's cluster
	reads                *memory
}

func newPodEvents(reads *memory) podEvents {
	return podEvents{EventHandler: handler.EnqueueRequestsFromMapFunc(labelledToCluster), reads: reads}
}

func (h podEvents) Update(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	oldPod, okOld := e.ObjectOld.(*corev1.Pod)
	newPod, okNew := e.ObjectNew.(*corev1.Pod)
	if okOld && okNew && serverExited(newPod) && !serverExited(oldPod) {
		for _, req := range labelledToCluster(ctx, newPod) {
			h.reads.serverExited(req.NamespacedName)
		}
	}
	h.EventHandler.Update(ctx, e, q)
}
