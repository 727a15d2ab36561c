//go:build e2e

package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valkey-io/valkey-go"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gomomento/valkey-operator/reconciler/render"
)

// Node maintenance: every dev node drained in turn through the eviction API, as an upgrade
// tool does, while a writer goes on and the cluster holds enough data that every
// replacement's full sync takes a while. The shards' budgets count only in-sync pods, so no
// drain takes a shard's last in-sync copy; the operator moves the servers off a cordoned
// node itself, which is the only way a shard without replicas is drained at all.

// fill writes about mib MiB of 64 KiB values under "fill:", and returns the key count.
func fill(t *testing.T, n *ns, cluster string, mib int) int {
	t.Helper()
	c := newClusterClient(t, addrsOf(n.podIPs(cluster)), n.secretValue(cluster+"-auth", "password"), nil)
	value := strings.Repeat("v", 64<<10)
	keys := mib * 16
	ctx, cancel := ctxTimeout(2 * time.Minute)
	defer cancel()
	const batch = 32
	for i := 0; i < keys; i += batch {
		var cmds valkey.Commands
		for j := i; j < min(i+batch, keys); j++ {
			cmds = append(cmds, c.B().Set().Key(fmt.Sprintf("fill:%d", j)).Value(value).Build())
		}
		for _, r := range c.DoMulti(ctx, cmds...) {
			require.NoError(t, r.Error(), "filling the cluster")
		}
	}
	return keys
}

// drainEveryNode drains every dev node in turn (only the cluster's pods, so nothing else
// the suite runs is disturbed), uncordoning each as soon as its drain returns, and returns
// how long each drain that moved something took.
func drainEveryNode(t *testing.T, n *ns, cluster string) (total time.Duration, longest time.Duration) {
	t.Helper()
	start := time.Now()
	for _, node := range strings.Fields(n.kubectl("get", "nodes", "-o", "name")) {
		longest = max(longest, drainNode(t, n, cluster, node))
	}
	return time.Since(start), longest
}

// drainNode drains one dev node ("node/<name>") of the cluster's pods with kubectl, as an
// upgrade tool does, uncordons it as soon as the drain returns, and returns how long the
// drain took.
func drainNode(t *testing.T, n *ns, cluster, node string) time.Duration {
	t.Helper()
	hosted := 0
	for _, p := range n.podsByName(cluster) {
		if "node/"+p.Spec.NodeName == node {
			hosted++
		}
	}
	began := time.Now()
	out, err := kubectlRun("", "drain", node, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=150s",
		"--pod-selector", render.LabelCluster+"="+cluster, "-n", n.name)
	took := time.Since(began)
	_, _ = kubectlRun("", "uncordon", node)
	require.NoError(t, err, "kubectl drain %s: %s", node, out)
	t.Logf("e2e: drained %s (%d pod(s) of %s) in %.1fs", node, hosted, cluster, took.Seconds())
	return took
}

// budgetsOf returns the cluster's PodDisruptionBudgets by name.
func (n *ns) budgetsOf(cluster string) map[string]policyv1.PodDisruptionBudget {
	n.t.Helper()
	ctx, cancel := ctxTimeout(10 * time.Second)
	defer cancel()
	l, err := suite.env.Kube.PolicyV1().PodDisruptionBudgets(n.name).List(ctx, metav1.ListOptions{LabelSelector: render.LabelCluster + "=" + cluster})
	require.NoError(n.t, err)
	out := map[string]policyv1.PodDisruptionBudget{}
	for _, b := range l.Items {
		out[b.Name] = b
	}
	return out
}

// requireBudgets checks one budget per shard, each over its shard's pods, with every pod of
// the converged cluster Ready (in sync) and counted healthy.
func (n *ns) requireBudgets(cluster string, shards, replicas int) {
	n.t.Helper()
	n.eventually(time.Minute, time.Second, "a healthy budget per shard", func() (bool, string, error) {
		budgets := n.budgetsOf(cluster)
		if len(budgets) != shards {
			return false, fmt.Sprintf("%d budgets", len(budgets)), nil
		}
		for s := range shards {
			b, ok := budgets[render.BudgetName(cluster, s)]
			if !ok {
				return false, fmt.Sprintf("no budget for shard %d", s), nil
			}
			if b.Spec.MinAvailable == nil || b.Spec.MinAvailable.IntValue() != max(1, replicas) {
				return false, fmt.Sprintf("%s: minAvailable %v", b.Name, b.Spec.MinAvailable), nil
			}
			if b.Status.ExpectedPods != int32(1+replicas) || b.Status.CurrentHealthy != int32(1+replicas) {
				return false, fmt.Sprintf("%s: %d of %d pods healthy", b.Name, b.Status.CurrentHealthy, b.Status.ExpectedPods), nil
			}
		}
		for _, p := range n.podsByName(cluster) {
			if !podConditionTrue(p, corev1.PodConditionType(render.InSyncCondition)) || !podConditionTrue(p, corev1.PodReady) {
				return false, p.Name + " is not Ready and in sync", nil
			}
		}
		return true, "", nil
	})
}

func podConditionTrue(p corev1.Pod, t corev1.PodConditionType) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == t {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// TestDrainEveryNode: a rolling drain of every node of a 3x1 cluster holding about 100 MiB,
// each node uncordoned as soon as its drain returns: no acknowledged write lost, writes never
// paused for a second, Active throughout, converged at the end.
func TestDrainEveryNode(t *testing.T) {
	drainScenario(t, "e2e-drain", "drain", 3, 1, 96)
}

// TestDrainWithoutReplicas: the same with replicasPerShard 0, whose budgets never allow an
// eviction: every drain finishes because the operator moves each server off first (a
// replacement replica, a graceful failover to it, then the old node retires).
func TestDrainWithoutReplicas(t *testing.T) {
	drainScenario(t, "e2e-drain0", "bare", 2, 0, 32)
}

func drainScenario(t *testing.T, prefix, cluster string, shards, replicas, mib int) {
	n := newNamespace(t, prefix)
	w, watch := day2(t, n, cluster, shards, replicas)
	keys := fill(t, n, cluster, mib)
	n.requireBudgets(cluster, shards, replicas)

	total, longest := drainEveryNode(t, n, cluster)
	if replicas == 0 {
		// No budget of this cluster ever allows an eviction: each drain finished because
		// the operator moved the server off its cordoned node first.
		events := n.kubectl("get", "events", "--field-selector", "reason=TopologyAction", "-o", "jsonpath={.items[*].message}")
		assert.Contains(t, events, "cordoned for maintenance", "the operator moved the servers off the cordoned nodes")
	}
	n.waitConverged(cluster, shards*(1+replicas), 3*time.Minute)
	n.requireBudgets(cluster, shards, replicas)
	assert.True(t, w.keepsAcknowledging(30*time.Second), "writes are still acknowledged after the drains")
	res := w.Stop()
	t.Logf("e2e: drain: nodes=%d data-mib=%d total-s=%.1f longest-drain-s=%.1f longest-pause-s=%.3f",
		len(strings.Fields(n.kubectl("get", "nodes", "-o", "name"))), mib, total.Seconds(), longest.Seconds(), res.MaxPause.Seconds())
	assert.Less(t, res.MaxPause, time.Second, "writes never paused for a second (a planned operation)")

	ctx, cancel := ctxTimeout(2 * time.Minute)
	defer cancel()
	c := w.reader()
	missing := 0
	for i := 0; i < keys; i++ {
		if v, err := c.Do(ctx, c.B().Exists().Key(fmt.Sprintf("fill:%d", i)).Build()).AsInt64(); err != nil || v != 1 {
			missing++
		}
	}
	assert.Zero(t, missing, "of the %d keys written before the drains", keys)
	finishDay2Stopped(t, w, res, watch, "a rolling drain of every node")
}

// TestOperatorBudgetPolicy: the operator's ServiceAccount may create its own shard budgets,
// but no budget that could block anyone else's evictions, and may not delete a user's.
func TestOperatorBudgetPolicy(t *testing.T) {
	n := newNamespace(t, "e2e-pdbpolicy")
	n.kubectlIn(`{"apiVersion":"policy/v1","kind":"PodDisruptionBudget","metadata":{"name":"users-own"},"spec":{"minAvailable":1,"selector":{"matchLabels":{"app":"x"}}}}`, "create", "-f", "-")
	labels := fmt.Sprintf(`{%q:%q,%q:"c",%q:"0"}`, render.LabelManagedBy, render.ManagedBy, render.LabelCluster, render.LabelShard)
	budget := func(labels, selector string) string {
		return fmt.Sprintf(`{"apiVersion":"policy/v1","kind":"PodDisruptionBudget","metadata":{"name":"c-shard-0","labels":%s},"spec":{"minAvailable":1,"selector":%s}}`, labels, selector)
	}
	tests := []struct {
		name, stdin string
		args        []string
		want        string // "" = admitted
	}{
		{"its own shard budget", budget(labels, `{"matchLabels":{"valkey.gomomento.com/cluster":"c","valkey.gomomento.com/shard":"0"}}`),
			[]string{"create", "--dry-run=server", "-f", "-"}, ""},
		{"a budget over another cluster's pods", budget(labels, `{"matchLabels":{"valkey.gomomento.com/cluster":"other"}}`),
			[]string{"create", "--dry-run=server", "-f", "-"}, "select only the pods of the cluster"},
		{"a budget over every pod", budget(labels, `{}`),
			[]string{"create", "--dry-run=server", "-f", "-"}, "select only the pods of the cluster"},
		{"an unlabelled budget", budget(`{}`, `{"matchLabels":{"valkey.gomomento.com/cluster":"c"}}`),
			[]string{"create", "--dry-run=server", "-f", "-"}, "labelled as its own"},
		{"deleting a user's budget", "", []string{"delete", "pdb", "users-own", "--dry-run=server"}, "only change or delete its own"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, err := asOperator(tc.stdin, n.name, tc.args...)
			if tc.want == "" {
				assert.NoError(t, err, out)
				return
			}
			if assert.Error(t, err, "admitted: %s", out) {
				assert.Contains(t, err.Error(), "ValidatingAdmissionPolicy 'valkey-operator-budgets'")
				assert.Contains(t, err.Error(), tc.want)
			}
		})
	}
}
