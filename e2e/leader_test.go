//go:build e2e

package e2e

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gomomento/valkey-operator/internal/clusterview"
	"github.com/gomomento/valkey-operator/internal/loadgen"
	"github.com/gomomento/valkey-operator/valkeyops/model"
)

// leaseTakeoverBound is how long a standby may need to take a dead leader's Lease. client-go
// counts the lease duration (controller-runtime's default, 15 s) from when the standby last
// saw the record change, which it reads every retry period (2 s), and the leader renewed up to
// one retry period before it died: 15 s + 2 x 2 s, plus slack for API latency on two shared
// cores. Measured: 19.2 s.
const leaseTakeoverBound = 15*time.Second + 2*2*time.Second + 3*time.Second

// TestLeaderFailoverMidScaleOut runs two operator replicas, as deploy/'s Deployment does: the
// same binary, the shipped ServiceAccount, leader election on. The leader is SIGKILLed while
// a 2->3 shard scale-out moves slots under a writer; the standby takes the Lease within the
// lease duration and finishes the scale-out. Nothing runs twice: no shard gets a third node,
// and the standby moves exactly the slots the new shard did not own yet when the leader died.
func TestLeaderFailoverMidScaleOut(t *testing.T) {
	n := newNamespace(t, "e2e-leader")
	const cluster = "leader"
	w, watch := day2(t, n, cluster, 2, 1)
	// Enough keys that the move lasts several seconds.
	ctx, cancel := ctxTimeout(2 * time.Minute)
	defer cancel()
	require.NoError(t, loadgen.Fill(ctx, w.c, "leader:", 300_000, 2000, nil))

	standby, err := startOperator(suite.bin, suite.operatorKubeconfig, filepath.Join(suite.tmp, "manager-standby.log"))
	require.NoError(t, err, "starting a second replica")
	leader := n.leaseHolder("")
	t.Cleanup(func() {
		if suite.operator != standby { // the test ended before the kill: keep the suite's
			_ = standby.Stop()
		}
	})

	n.patchTopology(cluster, 3, 1)
	operatorPw := n.secretValue(cluster+"-auth", "operator-password")
	n.eventually(2*time.Minute, 50*time.Millisecond, "slots moving to the new shard", func() (bool, string, error) {
		s, _, err := n.shardSlots(cluster, "2", operatorPw)
		return err == nil && s > 0, fmt.Sprintf("new shard owns %d slots (%v)", s, err), nil
	})
	killed := time.Now()
	require.NoError(t, suite.operator.Kill(), "SIGKILL the leader")
	suite.operator = standby
	// Nothing moves a slot until the standby leads: what the servers agree on now is what
	// the dead leader moved.
	atKill := n.agreedShardSlots(cluster, "2", operatorPw)

	n.leaseHolder(leader)
	takeover := time.Since(killed)
	t.Logf("e2e: the standby took the Lease %.1fs after the leader was killed (new shard owned %d slots then)", takeover.Seconds(), atKill)
	assert.LessOrEqual(t, takeover, leaseTakeoverBound, "takeover within the lease duration")

	n.waitConverged(cluster, 6, 3*time.Minute)
	nodes, err := n.nodeStatuses(cluster)
	require.NoError(t, err)
	assert.Equal(t, map[string]int{"0": 2, "1": 2, "2": 2}, clusterview.PerShard(nodes), "no node created twice")
	atEnd := n.agreedShardSlots(cluster, "2", operatorPw)
	assert.Less(t, atKill, atEnd, "the leader died in the middle of the move")
	moved, _, err := standby.metric("valkey_cluster_slots_moved_total", map[string]string{"namespace": n.name, "cluster": cluster})
	require.NoError(t, err)
	assert.Equal(t, float64(atEnd-atKill), moved, "the standby moved only what was left: no slot moved twice")
	finishDay2(t, w, watch, "a leader SIGKILL during scale-out")
}

// leaseHolder waits until the operator's Lease names a holder other than not ("" for any)
// and returns it.
func (n *ns) leaseHolder(not string) string {
	n.t.Helper()
	var holder string
	n.eventually(time.Minute, 100*time.Millisecond, "a leader other than "+not, func() (bool, string, error) {
		out, err := kubectlRun("", "get", "lease", leaderLease, "-n", operatorNamespace, "-o", "jsonpath={.spec.holderIdentity}")
		if err != nil {
			return false, out, nil
		}
		holder = strings.TrimSpace(out)
		return holder != "" && holder != not, "holder " + holder, nil
	})
	return holder
}

// shardSlots counts the slots the primaries of the cluster's shard own, as every server of
// the cluster sees them (CLUSTER NODES); agreed says whether they all see the same.
func (n *ns) shardSlots(cluster, shard, operatorPw string) (slots int, agreed bool, err error) {
	nodes, err := n.nodeStatuses(cluster)
	if err != nil {
		return 0, false, err
	}
	ips := map[string]string{} // a ValkeyNode's pod bears its name
	for name, p := range n.podsByName(cluster) {
		if p.Status.PodIP != "" && p.DeletionTimestamp == nil {
			ips[name] = p.Status.PodIP
		}
	}
	inShard := map[string]bool{}
	for _, nd := range nodes {
		if fmt.Sprint(nd.Shard) == shard && ips[nd.Name] != "" {
			inShard[ips[nd.Name]] = true
		}
	}
	seen := map[int]bool{}
	for _, ip := range ips {
		msg, err := operatorCommand(ip, operatorPw, "CLUSTER", "NODES")
		if err != nil {
			return 0, false, err
		}
		text, err := msg.ToString()
		if err != nil {
			return 0, false, err
		}
		view, err := model.ParseClusterNodes(text)
		if err != nil {
			return 0, false, err
		}
		total := 0
		for _, cn := range view {
			if inShard[cn.IP] {
				total += model.CountSlots(cn.Slots)
			}
		}
		seen[total] = true
		slots = max(slots, total)
	}
	return slots, len(seen) == 1, nil
}

// agreedShardSlots waits until every server sees the same slots in the shard.
func (n *ns) agreedShardSlots(cluster, shard, operatorPw string) int {
	n.t.Helper()
	var slots int
	n.eventually(15*time.Second, 100*time.Millisecond, "every server agreeing on shard "+shard+"'s slots", func() (bool, string, error) {
		var agreed bool
		var err error
		slots, agreed, err = n.shardSlots(cluster, shard, operatorPw)
		return err == nil && agreed, fmt.Sprintf("%d slots, agreed %t, %v", slots, agreed, err), nil
	})
	return slots
}
