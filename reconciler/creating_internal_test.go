package reconciler

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomomento/valkey-operator/reconciler/views"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestInParallel(t *testing.T) {
	errOdd := errors.New("odd")
	for _, tc := range []struct {
		name    string
		n       int
		fail    func(i int) error
		wantErr bool
	}{
		{"nothing to do", 0, func(int) error { return nil }, false},
		{"all succeed", 20, func(int) error { return nil }, false},
		{"some fail: every item still runs, errors joined", 20, func(i int) error {
			if i%2 == 1 {
				return errOdd
			}
			return nil
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ran, running, most atomic.Int32
			err := inParallel(tc.n, func(i int) error {
				now := running.Add(1)
				for {
					m := most.Load()
					if now <= m || most.CompareAndSwap(m, now) {
						break
					}
				}
				time.Sleep(5 * time.Millisecond)
				running.Add(-1)
				ran.Add(1)
				return tc.fail(i)
			})
			assert.EqualValues(t, tc.n, ran.Load())
			assert.LessOrEqual(t, most.Load(), int32(writeConcurrency))
			if tc.n >= writeConcurrency {
				assert.Greater(t, most.Load(), int32(1), "items run concurrently")
			}
			if !tc.wantErr {
				require.NoError(t, err)
				return
			}
			assert.ErrorIs(t, err, errOdd)
		})
	}
}

// TestPodSpecFetchesUntilServed: a node's pod fetches the snapshot its node was created with
// until the node has served, including when the operator that created the node stopped
// before writing its status (the successor makes the pod; without the snapshot its shard
// would form empty). A node that has served starts from its own data.
func TestPodSpecFetchesUntilServed(t *testing.T) {
	restore := &views.NodeRestore{Object: "backups/snap/shard-2.rdb", Keys: 33311}
	for _, tc := range []struct {
		name      string
		lifecycle string // "" = status never written
		fetches   bool
	}{
		{"status never written", "", true},
		{"Joining", views.LifecycleJoining, true},
		{"Active", views.LifecycleActive, false},
		{"Leaving", views.LifecycleLeaving, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := views.Node{U: views.NewNodeObject()}
			n.SetSpec(views.NodeSpec{Shard: 2, Restore: restore})
			if tc.lifecycle != "" {
				n.SetStatus(views.NodeStatus{Lifecycle: tc.lifecycle})
			}
			spec := podSpec(n)
			assert.Equal(t, 2, spec.Shard)
			if tc.fetches {
				assert.Equal(t, restore, spec.Restore)
			} else {
				assert.Nil(t, spec.Restore)
			}
		})
	}
}
