//go:build integration

package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gomomento/valkey-operator/integration/harness"
	"github.com/gomomento/valkey-operator/valkeyops"
	"github.com/gomomento/valkey-operator/valkeyops/model"
)

// TestTopologyRefusals: what the topology ports refuse on real servers, with the sentinel
// (or the server's own reply) the reconciler's day-2 fake gives too (reconciler's
// TestDay2FakeRefuses), and the cluster's roles and slots unchanged by each refusal. The cases
// run in order on one formed 2x1 cluster; the FORGET of a replica's own primary goes last,
// since the other nodes do forget it.
func TestTopologyRefusals(t *testing.T) {
	t.Parallel()
	for _, image := range []string{harness.Image(), harness.Image9()} {
		t.Run(image, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, harness.Config{Image: image}, 2, 2, valkeyops.Options{})
			ctx := ctxT(t, 3*time.Minute)
			require.NoError(t, f.admin.Bootstrap(ctx, f.nodes, 2))
			snap := waitHealthy(t, f, f.nodes, 2, 1, 30*time.Second)
			var primary, replica *model.NodeState
			for _, p := range snap.Primaries() {
				if p.Shard == 0 {
					primary = p
				}
			}
			require.NotNil(t, primary)
			replica = snap.ReplicasOf(primary.ID)[0]
			layout := func() map[string]string {
				s, err := f.admin.Observe(ctx, f.nodes)
				require.NoError(t, err)
				out := map[string]string{}
				for _, st := range s.Nodes {
					out[st.Name] = fmt.Sprintf("%s primary=%s slots=%s", st.Role, st.PrimaryID, model.FormatRanges(st.Slots))
				}
				return out
			}
			want := layout()

			tests := []struct {
				name string
				do   func(ctx context.Context) error
				is   error  // errors.Is target; nil for a server's reply
				msg  string // what the error says
			}{
				{name: "remove a node holding slots", is: model.ErrUnsafe,
					do: func(ctx context.Context) error { return f.admin.RemoveNode(ctx, f.nodes, primary.Name) }},
				{name: "remove a node not among nodes", is: model.ErrInvalidSpec,
					do: func(ctx context.Context) error {
						return f.admin.RemoveNode(ctx, without(f.nodes, primary.Name), primary.Name)
					}},
				{name: "make a slot-holding primary a replica", is: model.ErrUnsafe,
					do: func(ctx context.Context) error { return f.admin.Replicate(ctx, f.nodes, primary.Name, 1) }},
				{name: "assign slots to a replica", is: model.ErrUnsafe,
					do: func(ctx context.Context) error {
						return f.admin.AssignSlots(ctx, f.nodes, replica.Name, []model.SlotRange{{Start: 0, End: 0}})
					}},
				{name: "bootstrap a shard without nodes", is: model.ErrInvalidSpec,
					do: func(ctx context.Context) error { return f.admin.Bootstrap(ctx, f.nodes, 3) }},
				{name: "drain every primary", is: model.ErrInvalidSpec,
					do: func(ctx context.Context) error {
						var all []string
						for _, p := range snap.Primaries() {
							all = append(all, p.Name)
						}
						_, err := f.admin.Rebalance(ctx, f.nodes, all)
						return err
					}},
				{name: "a replica forgets its own primary", msg: "Can't forget my master!",
					do: func(ctx context.Context) error { return f.admin.Forget(ctx, f.nodes, []string{primary.ID}) }},
			}
			for _, tc := range tests {
				err := tc.do(ctx)
				require.Error(t, err, tc.name)
				if tc.is != nil {
					assert.ErrorIs(t, err, tc.is, tc.name)
				}
				assert.Contains(t, err.Error(), tc.msg, tc.name)
				var op *model.OpError
				assert.ErrorAs(t, err, &op, "%s: a model.OpError", tc.name)
				assert.Equal(t, want, layout(), "%s: no slot or role changed", tc.name)
			}
		})
	}
}
