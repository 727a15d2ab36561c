//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gomomento/valkey-operator/internal/clusterview"
	"github.com/gomomento/valkey-operator/internal/loadgen"
	"github.com/gomomento/valkey-operator/reconciler/render"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valkey-io/valkey-go"
)

// Day-2 operations on an Active cluster, driven by kubectl while a writer goes on through a
// real cluster-mode client. Each scenario checks that every acknowledged write is still there
// afterwards, that valkey-cli --cluster check is clean, that every ValkeyNode is Active, and
// that the cluster never reported anything but Active.

// exampleConfig is the example menu's base ValkeyConfig.
const exampleConfig = "standard"

// applyCluster applies a ValkeyCluster of configRef.
func (n *ns) applyCluster(name, configRef string, shards, replicas int) {
	n.t.Helper()
	n.kubectlIn(fmt.Sprintf("apiVersion: valkey.gomomento.com/v1alpha1\nkind: ValkeyCluster\nmetadata:\n  name: %s\nspec:\n  configRef: %s\n  shards: %d\n  replicasPerShard: %d\n",
		name, configRef, shards, replicas), "apply", "-f", "-")
}

// formCluster applies the example menu and a cluster of configRef, shards x replicas, and
// waits until it is Active and converged.
func (n *ns) formCluster(cluster, configRef string, shards, replicas int) {
	n.t.Helper()
	applyMenu(n)
	n.applyCluster(cluster, configRef, shards, replicas)
	n.waitState(cluster, "Active", 3*time.Minute)
	n.waitConverged(cluster, shards*(1+replicas), 2*time.Minute)
}

// patchTopology edits shards and replicasPerShard with kubectl patch.
func (n *ns) patchTopology(name string, shards, replicas int) {
	n.t.Helper()
	n.kubectl("patch", "valkeycluster", name, "--type=merge", "-p", fmt.Sprintf(`{"spec":{"shards":%d,"replicasPerShard":%d}}`, shards, replicas))
}

// nodeStatuses lists the cluster's ValkeyNodes with their status.
func (n *ns) nodeStatuses(cluster string) ([]clusterview.Node, error) {
	return clusterview.List(context.Background(), suite.dyn, n.name, cluster)
}

// nodeWithRole names the first ValkeyNode whose server has role (primary|replica).
func (n *ns) nodeWithRole(cluster, role string) string {
	n.t.Helper()
	nodes, err := n.nodeStatuses(cluster)
	require.NoError(n.t, err)
	for _, s := range nodes {
		if s.Role == role {
			return s.Name
		}
	}
	n.t.Fatalf("no %s among %v", role, nodes)
	return ""
}

// nodeID is the Valkey node ID the ValkeyNode name reports.
func (n *ns) nodeID(cluster, name string) string {
	n.t.Helper()
	nodes, err := n.nodeStatuses(cluster)
	require.NoError(n.t, err)
	for _, s := range nodes {
		if s.Name == name {
			require.NotEmpty(n.t, s.NodeID, "node ID of %s", name)
			return s.NodeID
		}
	}
	n.t.Fatalf("no ValkeyNode %s among %v", name, nodes)
	return ""
}

// requireForgotten checks that no server of the cluster still lists node ID id.
func (n *ns) requireForgotten(cluster, id string) {
	n.t.Helper()
	password := n.secretValue(cluster+"-auth", "password")
	for _, ip := range n.podIPs(cluster) {
		c := newNodeClient(n.t, ip+":6379", password)
		ctx, cancel := ctxTimeout(10 * time.Second)
		text, err := c.Do(ctx, c.B().ClusterNodes().Build()).ToString()
		cancel()
		require.NoError(n.t, err, "CLUSTER NODES on %s", ip)
		for _, cn := range parseClusterNodes(text) {
			require.NotEqual(n.t, id, cn.ID, "%s still lists the retired node %s", ip, id)
		}
	}
}

// waitStatusMatchesServers waits until every ValkeyNode's status.nodeID and status.role are
// what the servers themselves say: each node's pod address, looked up in CLUSTER NODES as
// every server reports it, has that ID and that role.
func (n *ns) waitStatusMatchesServers(cluster string) {
	n.t.Helper()
	password := n.secretValue(cluster+"-auth", "password")
	n.eventually(time.Minute, time.Second, "ValkeyNode status matches CLUSTER NODES", func() (bool, string, error) {
		nodes, err := n.nodeStatuses(cluster)
		if err != nil {
			return false, err.Error(), nil
		}
		pods := n.podsByName(cluster)
		for _, ip := range n.podIPs(cluster) {
			c := newNodeClient(n.t, ip+":6379", password)
			ctx, cancel := ctxTimeout(10 * time.Second)
			text, err := c.Do(ctx, c.B().ClusterNodes().Build()).ToString()
			cancel()
			if err != nil {
				return false, fmt.Sprintf("CLUSTER NODES on %s: %v", ip, err), nil
			}
			byAddr := map[string]clusterNode{}
			for _, cn := range parseClusterNodes(text) {
				byAddr[cn.Addr] = cn
			}
			for _, s := range nodes {
				addr := pods[s.Name].Status.PodIP + ":6379"
				cn, ok := byAddr[addr]
				role := map[bool]string{true: "primary", false: "replica"}[cn.Primary]
				if !ok || cn.ID != s.NodeID || role != s.Role {
					return false, fmt.Sprintf("%s: status id=%s role=%s, server %s says %s id=%s role=%s", s.Name, s.NodeID, s.Role, ip, addr, cn.ID, role), nil
				}
			}
		}
		return true, "", nil
	})
}

// waitRetired waits until the ValkeyNode name is gone: replaced and retired.
func (n *ns) waitRetired(cluster, name string) {
	n.t.Helper()
	n.eventually(2*time.Minute, time.Second, name+" retired", func() (bool, string, error) {
		now, err := n.nodeStatuses(cluster)
		if err != nil {
			return false, err.Error(), nil
		}
		for _, s := range now {
			if s.Name == name {
				return false, fmt.Sprint(now), nil
			}
		}
		return true, "", nil
	})
}

// waitConverged waits until the cluster has exactly want ValkeyNodes, all Active, as many
// pods with IPs, and valkey-cli --cluster check finds all slots covered and agreed.
func (n *ns) waitConverged(cluster string, want int, timeout time.Duration) {
	n.t.Helper()
	password := n.secretValue(cluster+"-auth", "password")
	n.eventually(timeout, time.Second, fmt.Sprintf("%s converged on %d nodes", cluster, want), func() (bool, string, error) {
		nodes, err := n.nodeStatuses(cluster)
		if err != nil {
			return false, err.Error(), nil
		}
		ips, settled := n.settled(nodes, cluster, want)
		if settled != "" {
			return false, settled, nil
		}
		out, err := clusterCheck(ips[0]+":6379", password)
		if err != nil || !strings.Contains(out, "[OK] All 16384 slots covered.") || strings.Contains(out, "[ERR]") ||
			!strings.Contains(out, "[OK] All nodes agree about slots configuration.") {
			return false, "cluster check: " + stripANSI(out), nil
		}
		return true, "", nil
	})
}

// settled returns the pod IPs of the cluster when it has exactly want ValkeyNodes, all Active,
// and as many pods with IPs; otherwise what it has instead.
func (n *ns) settled(nodes []clusterview.Node, cluster string, want int) ([]string, string) {
	desc, active := clusterview.Describe(nodes)
	ips := n.podIPs(cluster)
	if len(nodes) != want || active != want || len(ips) != want {
		return nil, fmt.Sprintf("%d pods with IPs; nodes %s", len(ips), desc)
	}
	return ips, ""
}

// stateWatch records every state the cluster reports while it runs.
type stateWatch struct {
	stop chan struct{}
	done chan struct{}
	mu   sync.Mutex
	seen map[string]int
}

func (n *ns) watchState(cluster string) *stateWatch {
	w := &stateWatch{stop: make(chan struct{}), done: make(chan struct{}), seen: map[string]int{}}
	go func() {
		defer close(w.done)
		for {
			if st, _, err := n.state(cluster); err == nil {
				w.mu.Lock()
				w.seen[st]++
				w.mu.Unlock()
			}
			select {
			case <-w.stop:
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	return w
}

// states stops the watch and returns the states seen.
func (w *stateWatch) states() []string {
	close(w.stop)
	<-w.done
	var out []string
	for s := range w.seen {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

// day2 starts a cluster of shards x replicas, waits for it to be converged and returns its
// writer, already running (with some writes acknowledged) and a state watch.
func day2(t *testing.T, n *ns, cluster string, shards, replicas int) (*day2Writer, *stateWatch) {
	t.Helper()
	return day2Of(t, n, cluster, exampleConfig, shards, replicas)
}

// day2Of is day2 for a cluster of configRef.
func day2Of(t *testing.T, n *ns, cluster, configRef string, shards, replicas int) (*day2Writer, *stateWatch) {
	t.Helper()
	n.formCluster(cluster, configRef, shards, replicas)
	password := n.secretValue(cluster+"-auth", "password")
	c := newClusterClient(t, addrsOf(n.podIPs(cluster)), password, nil)
	w := &day2Writer{c: c, Writer: loadgen.Start(c, loadgen.Options{Prefix: "day2:", Pace: time.Millisecond})}
	w.reader = func() valkey.Client { return newClusterClient(t, addrsOf(n.podIPs(cluster)), password, nil) }
	n.eventually(30*time.Second, 100*time.Millisecond, "writer running", func() (bool, string, error) {
		return w.Acked() >= 200, fmt.Sprintf("%d acknowledged", w.Acked()), nil
	})
	return w, n.watchState(cluster)
}

// day2Writer is the scenario's writer with the client it writes through.
type day2Writer struct {
	*loadgen.Writer
	c valkey.Client
	// reader opens a client on the servers the cluster has now: after a roll none of the
	// addresses the writer's client started from is left.
	reader func() valkey.Client
}

// finishDay2 checks that the writer is still being acknowledged once the operation is done
// (a cluster that converged but stopped serving writes fails here, not only one that lost
// them), stops it and the watch, and checks the pass criteria.
func finishDay2(t *testing.T, w *day2Writer, watch *stateWatch, what string) {
	t.Helper()
	assert.True(t, w.keepsAcknowledging(30*time.Second), "writes are still acknowledged after %s", what)
	finishDay2Stopped(t, w, w.Stop(), watch, what)
}

// keepsAcknowledging polls, up to within, until the writer has 100 more acknowledged writes
// than when it was called.
func (w *day2Writer) keepsAcknowledging(within time.Duration) bool {
	from := w.Acked()
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if w.Acked() >= from+100 {
			return true
		}
	}
	return w.Acked() >= from+100
}

// finishDay2Stopped is finishDay2 for a writer already stopped with res.
func finishDay2Stopped(t *testing.T, w *day2Writer, res loadgen.Result, watch *stateWatch, what string) {
	t.Helper()
	ctx, cancel := ctxTimeout(2 * time.Minute)
	defer cancel()
	lost, first := loadgen.Missing(ctx, w.reader(), "day2:", res.Acked)
	t.Logf("e2e: %s: writes acknowledged=%d rejected=%d lost=%d longest-pause=%s", what, len(res.Acked), res.Failed, lost, res.MaxPause.Round(time.Millisecond))
	if res.Failed > 0 {
		t.Logf("e2e: %s: why writes were rejected: %v", what, res.Errors)
	}
	if res.MaxPause > 250*time.Millisecond {
		t.Logf("e2e: %s: the longest pause: %s", what, res.Longest)
	}
	assert.Zero(t, lost, "acknowledged writes lost during %s; first: %v", what, first)
	assert.Equal(t, []string{"Active"}, watch.states(), "the cluster reports Active throughout %s", what)
}

// TestDay2ShardScaling: 2 -> 3 -> 2 shards with the data moving along.
func TestDay2ShardScaling(t *testing.T) {
	n := newNamespace(t, "e2e-shards")
	const cluster = "scale"
	w, watch := day2(t, n, cluster, 2, 1)

	start := time.Now()
	n.patchTopology(cluster, 3, 1)
	n.waitConverged(cluster, 6, 3*time.Minute)
	t.Logf("e2e: scale-out 2->3 shards converged in %.1fs", time.Since(start).Seconds())
	start = time.Now()
	n.patchTopology(cluster, 2, 1)
	n.waitConverged(cluster, 4, 3*time.Minute)
	t.Logf("e2e: scale-in 3->2 shards converged in %.1fs", time.Since(start).Seconds())

	// What moved is counted in the operator's metrics and told in the Events: the new
	// shard's third of the slots out and back, with the writer's keys.
	labels := map[string]string{"namespace": n.name, "cluster": cluster}
	slots, _, err := suite.operator.metric("valkey_cluster_slots_moved_total", labels)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, slots, float64(2*(16384/3)), "slots moved out to the new shard and back")
	keys, _, err := suite.operator.metric("valkey_cluster_keys_moved_total", labels)
	require.NoError(t, err)
	assert.Positive(t, keys, "keys moved with the slots")
	t.Logf("e2e: slots moved %.0f, keys moved %.0f", slots, keys)
	events := n.kubectl("get", "events", "--field-selector", "reason=TopologyAction", "-o", "jsonpath={range .items[*]}{.message}{\"\\n\"}{end}")
	assert.Regexp(t, `Rebalance: .*; moved [1-9][0-9]* slot\(s\) with [0-9]+ key\(s\)`, events, "an Event tells what each slot move carried")
	finishDay2(t, w, watch, "shard scaling 2->3->2")
}

// TestDay2ReplicaScaling: 1 -> 2 -> 1 replicas per shard; a decrease never removes a primary.
func TestDay2ReplicaScaling(t *testing.T) {
	n := newNamespace(t, "e2e-replicas")
	const cluster = "replicas"
	w, watch := day2(t, n, cluster, 2, 1)
	before, err := n.nodeStatuses(cluster)
	require.NoError(t, err)

	n.patchTopology(cluster, 2, 2)
	n.waitConverged(cluster, 6, 3*time.Minute)
	n.patchTopology(cluster, 2, 1)
	n.waitConverged(cluster, 4, 3*time.Minute)
	finishDay2(t, w, watch, "replica scaling 1->2->1")

	after, err := n.nodeStatuses(cluster)
	require.NoError(t, err)
	primaries := func(ss []clusterview.Node) []string {
		var out []string
		for _, s := range ss {
			if s.Role == "primary" {
				out = append(out, s.Name)
			}
		}
		return out
	}
	assert.Equal(t, primaries(before), primaries(after), "the primaries stay where they were")
}

// TestDay2LostPodsAreReplaced deletes a replica's pod, then a primary's: the primary hands its
// slots to its replica while its pod's preStop keeps it serving, each deleted node is replaced
// by a new ValkeyNode with a new name, its ID is forgotten, and the cluster heals.
func TestDay2LostPodsAreReplaced(t *testing.T) {
	n := newNamespace(t, "e2e-heal")
	const cluster = "heal"
	w, watch := day2(t, n, cluster, 2, 1)

	for _, role := range []string{"replica", "primary"} {
		victim := n.nodeWithRole(cluster, role)
		id := n.nodeID(cluster, victim)
		start := time.Now()
		n.kubectl("delete", "pod", victim, "--wait=false")
		n.waitRetired(cluster, victim)
		n.waitConverged(cluster, 4, 2*time.Minute)
		t.Logf("e2e: lost %s pod healed in %.1fs", role, time.Since(start).Seconds())
		n.requireForgotten(cluster, id)
	}
	finishDay2(t, w, watch, "replacing lost pods")
}

// killContainer SIGKILLs the running container of a pod: a crash, not a graceful stop.
func (n *ns) killContainer(pod string) {
	n.t.Helper()
	n.docker("kill", "--signal", "KILL", n.containerOf(pod))
}

// containerOf is the ID of the running server container of a pod.
func (n *ns) containerOf(pod string) string {
	n.t.Helper()
	return n.containerNamed(pod, render.ContainerName)
}

func (n *ns) docker(args ...string) string {
	n.t.Helper()
	ctx, cancel := ctxTimeout(30 * time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "docker", args...).CombinedOutput()
	require.NoError(n.t, err, "docker %v: %s", args, out)
	return string(out)
}

// TestDay2PrimaryCrash SIGKILLs a primary's container in a 3x1 cluster while a writer waits
// for one replica to confirm each write (WAIT 1). The pod is not restarted in place (it would
// come back empty under its old identity); Valkey's own failover promotes the replica and the
// operator replaces the node. Every write a replica had confirmed survives.
func TestDay2PrimaryCrash(t *testing.T) {
	primaryLost(t, "crash", "crashed", (*ns).killContainer)
}

// primaryLost loses a primary of a 3x1 cluster to lose (an unplanned loss) while a writer
// waits for one replica to confirm each write (WAIT 1), then checks that the lost node was
// retired and its ID forgotten, the cluster converged again, no replica-acknowledged write
// was lost and the cluster reported only Active.
func primaryLost(t *testing.T, cluster, how string, lose func(n *ns, pod string)) {
	t.Helper()
	n := newNamespace(t, "e2e-"+cluster)
	n.formCluster(cluster, exampleConfig, 3, 1)
	password := n.secretValue(cluster+"-auth", "password")
	c := newClusterClient(t, addrsOf(n.podIPs(cluster)), password, nil)
	prefix := cluster + ":"
	w := loadgen.Start(c, loadgen.Options{Prefix: prefix, Replicas: 1, Pace: time.Millisecond})
	n.eventually(30*time.Second, 100*time.Millisecond, "writer running", func() (bool, string, error) {
		return w.Acked() >= 200, fmt.Sprintf("%d acknowledged", w.Acked()), nil
	})
	watch := n.watchState(cluster)
	n.waitStatusMatchesServers(cluster)

	victim := n.nodeWithRole(cluster, "primary")
	id := n.nodeID(cluster, victim)
	start := time.Now()
	lose(n, victim)
	n.waitRetired(cluster, victim)
	t.Logf("e2e: %s primary retired %.1fs after it was lost", how, time.Since(start).Seconds())
	n.waitConverged(cluster, 6, 3*time.Minute)
	t.Logf("e2e: %s primary healed in %.1fs", how, time.Since(start).Seconds())
	n.requireForgotten(cluster, id)
	// After Valkey's own failover the recorded roles follow the servers.
	n.waitStatusMatchesServers(cluster)

	res := w.Stop()
	ctx, cancel := ctxTimeout(2 * time.Minute)
	defer cancel()
	lost, first := loadgen.Missing(ctx, newClusterClient(t, addrsOf(n.podIPs(cluster)), password, nil), prefix, res.Acked)
	t.Logf("e2e: %s primary: writes replica-acknowledged=%d unconfirmed=%d rejected=%d lost=%d longest-pause=%s",
		how, len(res.Acked), res.Unconfirmed, res.Failed, lost, res.MaxPause.Round(time.Millisecond))
	assert.Zero(t, lost, "replica-acknowledged writes lost to the %s primary; first: %v", how, first)
	assert.Equal(t, []string{"Active"}, watch.states(), "the cluster reports Active throughout")
}

// freezeContainer stops (SIGSTOP) the server process of a pod's container from the host:
// the process hangs but its pod keeps running, and its listening socket still completes TCP
// handshakes, so the pod stays Ready. The process is resumed when the test ends, in case its
// container is still there.
func (n *ns) freezeContainer(pod string) {
	n.t.Helper()
	pid := strings.TrimSpace(n.docker("inspect", "-f", "{{.State.Pid}}", n.containerOf(pod)))
	out, err := exec.Command("kill", "-STOP", pid).CombinedOutput()
	require.NoError(n.t, err, "kill -STOP %s: %s", pid, out)
	n.t.Cleanup(func() { _ = exec.Command("kill", "-CONT", pid).Run() })
}

// TestDay2FrozenPrimaryIsReplaced freezes a primary's server (SIGSTOP) in a 3x1 cluster: its
// pod still runs and stays Ready, but its peers flag it fail and Valkey promotes its replica;
// the operator replaces the hung node (deleting its ValkeyNode stops the pod) and forgets its
// ID. Every write a replica had confirmed survives.
func TestDay2FrozenPrimaryIsReplaced(t *testing.T) {
	primaryLost(t, "frozen", "frozen", (*ns).freezeContainer)
}

// TestDay2OperatorKilledDuringScaleOut SIGKILLs the operator while it scales 2 -> 3 shards, as
// soon as the new shard's nodes exist, and starts a new one: it finishes the scale-out with
// no slot left open, no node doubled and no acknowledged write lost.
func TestDay2OperatorKilledDuringScaleOut(t *testing.T) {
	n := newNamespace(t, "e2e-opkill")
	const cluster = "opkill"
	w, watch := day2(t, n, cluster, 2, 1)

	n.patchTopology(cluster, 3, 1)
	n.eventually(time.Minute, 50*time.Millisecond, "the new shard's nodes exist", func() (bool, string, error) {
		nodes, err := n.nodeStatuses(cluster)
		return err == nil && len(nodes) > 4, fmt.Sprint(nodes), nil
	})
	crashAndRestart(t)
	n.waitConverged(cluster, 6, 3*time.Minute)

	nodes, err := n.nodeStatuses(cluster)
	require.NoError(t, err)
	assert.Equal(t, map[string]int{"0": 2, "1": 2, "2": 2}, clusterview.PerShard(nodes), "no shard doubled")
	finishDay2(t, w, watch, "an operator SIGKILL during scale-out")
}

// cordonAll cordons every dev node, so no new pod can be scheduled, and returns what
// uncordons them again (also run when the test ends).
func (n *ns) cordonAll() (uncordon func()) {
	n.t.Helper()
	return n.cordon(strings.Fields(n.kubectl("get", "nodes", "-o", "name")))
}

// cordon cordons the given nodes and returns what uncordons them again (also run when the
// test ends).
func (n *ns) cordon(nodes []string) (uncordon func()) {
	n.t.Helper()
	require.NotEmpty(n.t, nodes)
	uncordon = func() {
		for _, node := range nodes {
			_, _ = kubectlRun("", "uncordon", node)
		}
	}
	n.t.Cleanup(uncordon)
	for _, node := range nodes {
		n.kubectl("cordon", node)
	}
	return uncordon
}

// waitStalled waits for a TopologyStalled Warning Event in the namespace.
func (n *ns) waitStalled() {
	n.t.Helper()
	n.waitWarning("TopologyStalled", "", time.Minute)
}

// waitWarning waits until the namespace has a Warning Event of reason whose message contains
// want ("" for any), and returns the messages of all of them.
func (n *ns) waitWarning(reason, want string, timeout time.Duration) string {
	n.t.Helper()
	var messages string
	n.eventually(timeout, time.Second, fmt.Sprintf("a %s Warning Event saying %q", reason, want), func() (bool, string, error) {
		messages = n.kubectl("get", "events", "--field-selector", "reason="+reason+",type=Warning", "-o", "jsonpath={.items[*].message}")
		return strings.TrimSpace(messages) != "" && strings.Contains(messages, want), messages, nil
	})
	return messages
}

// TestDay2UnschedulableScaleStalls: a replica increase whose pods cannot be placed (every
// node cordoned) stalls with a Warning Event while the cluster keeps serving as it was, and
// finishes by itself once the pods fit.
func TestDay2UnschedulableScaleStalls(t *testing.T) {
	n := newNamespace(t, "e2e-stall")
	const cluster = "stall"
	w, watch := day2(t, n, cluster, 2, 1)

	uncordon := n.cordonAll()
	n.patchTopology(cluster, 2, 2)
	n.waitStalled()
	uncordon()
	n.waitConverged(cluster, 6, 3*time.Minute)
	finishDay2(t, w, watch, "a stalled, then resumed, replica increase")
}

// TestDay2ShardWithoutReplicaLost: with replicasPerShard 0, deleting a primary's pod loses
// the only copy of its slots. The operator says so (a SlotsLost Warning Event), gives the slots
// to an empty replacement, and the whole cluster serves again, never leaving Active.
func TestDay2ShardWithoutReplicaLost(t *testing.T) {
	n := newNamespace(t, "e2e-noreplica")
	const cluster = "bare"
	n.formCluster(cluster, exampleConfig, 2, 0)
	watch := n.watchState(cluster)

	victim := n.nodeWithRole(cluster, "primary")
	start := time.Now()
	n.kubectl("delete", "pod", victim, "--wait=false")
	n.waitRetired(cluster, victim)
	n.waitConverged(cluster, 2, 2*time.Minute)
	t.Logf("e2e: shard without replica restored (empty) in %.1fs", time.Since(start).Seconds())
	n.waitWarning("SlotsLost", "", 30*time.Second)

	// Every slot takes writes again (servers report cluster_state ok a moment after the last
	// slot is assigned).
	c := newClusterClient(t, addrsOf(n.podIPs(cluster)), n.secretValue(cluster+"-auth", "password"), nil)
	n.eventually(30*time.Second, 500*time.Millisecond, "writes to every slot", func() (bool, string, error) {
		ctx, cancel := ctxTimeout(10 * time.Second)
		defer cancel()
		for i := 0; i < 500; i++ {
			if err := c.Do(ctx, c.B().Set().Key(fmt.Sprintf("after:%d", i)).Value("v").Build()).Error(); err != nil {
				return false, fmt.Sprintf("write %d: %v", i, err), nil
			}
		}
		return true, "", nil
	})
	t.Logf("e2e: whole cluster writable again %.1fs after the deletion", time.Since(start).Seconds())
	assert.Equal(t, []string{"Active"}, watch.states(), "the cluster reports Active throughout")
}
