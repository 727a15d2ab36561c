//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gomomento/valkey-operator/internal/clusterview"
	"github.com/gomomento/valkey-operator/internal/loadgen"
	"github.com/gomomento/valkey-operator/internal/poll"
)

// operatorDown is how long the operator stays stopped while the cluster is disrupted: long
// enough that Valkey alone has done all it will (a failover within a few node timeouts), so
// the operator starts on a cluster that settled without it.
const operatorDown = 60 * time.Second

// stopOperator stops the suite's operator gracefully (it releases its Lease) and returns what
// starts a new one in its place; the test's end starts one too if the test did not, so the
// suite's later tests find an operator.
func stopOperator(t *testing.T) (start func()) {
	t.Helper()
	require.NoError(t, suite.operator.Stop(), "stopping the operator")
	// A Lease left behind (the release failed) would hold the new one off for 15 s.
	out, err := kubectlRun("", "delete", "lease", leaderLease, "-n", operatorNamespace, "--ignore-not-found")
	require.NoError(t, err, out)
	start = func() {
		if suite.operator.Running() == nil {
			return
		}
		op, err := startOperator(suite.bin, suite.operatorKubeconfig, filepath.Join(suite.tmp, fmt.Sprintf("manager-%d.log", time.Now().UnixNano())))
		require.NoError(t, err, "starting the operator again")
		suite.operator = op
	}
	t.Cleanup(start)
	return start
}

// TestOperatorDownDuringDisruption stops the operator, deletes a primary's pod in one shard
// and a replica's pod in another while a writer waits for one replica to confirm each write
// (WAIT 1), and starts the operator 60 s later. Meanwhile the servers fend for themselves
// (Valkey's own election promotes the lost primary's replica: two of three primaries
// survive) and nobody replaces the pods. The operator then finds a cluster it did not see
// change: both lost nodes are retired and forgotten, the full topology comes back, no
// replica-acknowledged write is lost, and the cluster reports Active throughout (the state
// watch reads the object, which stays as it was while nobody writes it).
func TestOperatorDownDuringDisruption(t *testing.T) {
	n := newNamespace(t, "e2e-opdown")
	const cluster = "opdown"
	n.formCluster(cluster, exampleConfig, 3, 1)
	n.waitStatusMatchesServers(cluster)
	password := n.secretValue(cluster+"-auth", "password")
	const prefix = "opdown:"
	w := loadgen.Start(fastClient(t, n.podIPs(cluster), password), loadgen.Options{Prefix: prefix, Replicas: 1, Pace: time.Millisecond})
	n.eventually(30*time.Second, 100*time.Millisecond, "writer running", func() (bool, string, error) {
		return w.Acked() >= 200, fmt.Sprintf("%d acknowledged", w.Acked()), nil
	})
	watch := n.watchState(cluster)

	nodes, err := n.nodeStatuses(cluster)
	require.NoError(t, err)
	primary := n.nodeWithRole(cluster, "primary")
	var replica string
	for _, nd := range nodes {
		if nd.Role == "replica" && nd.Shard != shardOf(nodes, primary) {
			replica = nd.Name
			break
		}
	}
	require.NotEmpty(t, replica, "a replica of another shard than %s's", primary)
	ids := []string{n.nodeID(cluster, primary), n.nodeID(cluster, replica)}

	pods := n.podsByName(cluster)
	var survivor string
	for name, p := range pods {
		if name != primary && name != replica {
			survivor = p.Status.PodIP
		}
	}
	stopped := time.Now()
	start := stopOperator(t)
	moved := watchOwners(survivor, n.secretValue(cluster+"-auth", "operator-password"), []string{pods[primary].Status.PodIP + ":6379"}, stopped)
	n.kubectl("delete", "pod", primary, replica, "--wait=false")
	t.Logf("e2e: operator down: deleted primary %s (shard %d) and replica %s (shard %d)", primary, shardOf(nodes, primary), replica, shardOf(nodes, replica))
	// Without the operator (n.eventually would stop at its absence) the pods go, and the
	// servers alone move the lost primary's slots to its replica (Valkey's own election: two
	// of three primaries survive). Only logged: what Valkey does by itself is not under test.
	err = poll.Until(context.Background(), 500*time.Millisecond, operatorDown-5*time.Second, "the deleted pods gone", func(context.Context) (bool, string, error) {
		left := len(n.podsByName(cluster))
		return left == 4, fmt.Sprintf("%d pods", left), nil
	})
	t.Logf("e2e: operator down: the deleted pods were gone %.1fs after the operator stopped (%v)", time.Since(stopped).Seconds(), err)
	state, _, err := n.state(cluster)
	require.NoError(t, err)
	assert.Equal(t, "Active", state, "the status stays as the operator left it")

	time.Sleep(time.Until(stopped.Add(operatorDown))) // the scenario: the operator stays down 60 s
	if at := moved(); at > 0 {
		t.Logf("e2e: operator down: the servers gave the lost primary's slots to its replica %.1fs after the operator stopped", at.Seconds())
	} else {
		t.Logf("e2e: operator down: the servers had not moved the lost primary's slots when the operator came back")
	}
	restarted := time.Now()
	start()
	n.waitRetired(cluster, primary)
	n.waitRetired(cluster, replica)
	n.waitConverged(cluster, 6, 2*time.Minute)
	t.Logf("e2e: operator down: full topology back %.1fs after the operator started again", time.Since(restarted).Seconds())
	for _, id := range ids {
		n.requireForgotten(cluster, id)
	}
	n.waitStatusMatchesServers(cluster)
	t.Logf("e2e: operator down: the operator's actions:\n%s", n.kubectl("get", "events", "--field-selector", "reason=TopologyAction", "-o", "jsonpath={range .items[*]}{.message}{\"\\n\"}{end}"))

	res := w.Stop()
	ctx, cancel := ctxTimeout(2 * time.Minute)
	defer cancel()
	lost, first := loadgen.Missing(ctx, newClusterClient(t, addrsOf(n.podIPs(cluster)), password, nil), prefix, res.Acked)
	t.Logf("e2e: operator down: writes replica-acknowledged=%d unconfirmed=%d rejected=%d lost=%d longest-pause=%s",
		len(res.Acked), res.Unconfirmed, res.Failed, lost, res.MaxPause.Round(time.Millisecond))
	assert.Zero(t, lost, "replica-acknowledged writes lost while the operator was down; first: %v", first)
	assert.Equal(t, []string{"Active"}, watch.states(), "the cluster reports Active throughout")
}

// shardOf is the shard of the ValkeyNode name among nodes (-1 if absent).
func shardOf(nodes []clusterview.Node, name string) int {
	for _, nd := range nodes {
		if nd.Name == name {
			return nd.Shard
		}
	}
	return -1
}
