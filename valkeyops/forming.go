package valkeyops

// The settings fresh nodes form at, and Settle, which puts every node back at its configured
// ones however Bootstrap ends.

import (
	"context"
	"strconv"
	"time"

	"github.com/gomomento/valkey-operator/valkeyops/model"
)

// formingNodeTimeout (ms) is the cluster-node-timeout a new cluster's nodes form at. The
// protocol's steps take about 0.2 s (mostly MEET handshakes, paced by the 100 ms cluster
// cron); what decides the rest is each primary's "rejoin delay": a primary reports
// cluster_state:fail until node-timeout (clamped to 0.5-5 s) has passed since it last saw no
// majority of slot-owning primaries, which for a fresh node is until it was given slots. At
// the configured 3 s that is 3 s; at 500 ms or below it is the 0.5 s floor (measured on 2
// loaded cores: 100, 200, 250, 300 and 500 ms all formed a 3x1 cluster in a median
// 0.51-0.57 s). 500 is the highest value at that floor, so a PONG has to be that late, on a
// machine busy with other work, before a peer is flagged failing: a flag that restarts a
// primary's rejoin delay when it leaves the primary without a majority in sight, and keeps
// a slot-owning primary marked FAIL for twice the timeout.
const formingNodeTimeout = 500

// joiningNodeTimeout (ms) is the cluster-node-timeout fresh nodes join a formed cluster at:
// their rejoin delay stays near a second, yet the cluster may be serving and the failure
// reports of the fresh (slotless) primaries count toward the quorum that marks a serving
// primary FAIL (alone, in a one-shard cluster), so they are not given formingNodeTimeout.
const joiningNodeTimeout = 1000

// settleTimeout bounds settle, which also runs after the caller's context ended.
const settleTimeout = 5 * time.Second

// freshNodes are the new servers: they know nobody and have no config epoch. Most own
// nothing; a server restored from a backup owns the slots its loaded keys hash to (it claims
// them at start), and is as new: it gets the same preparation, or its replicas would wait out
// the configured diskless-sync delay and it its configured rejoin delay. Each gets a distinct
// config epoch before it meets anyone (nodes at epoch 0 can accept gossip handing their
// slots away). A server that formed before has an epoch, or knows its peers from nodes.conf.
func freshNodes(snap *model.Snapshot) []model.Node {
	var out []model.Node
	for _, st := range snap.Nodes {
		if st.KnownNodes <= 1 && st.ConfigEpoch == 0 {
			out = append(out, st.Node)
		}
	}
	return out
}

// prepareFresh is what a fresh node runs before it meets anyone: its distinct config epoch,
// no delay before its replicas' first sync (they all attach at once), and the lower timeout
// it forms at (forming: a new cluster) when its configured one is known and higher. A new cluster's nodes
// also turn replica failover off: at formingNodeTimeout a PONG late on a loaded machine can
// get a primary marked FAIL, and its replica must not take its slots over.
func prepareFresh(n model.Node, epoch uint64, forming bool) [][]string {
	cmds := [][]string{
		{"CLUSTER", "SET-CONFIG-EPOCH", strconv.FormatUint(epoch, 10)},
		{"CONFIG", "SET", "repl-diskless-sync-delay", "0"},
	}
	timeout := joiningNodeTimeout
	if forming {
		timeout = formingNodeTimeout
	}
	if n.NodeTimeoutMillis <= timeout {
		return cmds
	}
	set := []string{"CONFIG", "SET", "cluster-node-timeout", strconv.Itoa(timeout)}
	if forming {
		set = append(set, "cluster-replica-no-failover", "yes")
	}
	return append(cmds, set)
}

// Settle puts the nodes back at their configured cluster-node-timeout (Node.NodeTimeoutMillis,
// when known) with replica failover allowed. Bootstrap ends with it on every path, whatever
// this pass lowered: only the first pass of a formation sees its nodes fresh, so a pass that
// died before restoring (operator restarted, context cancelled) would leave them at the
// forming timeout, where a late PONG flags healthy nodes failing, and unable to fail over,
// for good. A cluster is reported Active only after Bootstrap returned, so a rerun settles
// what a dead pass left; a node that joined an Active cluster under a pass that did not
// return is found joined and never given to Bootstrap again, so the reconciler settles it
// before marking it Active. It runs on a context of its own: the caller's may be what ended
// the pass.
func (a *Admin) Settle(ctx context.Context, nodes []model.Node) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	return parallel(nodes, func(n model.Node) error {
		args := []string{"CONFIG", "SET", "cluster-replica-no-failover", "no"}
		if n.NodeTimeoutMillis > 0 {
			args = append(args, "cluster-node-timeout", strconv.Itoa(n.NodeTimeoutMillis))
		}
		_, err := a.cmd(ctx, n, "settle-node-timeout", args...)
		return err
	})
}

// reachableNodes is the snapshot's nodes that answered.
func reachableNodes(snap *model.Snapshot) []model.Node {
	var out []model.Node
	for _, st := range snap.Nodes {
		if st.Reachable {
			out = append(out, st.Node)
		}
	}
	return out
}
