package reconciler

import (
	"context"
	"errors"
	"sync"

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

// serverReads lets a pod event cut short the reads a pass is making of its cluster's servers.
// When a zone goes dark, the first pass to run may have started from a cache that still
// showed its pods Ready: it would wait on each dead server until its deadline, and only the
// pass after it could fail their slots over. The kubelet reports the exits at once, so the
// pass stops reading as soon as one arrives, and the next pass plans from the fresh cache.
// The zero value is ready.
type serverReads struct {
	mu      sync.Mutex
	running map[types.NamespacedName]context.CancelCauseFunc
}

// begin returns the context for a pass's reads of cluster key's servers, cancelled with
// errServerExited should one of its servers exit meanwhile, and the function that ends it.
// Only reads run under it: an action is never cut short half-way by an event.
func (s *serverReads) begin(ctx context.Context, key types.NamespacedName) (context.Context, func()) {
	rctx, cancel := context.WithCancelCause(ctx)
	s.mu.Lock()
	if s.running == nil {
		s.running = map[types.NamespacedName]context.CancelCauseFunc{}
	}
	s.running[key] = cancel
	s.mu.Unlock()
	return rctx, func() {
		s.mu.Lock()
		delete(s.running, key)
		s.mu.Unlock()
		cancel(nil)
	}
}

// serverExited interrupts cluster key's reads under way, if any.
func (s *serverReads) serverExited(key types.NamespacedName) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cancel := s.running[key]; cancel != nil {
		cancel(errServerExited)
	}
}

// beginReads starts a pass's reads of its members (serverReads.begin) and, once they can be
// interrupted, looks at the members' pods in the cache again: an exit that arrived after the
// pass listed its pods but before its reads began would otherwise interrupt nothing, and the
// reads would wait on a dead server until their deadline.
func (r *Reconciler) beginReads(ctx context.Context, p *pass) (context.Context, func()) {
	rctx, end := r.reads.begin(ctx, p.key)
	for _, m := range p.members {
		pod := &corev1.Pod{}
		if err := r.client.Get(ctx, types.NamespacedName{Namespace: p.key.Namespace, Name: m.Name}, pod); err == nil && serverExited(pod) {
			r.reads.serverExited(p.key)
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
	reads                *serverReads
}

func newPodEvents(reads *serverReads) podEvents {
	return podEvents{EventHandler: handler.EnqueueRequestsFromMapFunc(podToCluster), reads: reads}
}

func (h podEvents) Update(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	oldPod, okOld := e.ObjectOld.(*corev1.Pod)
	newPod, okNew := e.ObjectNew.(*corev1.Pod)
	if okOld && okNew && serverExited(newPod) && !serverExited(oldPod) {
		for _, req := range podToCluster(ctx, newPod) {
			h.reads.serverExited(req.NamespacedName)
		}
	}
	h.EventHandler.Update(ctx, e, q)
}
