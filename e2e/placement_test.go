//go:build e2e

package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gomomento/valkey-operator/reconciler/render"
	"github.com/gomomento/valkey-operator/reconciler/settings"
	"github.com/gomomento/valkey-operator/reconciler/views"
)

const zoneLabel = "topology.kubernetes.io/zone"

// TestPlacementAfterScheduling checks placement where it matters, on the pods the real
// scheduler placed across the dev cluster's 6 nodes in 3 zones: `zoneSpread: required` puts
// each shard's primary and replica in different zones, `zones: [zone-a]` keeps every pod in
// zone-a, and a nodeSelector no node matches leaves the pods Pending, the cluster Creating and
// a Warning Event that says why. Each server's availability-zone is set live to its node's
// zone.
func TestPlacementAfterScheduling(t *testing.T) {
	n := newNamespace(t, "e2e-place")
	applyMenu(n)
	apply := func(name string, shards, replicas int, placement string) {
		n.kubectlIn(fmt.Sprintf("apiVersion: valkey.gomomento.com/v1alpha1\nkind: ValkeyCluster\nmetadata:\n  name: %s\nspec:\n  configRef: %s\n  shards: %d\n  replicasPerShard: %d\n  placement:\n%s",
			name, exampleConfig, shards, replicas, placement), "apply", "-f", "-")
	}
	apply("spread", 3, 1, "    zoneSpread: required\n")
	apply("zoned", 1, 1, "    zones: [zone-a]\n")
	apply("nowhere", 1, 0, "    nodeSelector:\n      disktype: none-has-it\n")

	zones := n.nodeZones()
	n.waitState("spread", "Active", 3*time.Minute)
	perShard := map[string][]string{}
	for _, p := range n.podsByName("spread") {
		require.NotEmpty(t, p.Spec.NodeName, "pod %s scheduled", p.Name)
		perShard[p.Labels[render.LabelShard]] = append(perShard[p.Labels[render.LabelShard]], zones[p.Spec.NodeName])
	}
	require.Len(t, perShard, 3)
	for shard, z := range perShard {
		if assert.Len(t, z, 2, "shard %s", shard) {
			assert.NotEqual(t, z[0], z[1], "shard %s: primary and replica share zone %s", shard, z[0])
		}
	}
	n.eventually(30*time.Second, 250*time.Millisecond, "every server's availability-zone is its node's zone", func() (bool, string, error) {
		want := map[string]string{}
		for _, p := range n.podsByName("spread") {
			want[p.Status.PodIP] = "availability-zone " + zones[p.Spec.NodeName]
		}
		got := n.eachServer("spread", "CONFIG", "GET", "availability-zone")
		return assert.ObjectsAreEqual(want, got), fmt.Sprintf("want %v, got %v", want, got), nil
	})

	n.waitState("zoned", "Active", 3*time.Minute)
	pods := n.podsByName("zoned")
	assert.Len(t, pods, 2)
	for _, p := range pods {
		assert.Equal(t, "zone-a", zones[p.Spec.NodeName], "pod %s on node %s", p.Name, p.Spec.NodeName)
	}

	message := n.waitWarning("PodsUnschedulable", "", time.Minute)
	assert.Contains(t, message, "the cluster stays Creating until they fit")
	assert.Contains(t, message, "node affinity/selector", "the scheduler's reason is passed on")
	for _, p := range n.podsByName("nowhere") {
		assert.Equal(t, corev1.PodPending, p.Status.Phase, "pod %s", p.Name)
		assert.Empty(t, p.Spec.NodeName, "pod %s", p.Name)
	}
	state, _, err := n.state("nowhere")
	require.NoError(t, err)
	assert.Equal(t, "Creating", state)

	// The operator's metrics say the same, per cluster, and drop a deleted cluster's series.
	for _, m := range []struct {
		name    string
		cluster string
		labels  map[string]string
		want    float64
	}{
		{"valkey_cluster_state", "spread", map[string]string{"state": "Active"}, 1},
		{"valkey_cluster_state", "spread", map[string]string{"state": "Creating"}, 0},
		{"valkey_cluster_shards_desired", "spread", nil, 3},
		{"valkey_cluster_replicas_per_shard_desired", "spread", nil, 1},
		{"valkey_cluster_nodes", "spread", map[string]string{"lifecycle": "Active"}, 6},
		{"valkey_cluster_nodes_ready", "spread", nil, 6},
		{"valkey_cluster_slots_assigned", "spread", nil, 16384},
		{"valkey_cluster_state", "nowhere", map[string]string{"state": "Creating"}, 1},
	} {
		labels := map[string]string{"namespace": n.name, "cluster": m.cluster}
		for k, v := range m.labels {
			labels[k] = v
		}
		n.eventually(30*time.Second, 250*time.Millisecond, fmt.Sprintf("%s%v = %v", m.name, labels, m.want), func() (bool, string, error) {
			got, found, err := suite.operator.metric(m.name, labels)
			return found && got == m.want, fmt.Sprintf("found=%v value=%v", found, got), err
		})
	}
	n.kubectl("delete", "valkeycluster", "zoned")
	n.eventually(30*time.Second, 250*time.Millisecond, "no series of deleted cluster zoned", func() (bool, string, error) {
		_, found, err := suite.operator.metric("valkey_cluster_state", map[string]string{"namespace": n.name, "cluster": "zoned"})
		return !found, "", err
	})
}

// nodeZones maps every dev cluster node to its zone label.
func (n *ns) nodeZones() map[string]string {
	n.t.Helper()
	ctx, cancel := ctxTimeout(10 * time.Second)
	defer cancel()
	nodes, err := suite.env.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	require.NoError(n.t, err)
	out := map[string]string{}
	for _, nd := range nodes.Items {
		out[nd.Name] = nd.Labels[zoneLabel]
	}
	require.NotEmpty(n.t, out)
	return out
}

// TestDefaultZoneSpreadRequired: the operator-wide `defaultZoneSpread: required` (ConfigMap
// valkey-operator-config, read at start-up) holds after real scheduling. With every node
// outside zone-a cordoned, a 1x1 cluster that sets no zoneSpread cannot place its replica
// (it would share its primary's zone): it stays Creating with a Warning Event naming the
// spread constraint, while a cluster that sets `zoneSpread: bestEffort` forms in zone-a.
// Once the other zones open, the first one forms with its two pods in different zones.
func TestDefaultZoneSpreadRequired(t *testing.T) {
	n := newNamespace(t, "e2e-spread")
	applyMenu(n)
	kubectlIn := func(stdin string, args ...string) {
		t.Helper()
		out, err := kubectlRun(stdin, args...)
		require.NoError(t, err, out)
	}
	kubectlIn(fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: %s\n  namespace: %s\ndata:\n  %s: %s\n",
		settings.ConfigMapName, operatorNamespace, settings.KeyDefaultZoneSpread, views.ZoneSpreadRequired), "apply", "-f", "-")
	crashAndRestart(t) // settings are read at start-up
	t.Cleanup(func() {
		if out, err := kubectlRun("", "delete", "configmap", settings.ConfigMapName, "-n", operatorNamespace, "--ignore-not-found"); err != nil {
			t.Logf("cleanup: %v: %s", err, out)
		}
		crashAndRestart(t)
	})

	zones := n.nodeZones()
	var elsewhere []string
	for node, zone := range zones {
		if zone != "zone-a" {
			elsewhere = append(elsewhere, "node/"+node)
		}
	}
	uncordon := n.cordon(elsewhere)
	apply := func(name, placement string) {
		n.kubectlIn(fmt.Sprintf("apiVersion: valkey.gomomento.com/v1alpha1\nkind: ValkeyCluster\nmetadata:\n  name: %s\nspec:\n  configRef: %s\n  shards: 1\n  replicasPerShard: 1\n%s",
			name, exampleConfig, placement), "apply", "-f", "-")
	}
	apply("strict", "")
	apply("loose", "  placement:\n    zoneSpread: bestEffort\n")

	n.waitState("loose", "Active", 3*time.Minute)
	for _, p := range n.podsByName("loose") {
		assert.Equal(t, "zone-a", zones[p.Spec.NodeName], "bestEffort pod %s placed in the only open zone", p.Name)
	}
	message := n.waitWarning("PodsUnschedulable", "", time.Minute)
	assert.Contains(t, message, "topology spread constraints", "the scheduler's reason is passed on")
	state, _, err := n.state("strict")
	require.NoError(t, err)
	assert.Equal(t, "Creating", state)
	pending := 0
	for _, p := range n.podsByName("strict") {
		for _, c := range p.Spec.TopologySpreadConstraints {
			if c.TopologyKey == zoneLabel && c.LabelSelector.MatchLabels[render.LabelShard] != "" {
				assert.Equal(t, corev1.DoNotSchedule, c.WhenUnsatisfiable, "pod %s: the shard's zone spread is required", p.Name)
			}
		}
		if p.Spec.NodeName == "" {
			pending++
		}
	}
	assert.Equal(t, 1, pending, "the replica waits for a zone of its own")

	uncordon()
	n.waitState("strict", "Active", 3*time.Minute)
	var placed []string
	for _, p := range n.podsByName("strict") {
		placed = append(placed, zones[p.Spec.NodeName])
	}
	if assert.Len(t, placed, 2) {
		assert.NotEqual(t, placed[0], placed[1], "primary and replica in different zones")
	}
}
