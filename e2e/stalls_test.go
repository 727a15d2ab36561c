//go:build e2e

package e2e

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gomomento/valkey-operator/reconciler/render"
)

// The two stalls of a change whose new nodes do not come up, proven on the dev cluster
// instead of only against the planner's table (reconciler/plan): a new pod that never turns
// ready, and a new server that stops before it joins. Each is caused for real, by a
// ValkeyConfig the new nodes of a scale-out are made from, and fixed by putting the cluster's
// configRef back; a writer runs throughout.

// TestStallPodNeverReady scales a 2x1 cluster to two replicas per shard while its configRef
// names a ValkeyConfig whose memory (4Mi) no container can be given (Docker refuses limits
// under 6 MB), so the new pods are never created and never turn ready. Once they have not
// been ready for the operator's --slow-start (slowStart), a TopologyStalled Warning Event
// says exactly what the planner says; the old nodes serve on, nothing else moves, and once
// configRef is put back the stuck nodes are replaced and the scale-out completes with no
// acknowledged write lost and the cluster Active throughout.
func TestStallPodNeverReady(t *testing.T) {
	n := newNamespace(t, "e2e-notready")
	const cluster = "notready"
	w, watch := day2(t, n, cluster, 2, 1)
	old := n.nodeNames(cluster)
	cfg := n.stallConfig("tiny", "  resources:\n    memory: 4Mi\n")

	patched := time.Now()
	n.kubectl("patch", "valkeycluster", cluster, "--type=merge", "-p", fmt.Sprintf(`{"spec":{"configRef":%q,"replicasPerShard":2}}`, cfg))
	stuck := n.nodesBesides(cluster, old, 2)

	// Reported exactly as the planner words it, naming a stuck pod and the configured wait,
	// and not before that wait has passed since the pod was created.
	ev := n.waitStallEvent(func(name string) string {
		return fmt.Sprintf("pod %s has not become ready in %s; see `kubectl describe pod %s`", name, slowStart, name)
	}, stuck, slowStart+time.Minute)
	pod := n.podsByName(cluster)[ev.pod]
	assert.GreaterOrEqual(t, ev.at.Sub(pod.CreationTimestamp.Time), slowStart-time.Second,
		"the stall is reported once the pod has not been ready for --slow-start (%s), not sooner", slowStart)
	t.Logf("e2e: stall of a never-ready pod reported %.1fs after the patch", ev.at.Sub(patched).Seconds())

	// The cause is real: the stuck pods' servers never ran, and they are not ready.
	pods := n.podsByName(cluster)
	for _, name := range stuck {
		p := pods[name]
		assert.False(t, podConditionTrue(p, corev1.PodReady), "pod %s is not ready", name)
		cs := serverStatusOf(p)
		if assert.NotNil(t, cs, "pod %s reports its server container", name) {
			assert.Nil(t, cs.State.Running, "the server of %s never runs", name)
			if assert.NotNil(t, cs.State.Waiting, "the server of %s waits to be created", name) {
				assert.Contains(t, cs.State.Waiting.Message, "memory", "why %s cannot start (kubectl describe pod)", name)
			}
		}
	}
	n.requireStalledServing(cluster, old, w)

	// Fixed: the stuck nodes are replaced from the cluster's configuration and the scale-out
	// completes.
	fixed := time.Now()
	n.kubectl("patch", "valkeycluster", cluster, "--type=merge", "-p", fmt.Sprintf(`{"spec":{"configRef":%q}}`, exampleConfig))
	n.waitConverged(cluster, 6, 3*time.Minute)
	t.Logf("e2e: scale-out completed %.1fs after the fix", time.Since(fixed).Seconds())
	n.requireKeptAndReplaced(cluster, old, stuck)
	finishDay2(t, w, watch, "a scale-out stalled on a never-ready pod, then fixed")
}

// TestStallServerStopsBeforeJoin scales a 2x1 cluster to two replicas per shard while its
// configRef names a ValkeyConfig with a setting Valkey refuses at start-up
// (maxmemory-policy: bogus): the new servers exit before they join. The operator names the
// first of them in a TopologyStalled Warning Event, exactly as the planner words it, and the
// refused setting in a ConfigRejected one, instead of replacing the node over and over; the
// old nodes serve on, and once configRef is put back the stopped nodes are replaced and the
// scale-out completes with no acknowledged write lost and the cluster Active throughout.
func TestStallServerStopsBeforeJoin(t *testing.T) {
	n := newNamespace(t, "e2e-stopped")
	const cluster = "stopped"
	w, watch := day2(t, n, cluster, 2, 1)
	old := n.nodeNames(cluster)
	cfg := n.stallConfig("refused", "  valkey:\n    maxmemory-policy: bogus\n")

	patched := time.Now()
	created := n.countEvents("NodeCreated")
	n.kubectl("patch", "valkeycluster", cluster, "--type=merge", "-p", fmt.Sprintf(`{"spec":{"configRef":%q,"replicasPerShard":2}}`, cfg))
	stuck := n.nodesBesides(cluster, old, 2)

	ev := n.waitStallEvent(func(name string) string {
		return "the server of new node " + name + " stopped before it joined (a setting Valkey refuses at start-up?); fix the ValkeyConfig, or see `kubectl logs " + name + "` and delete that pod to retry"
	}, stuck, 2*time.Minute)
	t.Logf("e2e: stall of a server that stopped before joining reported %.1fs after the patch", ev.at.Sub(patched).Seconds())
	rejected := n.waitWarning("ConfigRejected", `Valkey refused setting "maxmemory-policy"`, 30*time.Second)
	assert.Contains(t, rejected, `"bogus"`)

	// The cause is real: the named node's server ran and exited, and it never got a node ID.
	p := n.podsByName(cluster)[ev.pod]
	if cs := serverStatusOf(p); assert.NotNil(t, cs, "pod %s reports its server container", ev.pod) && assert.NotNil(t, cs.State.Terminated, "the server of %s has exited", ev.pod) {
		assert.NotZero(t, cs.State.Terminated.ExitCode, "the server of %s failed", ev.pod)
	}
	nodes, err := n.nodeStatuses(cluster)
	require.NoError(t, err)
	for _, s := range nodes {
		if s.Name == ev.pod {
			assert.Empty(t, s.NodeID, "%s never answered, so it never joined", s.Name)
		}
	}
	n.requireStalledServing(cluster, old, w)
	assert.Equal(t, 2, n.countEvents("NodeCreated")-created, "the stopped nodes are not replaced over and over from the same configuration")

	fixed := time.Now()
	n.kubectl("patch", "valkeycluster", cluster, "--type=merge", "-p", fmt.Sprintf(`{"spec":{"configRef":%q}}`, exampleConfig))
	n.waitConverged(cluster, 6, 3*time.Minute)
	t.Logf("e2e: scale-out completed %.1fs after the fix", time.Since(fixed).Seconds())
	n.requireKeptAndReplaced(cluster, old, stuck)
	for ip, got := range n.eachServer(cluster, "CONFIG", "GET", "maxmemory-policy") {
		assert.Equal(t, "maxmemory-policy allkeys-lru", got, "server %s runs the cluster's configuration", ip)
	}
	finishDay2(t, w, watch, "a scale-out stalled on a server that stopped before joining, then fixed")
}

// stallConfig applies a ValkeyConfig of this test, named after the namespace and suffix,
// inheriting from the example menu's base and adding spec (YAML lines under spec:).
func (n *ns) stallConfig(suffix, spec string) string {
	n.t.Helper()
	name := n.name + "-" + suffix
	n.kubectlIn(fmt.Sprintf("apiVersion: valkey.gomomento.com/v1alpha1\nkind: ValkeyConfig\nmetadata:\n  name: %s\nspec:\n  baseRef: %s\n%s", name, exampleConfig, spec), "apply", "-f", "-")
	n.t.Cleanup(func() { _, _ = kubectlRun("", "delete", "valkeyconfig", name, "--wait=false") })
	return name
}

// newNodes waits until the cluster has want ValkeyNodes besides old and returns their names.
func (n *ns) nodesBesides(cluster string, old []string, want int) []string {
	n.t.Helper()
	var added []string
	n.eventually(time.Minute, 200*time.Millisecond, fmt.Sprintf("%d new ValkeyNodes", want), func() (bool, string, error) {
		added = nil
		for _, name := range n.nodeNames(cluster) {
			if !slices.Contains(old, name) {
				added = append(added, name)
			}
		}
		return len(added) == want, fmt.Sprint(added), nil
	})
	return added
}

// stallEvent is a TopologyStalled Warning Event naming one of the stuck pods.
type stallEvent struct {
	pod string
	at  time.Time
}

// waitStallEvent waits for a TopologyStalled Warning Event whose message is exactly
// message(pod) for one of pods, and returns that pod and when the Event was first emitted.
func (n *ns) waitStallEvent(message func(pod string) string, pods []string, timeout time.Duration) stallEvent {
	n.t.Helper()
	var found stallEvent
	n.eventually(timeout, time.Second, "a TopologyStalled Warning Event naming one of "+strings.Join(pods, ", "), func() (bool, string, error) {
		ctx, cancel := ctxTimeout(10 * time.Second)
		defer cancel()
		l, err := suite.env.Kube.CoreV1().Events(n.name).List(ctx, metav1.ListOptions{FieldSelector: "reason=TopologyStalled,type=Warning"})
		if err != nil {
			return false, err.Error(), nil
		}
		var seen []string
		for _, e := range l.Items {
			for _, pod := range pods {
				if e.Message == message(pod) {
					found = stallEvent{pod: pod, at: e.EventTime.Time}
					if found.at.IsZero() {
						found.at = e.FirstTimestamp.Time
					}
					return true, "", nil
				}
			}
			seen = append(seen, e.Message)
		}
		return false, fmt.Sprintf("TopologyStalled so far: %q", seen), nil
	})
	return found
}

// requireStalledServing checks the stall holds nothing up that was serving: the old nodes
// are all still there and Active, nothing else is being moved, the cluster reports Active
// with no message, and the writer is still acknowledged.
func (n *ns) requireStalledServing(cluster string, old []string, w *day2Writer) {
	n.t.Helper()
	nodes, err := n.nodeStatuses(cluster)
	require.NoError(n.t, err)
	for _, s := range nodes {
		if slices.Contains(old, s.Name) {
			assert.Equal(n.t, "Active", s.Lifecycle, "old node %s serves on during the stall", s.Name)
		}
	}
	assert.Len(n.t, nodes, len(old)+2, "the stall creates no further nodes")
	state, msg, err := n.state(cluster)
	require.NoError(n.t, err)
	assert.Equal(n.t, "Active", state)
	assert.Empty(n.t, msg, "status.message stays empty while Active (docs/status.md)")
	assert.True(n.t, w.keepsAcknowledging(30*time.Second), "writes are acknowledged during the stall")
}

// requireKeptAndReplaced checks that every old node is still there and none of stuck is.
func (n *ns) requireKeptAndReplaced(cluster string, old, stuck []string) {
	n.t.Helper()
	now := n.nodeNames(cluster)
	for _, name := range old {
		assert.Contains(n.t, now, name, "old node %s kept", name)
	}
	for _, name := range stuck {
		assert.NotContains(n.t, now, name, "stuck node %s replaced", name)
	}
}

// serverContainer is the status of a pod's Valkey container (nil until reported).
func serverStatusOf(p corev1.Pod) *corev1.ContainerStatus {
	for i := range p.Status.ContainerStatuses {
		if p.Status.ContainerStatuses[i].Name == render.ContainerName {
			return &p.Status.ContainerStatuses[i]
		}
	}
	return nil
}
