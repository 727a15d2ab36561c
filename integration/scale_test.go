//go:build integration

package integration

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gomomento/valkey-operator/integration/harness"
	"github.com/gomomento/valkey-operator/internal/loadgen"
	"github.com/gomomento/valkey-operator/internal/poll"
	"github.com/gomomento/valkey-operator/valkeyops"
	"github.com/gomomento/valkey-operator/valkeyops/model"
)

const scaleKeys = 100_000

// Scale 3->4 and back 4->3 with 100k keys written before and a writer running during both
// moves: every key and every acknowledged write is readable afterwards. On 9.1, with the
// replication user's rights the operator gives a cluster whose servers all run Valkey 9
// (model.ReplicationSyncsSlots), every slot moves by atomic migration; on 8.0 key by key.
func TestScaleOutAndIn(t *testing.T) {
	for _, img := range []struct{ name, image string }{{"valkey8", harness.Image()}, {"valkey9", harness.Image9()}} {
		t.Run(img.name, func(t *testing.T) {
			t.Parallel()
			atomic := img.image == harness.Image9()
			spec := aclSpec()
			spec.ReplicationSyncsSlots = atomic
			f := newFixture(t, harness.Config{Image: img.image, ACL: spec}, 3, 2, valkeyops.Options{Log: t.Logf})
			ctx := ctxT(t, 5*time.Minute)
			require.NoError(t, f.admin.Bootstrap(ctx, f.nodes, 3))
			waitHealthy(t, f, f.nodes, 3, 1, 30*time.Second)

			c := dataClient(t, f.nodes)
			fill(t, c, "k:", scaleKeys)

			added, err := f.env.StartNodes(ctx, 1, 2)
			require.NoError(t, err)
			for i := range added {
				added[i].Shard = 3
			}
			all := append(append([]model.Node(nil), f.nodes...), added...)

			w := loadgen.Start(c, loadgen.Options{Prefix: "w:", Timeout: 5 * time.Second})
			start := time.Now()
			require.NoError(t, f.admin.Bootstrap(ctx, all, 4), "join the new shard")
			moved, err := f.admin.Rebalance(ctx, all, nil)
			require.NoError(t, err)
			// The new primary's share moved, with a quarter of the keys written before (and
			// some of the writer's).
			assert.Equal(t, model.SlotCount/4, moved.Slots, "slots moved")
			assert.Greater(t, moved.Keys, scaleKeys/5, "keys moved")
			assertMovedBy(t, moved, atomic)
			t.Logf("scale-out 3->4 took %s: %+v", time.Since(start), moved)
			snap := waitHealthy(t, f, all, 4, 1, 30*time.Second)
			for _, p := range snap.Primaries() {
				n := model.CountSlots(p.Slots)
				assert.InDelta(t, model.SlotCount/4, n, 1, "primary %s owns an even share", p.Name)
			}

			// Scale in: drain the new shard's primary (whichever node that is now), then remove
			// both of its nodes.
			var leaving []string
			for _, p := range snap.Primaries() {
				if p.Shard == 3 {
					leaving = append(leaving, p.Name)
				}
			}
			require.Len(t, leaving, 1)
			start = time.Now()
			moved, err = f.admin.Rebalance(ctx, all, leaving)
			require.NoError(t, err)
			assert.Equal(t, model.CountSlots(snap.ByName(leaving[0]).Slots), moved.Slots, "the leaving primary's slots moved")
			assert.Greater(t, moved.Keys, scaleKeys/5, "keys moved")
			assertMovedBy(t, moved, atomic)
			t.Logf("scale-in 4->3 took %s: %+v", time.Since(start), moved)
			res := w.Stop()
			acked := res.Acked
			t.Logf("writer: %d acknowledged, %d failed", len(acked), res.Failed)
			require.NotEmpty(t, acked)

			snap, err = f.admin.Observe(ctx, all)
			require.NoError(t, err)
			require.Empty(t, snap.ByName(leaving[0]).Slots)
			// As the operator does: remove each node, then stop its server (it deletes the pod).
			// A node that does not answer within observe's bound is tried again, as the
			// operator's next pass would.
			remove := func(name string) {
				t.Helper()
				require.NoError(t, poll.Until(ctx, 500*time.Millisecond, 30*time.Second, "remove "+name, func(ctx context.Context) (bool, string, error) {
					err := f.admin.RemoveNode(ctx, all, name)
					if errors.Is(err, model.ErrUnreachable) {
						return false, err.Error(), nil
					}
					return err == nil, "", err
				}))
				require.NoError(t, f.env.Kill(ctx, name))
			}
			for _, n := range added {
				if n.Name != leaving[0] {
					remove(n.Name)
				}
			}
			remove(leaving[0])
			waitHealthy(t, f, f.nodes, 3, 1, 30*time.Second)

			verify(t, c, "k:", seq(scaleKeys))
			verify(t, c, "w:", acked)
		})
	}
}

// assertMovedBy: every slot moved atomically (CLUSTER MIGRATESLOTS) or every one key by key.
func assertMovedBy(t *testing.T, moved valkeyops.MoveStats, atomic bool) {
	t.Helper()
	if atomic {
		assert.Equal(t, moved.Slots, moved.AtomicSlots, "every slot moved by atomic migration: %+v", moved)
		assert.Zero(t, moved.MigrateSlots, "no slot fell back to MIGRATE: %+v", moved)
	} else {
		assert.Equal(t, moved.Slots, moved.MigrateSlots, "every slot moved key by key: %+v", moved)
		assert.Zero(t, moved.AtomicSlots, "%+v", moved)
	}
}
