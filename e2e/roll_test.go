//go:build e2e

package e2e

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gomomento/valkey-operator/internal/clusterview"
	"github.com/gomomento/valkey-operator/reconciler/render"
	"github.com/gomomento/valkey-operator/valkeyops/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valkey-io/valkey-go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Rolling replacement: an edit to what a node was made from (its config, the image behind
// it) replaces every node, one shard at a time, replacement first, while a writer goes on.
// podAnnotations reach live pods in place. Each test uses a ValkeyConfig of its own (they are
// cluster-scoped), so editing it rolls no other test's cluster.

// ownConfig applies a ValkeyConfig named after the namespace, of imageRef with
// maxmemory-policy policy, and returns its name.
func (n *ns) ownConfig(imageRef, policy string) string {
	n.t.Helper()
	name := n.name
	n.kubectlIn(fmt.Sprintf("apiVersion: valkey.gomomento.com/v1alpha1\nkind: ValkeyConfig\nmetadata:\n  name: %s\nspec:\n  imageRef: %s\n  resources:\n    cpu: 250m\n    memory: 256Mi\n  valkey:\n    maxmemory: 200mb\n    maxmemory-policy: %s\n",
		name, imageRef, policy), "apply", "-f", "-")
	n.t.Cleanup(func() { _, _ = kubectlRun("", "delete", "valkeyconfig", name, "--wait=false") })
	return name
}

// podsByName reads the cluster's pods.
func (n *ns) podsByName(cluster string) map[string]corev1.Pod {
	n.t.Helper()
	ctx, cancel := ctxTimeout(10 * time.Second)
	defer cancel()
	l, err := suite.env.Kube.CoreV1().Pods(n.name).List(ctx, metav1.ListOptions{LabelSelector: render.LabelCluster + "=" + cluster})
	require.NoError(n.t, err)
	out := map[string]corev1.Pod{}
	for _, p := range l.Items {
		out[p.Name] = p
	}
	return out
}

// nodeNames lists the cluster's ValkeyNode names.
func (n *ns) nodeNames(cluster string) []string {
	n.t.Helper()
	nodes, err := n.nodeStatuses(cluster)
	require.NoError(n.t, err)
	var out []string
	for _, s := range nodes {
		out = append(out, s.Name)
	}
	return out
}

// waitRolled waits until none of old is left and the cluster has converged on want nodes.
func (n *ns) waitRolled(cluster string, old []string, want int, timeout time.Duration) {
	n.t.Helper()
	deadline := time.Now().Add(timeout)
	n.eventually(timeout, time.Second, "every old node replaced", func() (bool, string, error) {
		nodes, err := n.nodeStatuses(cluster)
		if err != nil {
			return false, err.Error(), nil
		}
		desc, _ := clusterview.Describe(nodes)
		for _, s := range nodes {
			for _, o := range old {
				if s.Name == o {
					return false, desc, nil
				}
			}
		}
		return true, "", nil
	})
	n.waitConverged(cluster, want, time.Until(deadline)+30*time.Second)
}

// eachServer sends one command to every server of the cluster as the operator's user (the
// default user may not run CONFIG) and returns the answers by pod IP, an array or map reply
// joined by spaces.
func (n *ns) eachServer(cluster string, cmd ...string) map[string]string {
	n.t.Helper()
	password := n.secretValue(cluster+"-auth", render.AuthOperatorPasswordKey)
	out := map[string]string{}
	for _, ip := range n.podIPs(cluster) {
		c := newClient(n.t, valkey.ClientOption{InitAddress: []string{ip + ":6379"}, Username: model.OperatorUser, Password: password, ForceSingleClient: true})
		ctx, cancel := ctxTimeout(10 * time.Second)
		resp := c.Do(ctx, c.B().Arbitrary(cmd...).Build())
		cancel()
		if text, err := resp.ToString(); err == nil {
			out[ip] = text
			continue
		}
		if words, err := resp.AsStrSlice(); err == nil {
			out[ip] = strings.Join(words, " ")
			continue
		}
		fields, err := resp.AsStrMap() // CONFIG GET over RESP3
		require.NoError(n.t, err, "%v on %s", cmd, ip)
		var words []string
		for k, v := range fields {
			words = append(words, k, v)
		}
		out[ip] = strings.Join(words, " ")
	}
	return out
}

// TestDay2ConfigEditRolls: podAnnotations reach the live pods in place; then an edit to the
// cluster's ValkeyConfig, made while no pod can be scheduled, stalls safely (a Warning Event,
// every old node still serving) and, once pods fit, rolls every node of the 2x1 cluster: the
// new setting is live on each server, no acknowledged write is lost and the cluster never
// leaves Active.
func TestDay2ConfigEditRolls(t *testing.T) {
	n := newNamespace(t, "e2e-roll")
	const cluster = "roll"
	cfg := n.ownConfig("valkey-8.0", "allkeys-lru")
	w, watch := day2Of(t, n, cluster, cfg, 2, 1)

	// podAnnotations: patched in place, the same pods.
	before := n.podsByName(cluster)
	n.kubectl("patch", "valkeycluster", cluster, "--type=merge", "-p", `{"spec":{"podAnnotations":{"example.com/team":"payments"}}}`)
	n.eventually(30*time.Second, 200*time.Millisecond, "podAnnotations on every pod", func() (bool, string, error) {
		for name, p := range n.podsByName(cluster) {
			if p.Annotations["example.com/team"] != "payments" {
				return false, name + " lacks it", nil
			}
		}
		return true, "", nil
	})
	after := n.podsByName(cluster)
	require.Len(t, after, len(before))
	for name, p := range before {
		assert.Equal(t, p.UID, after[name].UID, "pod %s kept (annotations arrive in place)", name)
	}

	// The config edit while nothing can be scheduled: the roll stalls with the old nodes.
	old := n.nodeNames(cluster)
	uncordon := n.cordonAll()
	n.kubectl("patch", "valkeyconfig", cfg, "--type=merge", "-p", `{"spec":{"valkey":{"maxmemory-policy":"volatile-lru"}}}`)
	n.waitStalled()
	stalled, err := n.nodeStatuses(cluster)
	require.NoError(t, err)
	for _, s := range stalled {
		if slices.Contains(old, s.Name) {
			assert.Equal(t, "Active", s.Lifecycle, "old node %s keeps serving during the stall", s.Name)
		}
	}
	assert.Len(t, stalled, len(old)+1, "one replacement waits; nothing else was created or retired")

	start := time.Now()
	uncordon()
	n.waitRolled(cluster, old, 4, 5*time.Minute)
	took := time.Since(start)
	t.Logf("e2e: config edit rolled 2 shards in %.1fs (%.1fs per shard)", took.Seconds(), took.Seconds()/2)

	policies := n.eachServer(cluster, "CONFIG", "GET", "maxmemory-policy")
	require.Len(t, policies, 4)
	for ip, got := range policies {
		assert.Contains(t, got, "volatile-lru", "server %s runs the edited config", ip)
	}
	for name, p := range n.podsByName(cluster) {
		assert.Equal(t, "payments", p.Annotations["example.com/team"], "replacement pod %s has the podAnnotations", name)
	}
	failovers, _, err := suite.operator.metric("valkey_cluster_topology_actions_total",
		map[string]string{"namespace": n.name, "cluster": cluster, "action": "Failover", "result": "ok"})
	require.NoError(t, err)
	assert.GreaterOrEqual(t, failovers, 2.0, "each rolled shard's primary failed over, counted in the operator's metrics")
	finishDay2(t, w, watch, "a config edit rolling 2x1")
}

// TestDay2ImageUpgradeRollsThroughOperatorKill: pointing the cluster's config at the Valkey
// 9.1 image rolls every node from 8.0 to 9.1; the operator is SIGKILLed as soon as the first
// replacement exists, and its successor finishes the roll with no shard doubled and no
// acknowledged write lost.
func TestDay2ImageUpgradeRollsThroughOperatorKill(t *testing.T) {
	n := newNamespace(t, "e2e-upgrade")
	const cluster = "upgrade"
	cfg := n.ownConfig("valkey-8.0", "allkeys-lru")
	w, watch := day2Of(t, n, cluster, cfg, 2, 1)
	old := n.nodeNames(cluster)

	start := time.Now()
	n.kubectl("patch", "valkeyconfig", cfg, "--type=merge", "-p", `{"spec":{"imageRef":"valkey-9.1"}}`)
	n.eventually(time.Minute, 50*time.Millisecond, "the first replacement exists", func() (bool, string, error) {
		nodes, err := n.nodeStatuses(cluster)
		return err == nil && len(nodes) > len(old), fmt.Sprint(nodes), nil
	})
	crashAndRestart(t)
	n.waitRolled(cluster, old, 4, 5*time.Minute)
	took := time.Since(start)
	t.Logf("e2e: image 8.0 -> 9.1 rolled 2 shards in %.1fs (%.1fs per shard), operator killed once", took.Seconds(), took.Seconds()/2)

	nodes, err := n.nodeStatuses(cluster)
	require.NoError(t, err)
	assert.Equal(t, map[string]int{"0": 2, "1": 2}, clusterview.PerShard(nodes), "no shard doubled")
	versions := n.eachServer(cluster, "INFO", "server")
	require.Len(t, versions, 4)
	for ip, info := range versions {
		assert.Contains(t, info, "valkey_version:9.1.", "server %s runs Valkey 9.1", ip)
	}
	finishDay2(t, w, watch, "an image upgrade rolling 2x1 through an operator SIGKILL")
}
