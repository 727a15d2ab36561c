//go:build integration

package integration

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valkey-io/valkey-go"

	"github.com/gomomento/valkey-operator/integration/harness"
	"github.com/gomomento/valkey-operator/valkeyops"
	"github.com/gomomento/valkey-operator/valkeyops/model"
)

// Bootstrap forms fresh nodes at a lowered cluster-node-timeout with replica failover off.
// However the pass that lowered them ended (formed, cancelled mid-way, or the operator died
// before restoring anything), the next Bootstrap leaves every node at its configured timeout
// with failover allowed (Valkey 8.0 and 9.1).
func TestBootstrapRestoresConfiguredTimeouts(t *testing.T) {
	t.Parallel()
	const shards, perShard = 2, 2
	for _, image := range []string{harness.Image(), harness.Image9()} {
		for _, tc := range []struct {
			name string
			// interrupt is what happened to the nodes before the Bootstrap under test.
			interrupt func(t *testing.T, f *fixture)
		}{
			{"fresh nodes", func(*testing.T, *fixture) {}},
			{"a pass died after lowering every node", func(t *testing.T, f *fixture) {
				// What the first pass does to fresh nodes before anything else; the nodes
				// are no longer fresh, so the rerun lowers nothing itself.
				for i, n := range f.nodes {
					require.NoError(t, operatorDo(t, n, operatorPassword, "CLUSTER", "SET-CONFIG-EPOCH", strconv.Itoa(i+1)).Error())
					lowerByHand(t, n)
				}
				require.NoError(t, operatorDo(t, f.nodes[0], operatorPassword, "CLUSTER", "ADDSLOTSRANGE", "0", "8191").Error())
			}},
			{"a formed cluster has nodes left lowered", func(t *testing.T, f *fixture) {
				require.NoError(t, f.admin.Bootstrap(ctxT(t, 2*time.Minute), f.nodes, shards))
				lowerByHand(t, f.nodes[0])
				lowerByHand(t, f.nodes[len(f.nodes)-1])
			}},
			{"a pass was cancelled mid-way", func(t *testing.T, f *fixture) {
				ctx, cancel := context.WithCancel(ctxT(t, 2*time.Minute))
				defer cancel()
				go func() {
					// Cancel as soon as the pass has lowered a node: forming takes at least
					// the 0.5 s rejoin delay after that.
					for ctx.Err() == nil && !anyLowered(ctx, f.nodes) {
						time.Sleep(5 * time.Millisecond)
					}
					cancel()
				}()
				err := f.admin.Bootstrap(ctx, f.nodes, shards)
				require.ErrorIs(t, err, context.Canceled, "the pass was cut short")
				assertConfiguredTimeouts(t, f.nodes, "right after the cancelled pass")
			}},
		} {
			t.Run(image+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				f := newFixture(t, harness.Config{Image: image}, shards, perShard, valkeyops.Options{})
				tc.interrupt(t, f)

				require.NoError(t, f.admin.Bootstrap(ctxT(t, 2*time.Minute), f.nodes, shards))
				assertConfiguredTimeouts(t, f.nodes, "after Bootstrap")
				waitHealthy(t, f, f.nodes, shards, perShard-1, 30*time.Second)
			})
		}
	}
}

// lowerByHand leaves n as a forming pass that died would: a short node timeout and replica
// failover off.
func lowerByHand(t *testing.T, n model.Node) {
	t.Helper()
	require.NoError(t, operatorDo(t, n, operatorPassword, "CONFIG", "SET", "cluster-node-timeout", "200", "cluster-replica-no-failover", "yes").Error())
}

// timeouts is what n reports for the settings Bootstrap lowers while forming.
func timeouts(ctx context.Context, n model.Node) (map[string]string, error) {
	c, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{n.Addr}, Username: model.OperatorUser, Password: operatorPassword,
		ForceSingleClient: true, DisableCache: true})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.Do(ctx, c.B().ConfigGet().Parameter("cluster-node-timeout", "cluster-replica-no-failover").Build()).AsStrMap()
}

func anyLowered(ctx context.Context, nodes []model.Node) bool {
	for _, n := range nodes {
		if kv, err := timeouts(ctx, n); err == nil && kv["cluster-node-timeout"] != strconv.Itoa(harness.NodeTimeoutMillis) {
			return true
		}
	}
	return false
}

func assertConfiguredTimeouts(t *testing.T, nodes []model.Node, when string) {
	t.Helper()
	want := map[string]string{"cluster-node-timeout": strconv.Itoa(harness.NodeTimeoutMillis), "cluster-replica-no-failover": "no"}
	for _, n := range nodes {
		got, err := timeouts(ctxT(t, 10*time.Second), n)
		require.NoError(t, err)
		assert.Equal(t, want, got, "%s %s", n.Name, when)
	}
}

// Settle puts the named nodes, and only those, back at their configured timeout with replica
// failover allowed: what the reconciler does before a joined node turns Active, in case the
// Bootstrap that lowered it never returned.
func TestSettleRestoresNamedNodes(t *testing.T) {
	t.Parallel()
	f := newFixture(t, harness.Config{}, 2, 1, valkeyops.Options{})
	for _, n := range f.nodes {
		lowerByHand(t, n)
	}
	require.NoError(t, f.admin.Settle(ctxT(t, 10*time.Second), f.nodes[:1]))
	assertConfiguredTimeouts(t, f.nodes[:1], "after Settle")
	left, err := timeouts(ctxT(t, 10*time.Second), f.nodes[1])
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"cluster-node-timeout": "200", "cluster-replica-no-failover": "yes"}, left, "a node not named is left alone")
}
