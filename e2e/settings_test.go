//go:build e2e

package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestRefusedSettingIsNamedThenFixed: a ValkeyConfig value that smuggles a second directive
// (`noeviction --port 6380`) passes the CRD, but on the node's config file it is only
// maxmemory-policy's arguments, so Valkey refuses it instead of opening a port. The operator
// names the setting in a ConfigRejected Warning Event and the cluster stays Creating; once
// the ValkeyConfig is fixed, the refused nodes are replaced and the cluster forms with the
// fixed value on every server. Once Active, a refused edit stalls its roll and a fix finishes it.
func TestRefusedSettingIsNamedThenFixed(t *testing.T) {
	n := newNamespace(t, "e2e-refused")
	const cluster = "refused"
	applyMenu(n)
	cfg := n.ownConfig("valkey-8.0", `"noeviction --port 6380"`)
	n.applyCluster(cluster, cfg, 1, 1)

	message := n.waitWarning("ConfigRejected", "", 2*time.Minute)
	assert.Contains(t, message, `Valkey refused setting "maxmemory-policy"`)
	assert.Contains(t, message, "wrong number of arguments")
	state, _, err := n.state(cluster)
	if assert.NoError(t, err) {
		assert.Equal(t, "Creating", state)
	}

	n.kubectl("patch", "valkeyconfig", cfg, "--type=merge", "-p", `{"spec":{"valkey":{"maxmemory-policy":"noeviction"}}}`)
	n.waitState(cluster, "Active", 3*time.Minute)
	policies := n.eachServer(cluster, "CONFIG", "GET", "maxmemory-policy")
	assert.Len(t, policies, 2)
	for ip, got := range policies {
		assert.Equal(t, "maxmemory-policy noeviction", got, "server %s", ip)
	}
	// Without spec.persistence a server writes nothing to disk: no snapshot forks it to fill a
	// directory that goes with its pod (docs/persistence.md).
	for _, directive := range []string{"save", "appendonly"} {
		want := map[string]string{"save": "save ", "appendonly": "appendonly no"}[directive]
		for ip, got := range n.eachServer(cluster, "CONFIG", "GET", directive) {
			assert.Equal(t, want, got, "server %s", ip)
		}
	}

	// Active: an edit Valkey refuses stalls the roll on its first replacement (named in a
	// ConfigRejected and a TopologyStalled Warning) instead of replacing it over and over,
	// while the old nodes serve; fixing the ValkeyConfig lets the roll finish.
	old := n.nodeNames(cluster)
	watch := n.watchState(cluster)
	createdBefore := n.countEvents("NodeCreated")
	n.kubectl("patch", "valkeyconfig", cfg, "--type=merge", "-p", `{"spec":{"valkey":{"maxmemory-policy":"bogus"}}}`)
	n.waitWarning("ConfigRejected", `"bogus"`, 2*time.Minute)
	n.waitStalled()
	assert.Equal(t, 1, n.countEvents("NodeCreated")-createdBefore, "one replacement, not one after another")
	n.kubectl("patch", "valkeyconfig", cfg, "--type=merge", "-p", `{"spec":{"valkey":{"maxmemory-policy":"allkeys-lru"}}}`)
	n.waitRolled(cluster, old, 2, 3*time.Minute)
	for ip, got := range n.eachServer(cluster, "CONFIG", "GET", "maxmemory-policy") {
		assert.Equal(t, "maxmemory-policy allkeys-lru", got, "server %s", ip)
	}
	assert.Equal(t, []string{"Active"}, watch.states(), "the cluster reports Active throughout")
}

// countEvents counts the namespace's Events of reason.
func (n *ns) countEvents(reason string) int {
	n.t.Helper()
	return len(strings.Fields(n.kubectl("get", "events", "--field-selector", "reason="+reason, "-o", "name")))
}
