//go:build e2e

package e2e

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/gomomento/valkey-operator/internal/clusterview"
	"github.com/gomomento/valkey-operator/internal/kubectl"
)

func example(name string) string { return filepath.Join(suite.root, "examples", name) }

// applyMenu applies the example ValkeyImage and ValkeyConfig (cluster-scoped, shared by tests;
// apply is idempotent).
func applyMenu(n *ns) {
	n.t.Helper()
	n.kubectl("apply", "-f", example("valkeyimage.yaml"), "-f", example("valkeyconfig.yaml"))
}

// TestExampleClusterLifecycle applies the examples with kubectl, waits for the 3x1 cluster to
// be Active, checks it is a real, healthy Valkey cluster (valkey-cli --cluster check, a
// cluster-mode client through every shard), checks the printer columns, logs apply-to-Active
// and the operator's idle RSS as figures (neither is asserted), and finally deletes it and
// checks that its ValkeyNodes, Pods and containers go.
func TestExampleClusterLifecycle(t *testing.T) {
	n := newNamespace(t, "e2e-examples")
	const cluster = "my-cluster"
	applyMenu(n)

	start := time.Now()
	n.kubectl("apply", "-f", example("valkeycluster.yaml"))
	activeAt := n.waitState(cluster, "Active", 3*time.Minute)
	t.Logf("e2e: apply-to-Active 3x1: %.1fs", activeAt.Sub(start).Seconds())
	n.logTimeline(cluster, start)

	u, err := n.cluster(cluster)
	require.NoError(t, err)
	_, hasTarget, _ := unstructured.NestedFieldNoCopy(u.Object, "status", "targetSpec")
	assert.False(t, hasTarget, "status.targetSpec is cleared once Active")
	msg, _, _ := unstructured.NestedString(u.Object, "status", "message")
	assert.Empty(t, msg, "status.message once Active")

	// Every ValkeyNode reports Active (they may trail the cluster's flip by a write).
	n.eventually(time.Minute, 500*time.Millisecond, "6 ValkeyNodes Active", func() (bool, string, error) {
		nodes, err := n.nodeStatuses(cluster)
		if err != nil {
			return false, err.Error(), nil
		}
		desc, active := clusterview.Describe(nodes)
		return len(nodes) == 6 && active == 6, desc, nil
	})

	t.Run("printer columns", func(t *testing.T) {
		rows := kubectl.Table(n.kubectl("get", "valkeyclusters"))
		assert.Equal(t, [][]string{
			{"NAME", "CONFIG", "SHARDS", "REPLICAS", "STATE"},
			{"my-cluster", "standard", "3", "1", "Active"},
		}, rows)

		rows = kubectl.Table(n.kubectl("get", "valkeynodes"))
		require.Len(t, rows, 7, "header and 6 ValkeyNodes")
		assert.Equal(t, []string{"NAME", "CLUSTER", "IMAGE", "LIFECYCLE"}, rows[0])
		for _, r := range rows[1:] {
			require.Len(t, r, 4)
			assert.True(t, strings.HasPrefix(r[0], "my-cluster-"), "node name %s", r[0])
			assert.Equal(t, []string{"my-cluster", "valkey/valkey:8.0.1", "Active"}, r[1:], "row %v", r)
		}
	})

	password := n.secretValue(cluster+"-auth", "password")
	ips := n.podIPs(cluster)
	require.Len(t, ips, 6, "pod IPs")

	t.Run("valkey-cli cluster check", func(t *testing.T) {
		out, err := clusterCheck(ips[0]+":6379", password)
		require.NoError(t, err, "valkey-cli --cluster check:\n%s", out)
		assert.Contains(t, out, "[OK] All nodes agree about slots configuration.")
		assert.Contains(t, out, "[OK] All 16384 slots covered.")
		assert.NotContains(t, out, "[ERR]")
		primaries, replicas := 0, 0
		for _, line := range strings.Split(stripANSI(out), "\n") {
			switch {
			case strings.HasPrefix(line, "M: "):
				primaries++
			case strings.HasPrefix(line, "S: "):
				replicas++
			}
		}
		assert.Equal(t, 3, primaries, "primaries in:\n%s", out)
		assert.Equal(t, 3, replicas, "replicas in:\n%s", out)
	})

	t.Run("cluster client writes and reads through every shard", func(t *testing.T) {
		c := newClusterClient(t, addrsOf(ips), password, nil)
		ctx, cancel := ctxTimeout(time.Minute)
		defer cancel()
		const keys = 300
		for i := 0; i < keys; i++ {
			k, v := fmt.Sprintf("e2e:key:%d", i), fmt.Sprintf("value-%d", i)
			require.NoError(t, c.Do(ctx, c.B().Set().Key(k).Value(v).Build()).Error(), "SET %s", k)
		}
		for i := 0; i < keys; i++ {
			k := fmt.Sprintf("e2e:key:%d", i)
			got, err := c.Do(ctx, c.B().Get().Key(k).Build()).ToString()
			require.NoError(t, err, "GET %s", k)
			assert.Equal(t, fmt.Sprintf("value-%d", i), got, "GET %s", k)
		}

		// Ask each primary itself how many keys it holds: every shard got some.
		text, err := newNodeClient(t, ips[0]+":6379", password).Do(ctx, c.B().ClusterNodes().Build()).ToString()
		require.NoError(t, err)
		nodes := parseClusterNodes(text)
		total, primaries := int64(0), 0
		for _, nd := range nodes {
			if !nd.Primary {
				continue
			}
			primaries++
			size, err := newNodeClient(t, nd.Addr, password).Do(ctx, c.B().Dbsize().Build()).AsInt64()
			require.NoError(t, err, "DBSIZE on %s", nd.Addr)
			assert.Positive(t, size, "primary %s (slots %v) holds keys", nd.Addr, nd.Slots)
			total += size
		}
		assert.Equal(t, 3, primaries, "CLUSTER NODES:\n%s", text)
		assert.Equal(t, int64(keys), total, "keys across primaries")
	})

	t.Run("operator idle RSS (logged figure, not asserted)", func(t *testing.T) {
		// Idle: the cluster is Active and the operator has run no reconcile for 5 s
		// (controller_runtime_reconcile_total from its metrics endpoint).
		last := -1.0
		var quietSince time.Time
		n.eventually(2*time.Minute, 500*time.Millisecond, "operator idle (no reconcile for 5s)", func() (bool, string, error) {
			total, err := suite.operator.reconcileTotal()
			if err != nil {
				return false, err.Error(), nil
			}
			if total != last {
				last, quietSince = total, time.Now()
			}
			quiet := time.Since(quietSince)
			return quiet >= 5*time.Second, fmt.Sprintf("%v reconciles, none for %s", total, quiet.Round(time.Second)), nil
		})
		kib, err := suite.operator.rssKiB()
		require.NoError(t, err)
		t.Logf("e2e: operator idle RSS: %.1f MiB", float64(kib)/1024)
	})

	t.Run("delete removes nodes, pods and containers", func(t *testing.T) {
		containers, err := n.containers()
		require.NoError(t, err)
		require.Len(t, containers, 6, "containers before delete: %v", containers)

		start := time.Now()
		n.kubectl("delete", "valkeycluster", cluster)
		n.eventually(2*time.Minute, 500*time.Millisecond, "ValkeyNodes, Pods and containers gone", func() (bool, string, error) {
			nodes, err := n.valkeyNodes(cluster)
			if err != nil {
				return false, err.Error(), nil
			}
			pods, err := n.pods(cluster)
			if err != nil {
				return false, err.Error(), nil
			}
			cs, err := n.containers()
			if err != nil {
				return false, err.Error(), nil
			}
			return len(nodes) == 0 && len(pods) == 0 && len(cs) == 0,
				fmt.Sprintf("%d ValkeyNodes, pods %v, containers %v", len(nodes), pods, cs), nil
		})
		t.Logf("e2e: delete-to-gone 3x1: %.1fs", time.Since(start).Seconds())
	})
}

var ansiEscape = regexp.MustCompile(`\x1b\[[0-9;]*m`)

// stripANSI removes the colour codes valkey-cli writes even when not on a terminal.
func stripANSI(s string) string { return ansiEscape.ReplaceAllString(s, "") }
