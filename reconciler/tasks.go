package reconciler

import (
	"context"
	"time"

	"github.com/gomomento/valkey-operator/reconciler/plan"
	"github.com/gomomento/valkey-operator/valkeyops"
	"k8s.io/apimachinery/pkg/types"
)

// moveTimeout bounds one slot move run in the background. Its progress lives in Valkey
// (slots owned, slots left open), so a run cut short is finished by the next one.
const moveTimeout = 30 * time.Minute

// A cluster's long data moves run off the reconcile workers (clusterMemory.move): moving the
// keys of thousands of slots can take minutes, and a worker held that long would stall every
// other cluster. At most one move per cluster runs, and while it runs the cluster's passes do
// not touch its servers at all (observeActive), so it is still the cluster's one topology
// action at a time, and no credential or certificate change closes the client it uses. A
// move is memory only: an operator that dies mid-move leaves slots open in Valkey, which the
// next pass's planner sees and resumes (plan's resumeMoves).

// task is one background action and, once done is closed, its result.
type task struct {
	action plan.Action
	cancel context.CancelFunc
	done   chan struct{}
	moved  valkeyops.MoveStats
	err    error
}

// ended reports whether the task has finished.
func (tk *task) ended() bool {
	select {
	case <-tk.done:
		return true
	default:
		return false
	}
}

// startMove runs fn for the cluster in the background, bounded by moveTimeout. ctx is the
// pass's: controller-runtime cancels it only when the manager stops (no per-reconcile
// timeout is configured), so a move outlives its pass but never its manager, and a new
// leader never starts a move while the old one's is still running.
func (m *memory) startMove(ctx context.Context, key types.NamespacedName, a plan.Action, fn func(context.Context) (valkeyops.MoveStats, error)) {
	tctx, cancel := context.WithTimeout(ctx, moveTimeout)
	tk := &task{action: a, cancel: cancel, done: make(chan struct{})}
	m.with(key, func(c *clusterMemory) { c.move = tk })
	go func() {
		defer close(tk.done)
		defer cancel()
		tk.moved, tk.err = fn(tctx)
	}()
}

// moveFinished reports the cluster's move: busy while it runs; once it has ended, the task
// (returned exactly once, then forgotten) so its outcome can be recorded.
func (m *memory) moveFinished(key types.NamespacedName) (ended *task, busy bool) {
	m.peek(key, func(c *clusterMemory) {
		switch {
		case c.move == nil:
		case c.move.ended():
			ended, c.move = c.move, nil
		default:
			busy = true
		}
	})
	return ended, busy
}

// moving reports whether the cluster's move is still running.
func (m *memory) moving(key types.NamespacedName) (busy bool) {
	m.peek(key, func(c *clusterMemory) { busy = c.move != nil && !c.move.ended() })
	return busy
}
