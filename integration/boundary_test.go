//go:build integration

package integration

import (
	"context"
	"testing"
	"time"

	"github.com/gomomento/valkey-operator/integration/harness"
	"github.com/gomomento/valkey-operator/reconciler"
	"github.com/gomomento/valkey-operator/reconciler/render"
	"github.com/gomomento/valkey-operator/reconciler/views"
	"github.com/gomomento/valkey-operator/valkeyops"
	"github.com/gomomento/valkey-operator/valkeyops/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/types"
)

// TestReconcilerBoundaryFormsRealCluster drives real Valkey containers through the
// reconciler's production boundary exactly as a Creating pass does: the ACL file rendered
// from the reconciler's ACL input, one Connect with the operator's credentials, Bootstrap
// from shard-grouped nodes, then Observe until model.Health finds the Active criteria
// of docs/status.md met.
func TestReconcilerBoundaryFormsRealCluster(t *testing.T) {
	t.Parallel()
	for _, image := range []string{harness.Image(), harness.Image9()} {
		t.Run(image, func(t *testing.T) {
			t.Parallel()
			requireDocker(t)
			const shards, perShard = 2, 2
			spec, missing := render.ACLSpec(nil, true, func(string) (views.Role, bool) { return views.Role{}, false }, "default-pw", "operator-pw")
			require.Empty(t, missing)

			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			env, err := harness.New(ctx, harness.Config{Image: image, ACL: spec})
			require.NoError(t, err)
			t.Cleanup(func() {
				cctx, ccancel := context.WithTimeout(context.Background(), time.Minute)
				defer ccancel()
				_ = env.Close(cctx)
			})
			nodes, err := env.StartNodes(ctx, shards, perShard)
			require.NoError(t, err)

			pool := valkeyops.NewPool(nil, t.Logf)
			defer pool.Close()
			v := reconciler.PoolValkey{Pool: pool}
			key := types.NamespacedName{Namespace: "it", Name: "c"}
			cred := valkeyops.Credentials{Username: model.OperatorUser, Password: "operator-pw"}
			client, err := v.Connect(ctx, key, cred)
			require.NoError(t, err)

			start := time.Now()
			require.NoError(t, client.Topology.Bootstrap(ctx, nodes, shards))
			var (
				snap     *model.Snapshot
				problems []string
			)
			require.Eventually(t, func() bool {
				snap, err = client.Reads.Observe(ctx, nodes)
				if err != nil {
					return false
				}
				problems = model.Health(snap, shards, perShard-1)
				return len(problems) == 0
			}, time.Minute, 100*time.Millisecond, "healthy; last problems %v (err %v)", problems, err)
			t.Logf("bootstrap %dx%d healthy through the reconciler's boundary in %s", shards, perShard-1, time.Since(start).Round(time.Millisecond))

			roles := map[model.Role]int{}
			for _, n := range snap.Nodes {
				assert.True(t, n.Reachable, n.Name)
				assert.Len(t, n.ID, 40, n.Name)
				roles[n.Role]++
			}
			assert.Equal(t, map[model.Role]int{model.RolePrimary: shards, model.RoleReplica: shards * (perShard - 1)}, roles)

			again, err := v.Connect(ctx, key, cred)
			require.NoError(t, err)
			assert.Same(t, client.Reads, again.Reads, "unchanged credentials reuse the pooled client")

			// A wrong password is refused: auth is really on.
			bad := cred
			bad.Password = "wrong"
			other, err := v.Connect(ctx, types.NamespacedName{Namespace: "it", Name: "other"}, bad)
			require.NoError(t, err, "connections open lazily: the server is what refuses")
			s, err := other.Reads.Observe(ctx, nodes[:1])
			require.NoError(t, err)
			assert.False(t, s.Nodes[0].Reachable, "wrong password must not reach the node")
			assert.ErrorContains(t, s.Nodes[0].Err, "WRONGPASS", "refused for its credentials, not for anything else")
		})
	}
}
