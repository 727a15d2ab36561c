//go:build integration

// Package integration proves valkeyops against real Valkey containers (testcontainers-go on a
// user-defined Docker network, no Kubernetes). Without Docker or the local images the suite
// skips with the reason.
package integration

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/valkey-io/valkey-go"

	"github.com/gomomento/valkey-operator/integration/harness"
	"github.com/gomomento/valkey-operator/internal/loadgen"
	"github.com/gomomento/valkey-operator/valkeyops"
	"github.com/gomomento/valkey-operator/valkeyops/model"
)

var dockerProblem error

func TestMain(m *testing.M) {
	dockerProblem = harness.DockerProblem(harness.Image(), harness.Image9())
	if dockerProblem != nil {
		fmt.Fprintf(os.Stderr, "integration: SKIPPING every test: %v\n", dockerProblem)
	}
	os.Exit(m.Run())
}

const (
	defaultPassword  = "default-secret"
	operatorPassword = "operator-secret"
)

func aclSpec(users ...model.ACLUser) model.ACLSpec {
	return model.ACLSpec{DefaultPassword: defaultPassword, OperatorPassword: operatorPassword, Users: users}
}

// fixture is one Env plus an Admin for it.
type fixture struct {
	env   *harness.Env
	admin *valkeyops.Admin
	nodes []model.Node
}

func requireDocker(t *testing.T) {
	t.Helper()
	if dockerProblem != nil {
		// CI machines have Docker: there a missing engine is a failure, never a green skip.
		if os.Getenv("CI") != "" {
			t.Fatalf("Docker unavailable on CI: %v", dockerProblem)
		}
		t.Skipf("Docker unavailable: %v", dockerProblem)
	}
}

// newFixture starts shards*perShard nodes of image and an Admin authenticated as the operator
// (opts.Credentials' user and password are set here; its TLS fields are the caller's).
func newFixture(t *testing.T, cfg harness.Config, shards, perShard int, opts valkeyops.Options) *fixture {
	t.Helper()
	requireDocker(t)
	ctx := context.Background()
	if cfg.ACL.DefaultPassword == "" {
		cfg.ACL = aclSpec()
	}
	env, err := harness.New(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if err := env.Close(cctx); err != nil {
			t.Logf("cleanup: %v", err)
		}
	})
	nodes, err := env.StartNodes(ctx, shards, perShard)
	require.NoError(t, err)
	opts.Credentials.Username = model.OperatorUser
	opts.Credentials.Password = cfg.ACL.OperatorPassword
	admin, err := valkeyops.NewAdmin(opts)
	require.NoError(t, err)
	t.Cleanup(admin.Close)
	f := &fixture{env: env, admin: admin, nodes: nodes}
	t.Cleanup(func() {
		if t.Failed() {
			f.dump(t)
		}
	})
	return f
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// waitHealthy polls Health until it is empty or the deadline passes.
func waitHealthy(t *testing.T, f *fixture, nodes []model.Node, shards, replicas int, d time.Duration) *model.Snapshot {
	t.Helper()
	deadline := time.Now().Add(d)
	var reasons []string
	for {
		snap, err := f.admin.Observe(context.Background(), nodes)
		require.NoError(t, err)
		reasons = model.Health(snap, shards, replicas)
		if len(reasons) == 0 {
			return snap
		}
		if time.Now().After(deadline) {
			require.Failf(t, "cluster not healthy", "after %s: %v", d, reasons)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// dataClient is a cluster-aware client authenticated as the default user.
func dataClient(t *testing.T, nodes []model.Node, opts ...func(*valkey.ClientOption)) valkey.Client {
	t.Helper()
	o := valkey.ClientOption{Password: defaultPassword, DisableCache: true}
	for _, n := range nodes {
		o.InitAddress = append(o.InitAddress, n.Addr)
	}
	for _, fn := range opts {
		fn(&o)
	}
	c, err := valkey.NewClient(o)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

// fill writes n keys prefix+<i> = loadgen.Value(i) in pipelined batches.
func fill(t *testing.T, c valkey.Client, prefix string, n int) {
	t.Helper()
	require.NoError(t, loadgen.Fill(context.Background(), c, prefix, n, 2000, nil))
}

// verify reads every key back and counts mismatches.
func verify(t *testing.T, c valkey.Client, prefix string, keys []int) {
	t.Helper()
	bad, first := loadgen.Missing(context.Background(), c, prefix, keys)
	require.Zerof(t, bad, "%d of %d keys unreadable or wrong, first: %v", bad, len(keys), first)
}

func seq(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// dump logs every node's CLUSTER NODES view, for failed tests.
func (f *fixture) dump(t *testing.T) {
	snap, err := f.admin.Observe(context.Background(), f.env.Nodes())
	if err != nil {
		t.Logf("dump: %v", err)
		return
	}
	for _, n := range snap.Nodes {
		t.Logf("== %s %s reachable=%v state=%s err=%v", n.Name, n.Addr, n.Reachable, n.ClusterState, n.Err)
		for _, v := range n.View {
			t.Logf("   %s %s:%d@%d %v primary=%s epoch=%d %s %v imp=%v mig=%v", v.ID[:8], v.IP, v.Port, v.BusPort, v.Flags, v.PrimaryID, v.ConfigEpoch, v.BusLink, v.Slots, v.Importing, v.Migrating)
		}
	}
}
