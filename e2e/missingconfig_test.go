package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMissingConfigStaysCreatingUntilApplied applies a cluster whose ValkeyConfig does not
// exist yet, watches it stay Creating (no nodes, no pods) over several re-check intervals,
// then applies the config and expects Active without touching the cluster.
func TestMissingConfigStaysCreatingUntilApplied(t *testing.T) {
	n := newNamespace(t, "e2e-lateconfig")
	const cluster = "late-cluster"
	config := n.name + "-config" // cluster-scoped: unique per run
	t.Cleanup(func() { _, _ = kubectlRun("", "delete", "valkeyconfig", config, "--ignore-not-found") })
	applyMenu(n) // the ValkeyImage the late config will name

	n.kubectlIn(fmt.Sprintf(`apiVersion: valkey.gomomento.com/v1alpha1
kind: ValkeyCluster
metadata:
  name: %s
spec:
  configRef: %s
  shards: 1
  replicasPerShard: 0
`, cluster, config), "apply", "-f", "-")

	n.waitState(cluster, "Creating", time.Minute)

	// Observe over several re-check intervals: still Creating, nothing built, a Warning
	// Event naming the missing config.
	observe := time.Duration(3.5 * float64(recheckInterval))
	until := time.Now().Add(observe)
	sawWarning := false
	polls := 0
	for time.Now().Before(until) {
		require.NoError(t, suite.operator.running())
		state, msg, err := n.state(cluster)
		require.NoError(t, err)
		require.Equal(t, "Creating", state, "state while %s is missing (message %q)", config, msg)
		nodes, err := n.valkeyNodes(cluster)
		require.NoError(t, err)
		require.Empty(t, nodes, "no ValkeyNodes while the config is missing")
		pods, err := n.pods(cluster)
		require.NoError(t, err)
		require.Empty(t, pods, "no pods while the config is missing")
		if !sawWarning {
			out, err := kubectlRun("", "get", "events", "-n", n.name, "--field-selector", "type=Warning,involvedObject.name="+cluster,
				"-o", "jsonpath={range .items[*]}{.reason}: {.message}{\"\\n\"}{end}")
			sawWarning = err == nil && strings.Contains(out, "ConfigUnresolved") && strings.Contains(out, config)
		}
		polls++
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("stayed Creating for %s (%d polls, re-check interval %s)", observe, polls, recheckInterval)
	assert.True(t, sawWarning, "a Warning Event (ConfigUnresolved) names the missing config %q", config)

	start := time.Now()
	n.kubectlIn(fmt.Sprintf(`apiVersion: valkey.gomomento.com/v1alpha1
kind: ValkeyConfig
metadata:
  name: %s
spec:
  imageRef: valkey-8.0
  resources:
    cpu: 100m
    memory: 128Mi
  valkey:
    maxmemory: 64mb
`, config), "apply", "-f", "-")
	at := n.waitState(cluster, "Active", 3*time.Minute)
	t.Logf("e2e: config-applied-to-Active 1x0: %.1fs", at.Sub(start).Seconds())

	ips := n.podIPs(cluster)
	require.Len(t, ips, 1)
	out, err := clusterCheck(ips[0]+":6379", n.secretValue(cluster+"-auth", "password"))
	require.NoError(t, err, "valkey-cli --cluster check:\n%s", out)
	assert.Contains(t, out, "[OK] All 16384 slots covered.")
}
