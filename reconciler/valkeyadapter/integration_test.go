package valkeyadapter_test

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/gomomento/valkey-operator/integration/harness"
	"github.com/gomomento/valkey-operator/reconciler/render"
	"github.com/gomomento/valkey-operator/reconciler/topology"
	"github.com/gomomento/valkey-operator/reconciler/valkeyadapter"
	"github.com/gomomento/valkey-operator/reconciler/views"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/types"
)

// TestAdapterFormsRealCluster drives real Valkey containers through the adapter exactly as
// the reconciler does: the ACL file rendered from the reconciler's ACL input, the operator
// user and its password, Bootstrap from shard-grouped members, then Observe until the
// seed's Active criteria hold. Needs Docker and the local Valkey image (make valkey-image).
func TestAdapterFormsRealCluster(t *testing.T) {
	if err := harness.DockerProblem(harness.Image()); err != nil {
		t.Fatalf("this test needs Docker and the local Valkey image: %v", err)
	}
	const shards, perShard = 2, 2
	spec, missing := render.ACLSpec(nil, func(string) (views.Role, bool) { return views.Role{}, false }, "default-pw", "operator-pw")
	require.Empty(t, missing)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	env, err := harness.New(ctx, harness.Config{Image: harness.Image(), ACL: spec})
	require.NoError(t, err)
	t.Cleanup(func() {
		cctx, ccancel := context.WithTimeout(context.Background(), time.Minute)
		defer ccancel()
		_ = env.Close(cctx)
	})
	nodes, err := env.StartNodes(ctx, shards, perShard)
	require.NoError(t, err)
	var members []topology.Member
	for _, n := range nodes {
		members = append(members, topology.Member{Name: n.Name, Addr: n.Addr, Shard: n.Shard})
	}

	a := valkeyadapter.New(logr.Discard(), nil)
	defer a.Close()
	conn := topology.Conn{Cluster: types.NamespacedName{Namespace: "it", Name: "c"}, Username: topology.OperatorUser, Password: "operator-pw"}

	start := time.Now()
	require.NoError(t, a.Bootstrap(ctx, conn, members, shards))
	var obs topology.Observation
	require.Eventually(t, func() bool {
		obs, err = a.Observe(ctx, conn, members, shards, perShard-1)
		return err == nil && len(obs.Problems) == 0
	}, time.Minute, 100*time.Millisecond, "healthy; last problems %v (err %v)", obs.Problems, err)
	t.Logf("bootstrap %dx%d healthy through the adapter in %s", shards, perShard-1, time.Since(start).Round(time.Millisecond))

	roles := map[string]int{}
	for _, n := range obs.Nodes {
		assert.True(t, n.Reachable, n.Name)
		assert.Len(t, n.ID, 40, n.Name)
		roles[n.Role]++
	}
	assert.Equal(t, map[string]int{"primary": shards, "replica": shards * (perShard - 1)}, roles)

	// A wrong password is refused: auth is really on.
	bad := conn
	bad.Cluster.Name = "other"
	bad.Password = "wrong"
	o, err := a.Observe(ctx, bad, members[:1], shards, perShard-1)
	assert.True(t, err != nil || (len(o.Nodes) == 1 && !o.Nodes[0].Reachable), "wrong password must not reach the node")
}
