package reconciler

import (
	"context"
	"sync"
	"time"

	"github.com/gomomento/valkey-operator/reconciler/plan"
	"github.com/gomomento/valkey-operator/valkeyops"
	"k8s.io/apimachinery/pkg/types"
)

// moveTimeout bounds one slot move run in the background. Its progress lives in Valkey
// (slots owned, slots left open), so a run cut short is finished by the next one.
const moveTimeout = 30 * time.Minute

// tasks runs a cluster's long data moves off the reconcile workers: moving the keys of
// thousands of slots can take minutes, and a worker held that long would stall every other
// cluster. At most one task per cluster exists, and while it runs the cluster's passes do not
// touch its servers at all (observeActive), so it is still the cluster's one topology action
// at a time, and no credential or certificate change closes the client it uses. A task is
// memory only:
// an operator that dies mid-move leaves slots open in Valkey, which the next pass's planner
// sees and resumes (plan's resumeMoves).
type tasks struct {
	mu      sync.Mutex
	running map[types.NamespacedName]*task
}

// task is one background action and, once done is closed, its result.
type task struct {
	action plan.Action
	cancel context.CancelFunc
	done   chan struct{}
	moved  valkeyops.MoveStats
	err    error
}

// start runs fn for the cluster in the background, bounded by moveTimeout. ctx is the
// pass's: controller-runtime cancels it only when the manager stops (no per-reconcile
// timeout is configured), so a task outlives its pass but never its manager, and a new
// leader never starts a move while the old one's is still running.
func (t *tasks) start(ctx context.Context, key types.NamespacedName, a plan.Action, fn func(context.Context) (valkeyops.MoveStats, error)) {
	tctx, cancel := context.WithTimeout(ctx, moveTimeout)
	tk := &task{action: a, cancel: cancel, done: make(chan struct{})}
	t.mu.Lock()
	if t.running == nil {
		t.running = map[types.NamespacedName]*task{}
	}
	t.running[key] = tk
	t.mu.Unlock()
	go func() {
		defer close(tk.done)
		defer cancel()
		tk.moved, tk.err = fn(tctx)
	}()
}

// finished reports the cluster's task: busy while it runs; once it has ended, the task
// (returned exactly once, then forgotten) so its outcome can be recorded.
func (t *tasks) finished(key types.NamespacedName) (ended *task, busy bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	tk := t.running[key]
	if tk == nil {
		return nil, false
	}
	select {
	case <-tk.done:
		delete(t.running, key)
		return tk, false
	default:
		return nil, true
	}
}

// busy reports whether the cluster's task is still running.
func (t *tasks) busy(key types.NamespacedName) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	tk := t.running[key]
	if tk == nil {
		return false
	}
	select {
	case <-tk.done:
		return false
	default:
		return true
	}
}

// stop cancels the cluster's task, if any (the cluster was deleted).
func (t *tasks) stop(key types.NamespacedName) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if tk := t.running[key]; tk != nil {
		tk.cancel()
		delete(t.running, key)
	}
}
