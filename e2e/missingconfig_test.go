//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gomomento/valkey-operator/internal/poll"
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

	// Observe over several re-check intervals: still Creating, nothing built. Any violation
	// ends the watch at once; reaching the end of the window is the pass.
	observe := time.Duration(3.5 * float64(recheckInterval))
	polls := 0
	err := poll.Until(context.Background(), 500*time.Millisecond, observe, "stays Creating", func(context.Context) (bool, string, error) {
		polls++
		if err := operatorRunning(); err != nil {
			return false, "", err
		}
		state, msg, err := n.state(cluster)
		if err != nil {
			// Retried, not returned: a read that timed out would wrap DeadlineExceeded and
			// pass for the whole window.
			return false, "reading the cluster: " + err.Error(), nil
		}
		if state != "Creating" {
			return false, "", fmt.Errorf("state %q while %s is missing (message %q)", state, config, msg)
		}
		if nodes, err := n.valkeyNodes(cluster); err != nil || len(nodes) > 0 {
			return false, "", fmt.Errorf("ValkeyNodes while the config is missing: %d (%v)", len(nodes), err)
		}
		if pods, err := n.pods(cluster); err != nil || len(pods) > 0 {
			return false, "", fmt.Errorf("pods while the config is missing: %v (%v)", pods, err)
		}
		return false, "Creating, nothing built", nil
	})
	require.ErrorIs(t, err, context.DeadlineExceeded, "the whole window passes without a violation")
	t.Logf("stayed Creating for %s (%d polls, re-check interval %s)", observe, polls, recheckInterval)

	// The Warning Event naming the missing config, with its own deadline.
	n.eventually(30*time.Second, time.Second, "a Warning Event (ConfigUnresolved) names the missing config "+config, func() (bool, string, error) {
		out, err := kubectlRun("", "get", "events", "-n", n.name, "--field-selector", "type=Warning,involvedObject.name="+cluster,
			"-o", "jsonpath={range .items[*]}{.reason}: {.message}{\"\\n\"}{end}")
		if err != nil {
			return false, err.Error(), nil
		}
		return strings.Contains(out, "ConfigUnresolved") && strings.Contains(out, config), "events: " + strings.TrimSpace(out), nil
	})

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
