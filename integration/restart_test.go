//go:build integration

package integration

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/gomomento/valkey-operator/integration/harness"
	"github.com/gomomento/valkey-operator/valkeyops"
	"github.com/gomomento/valkey-operator/valkeyops/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReintroduceAfterEveryNodeMoved: every server of a 2x1 cluster with AOF on its volume is
// stopped and started again on that volume at a new address, as a full restart of a durable
// cluster does. Each comes back with its identity and data but knows its peers only at their
// old addresses, so none reaches another; Reintroduce MEETs them at the new ones, and the
// cluster is healthy again with every key. A server that knows no other node (a cluster of
// its own) is refused, never met.
func TestReintroduceAfterEveryNodeMoved(t *testing.T) {
	t.Parallel()
	for _, image := range []string{harness.Image(), harness.Image9()} {
		t.Run(image, func(t *testing.T) {
			t.Parallel()
			// A restarted server keeps only what its config says: its replication login comes
			// from there (the operator's pods include it from their auth Secret), not from the
			// CONFIG SET of the run before.
			acl := aclSpec()
			user, pw := model.ReplicationLogin(acl.OperatorPassword)
			f := newFixture(t, harness.Config{Image: image, ACL: acl, Volumes: true,
				Args: []string{"--appendonly", "yes", "--dir", "/data", "--masteruser", user, "--masterauth", pw}}, 2, 2, valkeyops.Options{})
			ctx := ctxT(t, 4*time.Minute)
			require.NoError(t, f.admin.Bootstrap(ctx, f.nodes, 2))
			before := waitHealthy(t, f, f.nodes, 2, 1, 30*time.Second)
			c := dataClient(t, f.nodes)
			fill(t, c, "r:", 5_000)
			c.Close()

			for _, n := range f.nodes {
				require.NoError(t, f.env.Stop(ctx, n.Name))
			}
			require.NoError(t, f.env.Occupy(ctx, len(f.nodes)), "the freed addresses taken, as a pod's would be")
			moved := make([]model.Node, len(f.nodes))
			errs := make([]error, len(f.nodes))
			var wg sync.WaitGroup
			for i, n := range f.nodes {
				wg.Add(1)
				go func() { defer wg.Done(); moved[i], errs[i] = f.env.StartAgain(ctx, n.Name) }()
			}
			wg.Wait()
			for i, n := range f.nodes {
				require.NoError(t, errs[i])
				require.NotEqual(t, n.Addr, moved[i].Addr, "%s restarted at a new address", n.Name)
			}

			snap, err := f.admin.Observe(ctx, moved)
			require.NoError(t, err)
			for _, st := range snap.Nodes {
				require.True(t, st.Reachable, "%s: %v", st.Name, st.Err)
				assert.Equal(t, before.ByName(st.Name).ID, st.ID, "%s kept its identity (nodes.conf on its volume)", st.Name)
			}
			assert.NotEmpty(t, model.Health(snap, 2, 1), "the servers do not find each other at their new addresses by themselves")

			require.NoError(t, f.admin.Reintroduce(ctx, moved))
			after := waitHealthy(t, f, moved, 2, 1, time.Minute)
			for _, st := range after.Nodes {
				assert.Equal(t, before.ByName(st.Name).ID, st.ID)
				assert.Equal(t, before.ByName(st.Name).Role, st.Role, "%s kept its role", st.Name)
			}
			c = dataClient(t, moved)
			verify(t, c, "r:", seq(5_000))

			t.Run("a server that knows no other node is never met", func(t *testing.T) {
				alone, err := f.env.StartNode(ctx, 0)
				require.NoError(t, err)
				err = f.admin.Reintroduce(ctx, append(moved, alone))
				require.ErrorIs(t, err, model.ErrUnsafe)
				assert.Contains(t, err.Error(), alone.Name)
				snap, err := f.admin.Observe(context.Background(), moved)
				require.NoError(t, err)
				for _, st := range snap.Nodes {
					assert.Equal(t, 4, st.KnownNodes, "%s was not introduced to the lone server", st.Name)
				}
			})
		})
	}
}
