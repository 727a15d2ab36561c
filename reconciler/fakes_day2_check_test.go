//go:build envtest

package reconciler_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gomomento/valkey-operator/valkeyops"
	"github.com/gomomento/valkey-operator/valkeyops/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/types"
)

// The day-2 fake's own tests: it must answer and refuse as valkeyops on real servers does
// (the integration tests named below show the real side).

// formedDay2 is a fake 2-shard × 1-replica cluster (n0a, n0b, n1a, n1b) formed by Bootstrap,
// with the nodes as the reconciler passes them.
func formedDay2(t *testing.T) (*day2Cluster, []model.Node) {
	t.Helper()
	c := newDay2Servers().cluster(types.NamespacedName{Namespace: "fake", Name: strings.ReplaceAll(t.Name(), "/", "-")})
	var nodes []model.Node
	for i, name := range []string{"n0a", "n0b", "n1a", "n1b"} {
		ip := fmt.Sprintf("10.0.0.%d", i+1)
		c.start(name, ip, i/2)
		nodes = append(nodes, model.Node{Name: name, Addr: ip + ":6379", Shard: i / 2})
	}
	require.NoError(t, c.Bootstrap(context.Background(), nodes, 2))
	return c, nodes
}

// TestDay2FakeObservesAsValkeyops: a formed cluster passes model.Health with each shard's
// first node primary of its even range; a stopped server stays in the snapshot, unreachable,
// its peers see their link down and flag it only after a node timeout.
func TestDay2FakeObservesAsValkeyops(t *testing.T) {
	ctx := context.Background()
	c, nodes := formedDay2(t)
	snap, err := c.Observe(ctx, nodes)
	require.NoError(t, err)
	assert.Empty(t, model.Health(snap, 2, 1))
	for i, st := range snap.Nodes {
		if i%2 == 0 {
			assert.Equal(t, model.RolePrimary, st.Role, st.Name)
			assert.Equal(t, []model.SlotRange{model.EvenRanges(2)[i/2]}, st.Slots, st.Name)
		} else {
			assert.Equal(t, model.RoleReplica, st.Role, st.Name)
			assert.Equal(t, snap.Nodes[i-1].ID, st.PrimaryID, st.Name)
			assert.NotNil(t, model.BestReplica(snap, st.PrimaryID), "%s is electable", st.Name)
		}
	}

	c.stop("n1b")
	snap, err = c.Observe(ctx, nodes)
	require.NoError(t, err)
	gone := snap.ByName("n1b")
	assert.False(t, gone.Reachable)
	assert.ErrorIs(t, gone.Err, model.ErrUnreachable)
	peer := snap.ByName("n0a").Peer(gone.Node.Name)
	assert.Nil(t, peer, "peers are listed by ID, not name")
	st, _ := c.inspect("n1b")
	peer = snap.ByName("n0a").Peer(st.ID)
	require.NotNil(t, peer)
	assert.Equal(t, model.BusDisconnected, peer.BusLink)
	assert.False(t, peer.Failed(), "not flagged before a node timeout")
	require.NoError(t, c.nodeTimeout("n1b"))
	snap, err = c.Observe(ctx, nodes)
	require.NoError(t, err)
	assert.True(t, snap.ByName("n0a").Peer(st.ID).Failed())
}

// TestDay2FakeRefuses: what valkeyops or a real server refuses, the fake refuses with the same
// sentinel, and moves no slot and no role (a FORGET refused by one node is still carried out
// by the others, as on real servers). The real refusals: integration's TestTopologyRefusals,
// TestReplicaAddRemoveAndGracefulFailover (no in-sync replica); a move or a forced failover
// that cannot happen is a wait valkeyops gives up on (ErrNotConverged), too slow to repeat
// there.
func TestDay2FakeRefuses(t *testing.T) {
	ctx := context.Background()
	id := func(c *day2Cluster, name string) string { st, _ := c.inspect(name); return st.ID }
	tests := []struct {
		name string
		do   func(c *day2Cluster, nodes []model.Node) error
		is   error  // errors.Is target; nil for a server's error reply
		msg  string // what the error says
	}{
		{name: "remove a node holding slots", is: model.ErrUnsafe,
			do: func(c *day2Cluster, nodes []model.Node) error { return c.RemoveNode(ctx, nodes, "n0a") }},
		{name: "remove a node not among nodes", is: model.ErrInvalidSpec,
			do: func(c *day2Cluster, nodes []model.Node) error { return c.RemoveNode(ctx, nodes[1:], "n0a") }},
		{name: "fail over a primary without a linked replica", is: model.ErrNoInSyncReplica,
			do: func(c *day2Cluster, nodes []model.Node) error { c.stop("n0b"); return c.Failover(ctx, nodes, "n0a") }},
		{name: "make a slot-holding primary a replica", is: model.ErrUnsafe,
			do: func(c *day2Cluster, nodes []model.Node) error {
				nodes[0].Shard = 1
				return c.Replicate(ctx, nodes, "n0a", 1)
			}},
		{name: "replicate a node that does not answer", is: model.ErrUnreachable,
			do: func(c *day2Cluster, nodes []model.Node) error {
				c.stop("n1b")
				return c.Replicate(ctx, nodes, "n1b", 1)
			}},
		{name: "bootstrap an address where no server runs", is: model.ErrUnreachable,
			do: func(c *day2Cluster, nodes []model.Node) error {
				return c.Bootstrap(ctx, append(nodes, model.Node{Name: "ghost", Addr: "10.0.0.99:6379", Shard: 1}), 2)
			}},
		{name: "bootstrap a shard without nodes", is: model.ErrInvalidSpec,
			do: func(c *day2Cluster, nodes []model.Node) error { return c.Bootstrap(ctx, nodes, 3) }},
		{name: "a replica forgets its own primary", msg: "Can't forget my master!",
			do: func(c *day2Cluster, nodes []model.Node) error { return c.Forget(ctx, nodes, []string{id(c, "n0a")}) }},
		{name: "assign slots to a replica", is: model.ErrUnsafe,
			do: func(c *day2Cluster, nodes []model.Node) error {
				return c.AssignSlots(ctx, nodes, "n0b", []model.SlotRange{{Start: 0, End: 0}})
			}},
		{name: "move slots while a primary is failed", is: model.ErrNotConverged, msg: "unsafe",
			do: func(c *day2Cluster, nodes []model.Node) error {
				c.stop("n1a")
				require.NoError(t, c.nodeTimeout("n1a"))
				_, err := c.Rebalance(ctx, []model.Node{nodes[0], nodes[1], nodes[3]}, nil)
				return err
			}},
		{name: "drain every primary", is: model.ErrInvalidSpec,
			do: func(c *day2Cluster, nodes []model.Node) error {
				_, err := c.Rebalance(ctx, nodes, []string{"n0a", "n1a"})
				return err
			}},
		{name: "graceful failover while the primary is down", msg: "Master is down or failed",
			do: func(c *day2Cluster, _ []model.Node) error { c.stop("n0a"); return c.manualFailover("n0b") }},
		{name: "forced failover without a majority to vote", is: model.ErrNotConverged,
			do: func(c *day2Cluster, nodes []model.Node) error {
				c.stop("n0a")
				return c.ForceFailover(ctx, nodes, "n0b")
			}},
		{name: "Valkey's own failover without a majority of primaries", msg: "no majority",
			do: func(c *day2Cluster, _ []model.Node) error {
				c.stop("n0a")
				require.NoError(t, c.nodeTimeout("n0a"))
				_, err := c.valkeyFailover("n0a")
				return err
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, nodes := formedDay2(t)
			layout := func() map[string]string {
				out := map[string]string{}
				for _, n := range []string{"n0a", "n0b", "n1a", "n1b"} {
					st, _ := c.inspect(n)
					out[n] = fmt.Sprintf("%s primary=%s slots=%d", st.Role, st.Primary, st.Slots)
				}
				return out
			}
			want := layout()
			err := tc.do(c, nodes)
			require.Error(t, err)
			if tc.is != nil {
				assert.ErrorIs(t, err, tc.is)
				var op *model.OpError
				assert.ErrorAs(t, err, &op, "typed as valkeyops' errors are (model.OpError)")
			}
			assert.Contains(t, err.Error(), tc.msg)
			assert.Equal(t, want, layout(), "a refused operation changes nothing")
		})
	}
}

// TestDay2FakeFinishesOpenSlots: slots an interrupted move left open show on both ends' own
// lines (MIGRATING on the source, IMPORTING on the target) and fail model.Health; the next
// Rebalance finishes them first, and ends balanced with nothing open.
func TestDay2FakeFinishesOpenSlots(t *testing.T) {
	ctx := context.Background()
	c, nodes := formedDay2(t)
	c.start("n2a", "10.0.0.5", 2)
	nodes = append(nodes, model.Node{Name: "n2a", Addr: "10.0.0.5:6379", Shard: 2})
	require.NoError(t, c.Bootstrap(ctx, nodes, 3))
	require.Equal(t, moveChunk, c.openFirstMove(nodes, nil, moveChunk))
	snap, err := c.Observe(ctx, nodes)
	require.NoError(t, err)
	dst := snap.ByName("n2a")
	assert.Len(t, dst.Self().Importing, moveChunk)
	assert.Contains(t, strings.Join(model.Health(snap, 3, 0), "\n"), "node n2a has open slots")

	moved, err := c.Rebalance(ctx, nodes, nil)
	require.NoError(t, err)
	assert.Equal(t, valkeyops.MoveStats{Slots: moved.Slots, MigrateSlots: moved.Slots}, moved)
	assert.InDelta(t, model.SlotCount/3, moved.Slots, 2, "the open chunk and the rest of the new share")
	assert.Empty(t, c.health([]string{"n0a", "n0b", "n1a", "n1b", "n2a"}, 3, 0))
}

// TestDay2RecorderHoldsAndKills: a held Rebalance is in flight until released, and a call that
// starts meanwhile is flagged as overlapping it; a hook runs once, right after its op; a
// killed process's calls fail as unreachable servers do.
func TestDay2RecorderHoldsAndKills(t *testing.T) {
	ctx := context.Background()
	c, nodes := formedDay2(t)
	l := &opLog{}
	proc := &operatorProcess{dead: make(chan struct{})}
	r := &recordedPorts{c: c, log: l, proc: proc}
	held, release := l.holdNextRebalance()
	t.Cleanup(release)
	ran := 0
	hooked := l.afterNext("Rebalance", func() { ran++ })
	first := make(chan error, 1)
	go func() { _, err := r.Rebalance(ctx, nodes, nil); first <- err }()
	select {
	case <-held:
	case <-time.After(5 * time.Second):
		t.Fatal("the Rebalance was never held")
	}
	assert.Equal(t, []string{"Rebalance(leaving=)"}, l.inflightOps())
	require.NoError(t, r.Settle(ctx, nodes))
	assert.Len(t, l.overlapping(), 1, "a call while the Rebalance is held overlaps it")
	release()
	require.NoError(t, <-first)
	<-hooked
	_, err := r.Rebalance(ctx, nodes, nil)
	require.NoError(t, err)
	assert.Equal(t, 1, ran, "a hook runs once")

	proc.kill()
	assert.ErrorIs(t, r.Settle(ctx, nodes), model.ErrUnreachable)
	_, err = r.Observe(ctx, nodes)
	assert.ErrorIs(t, err, model.ErrUnreachable)
	assert.Len(t, l.writes(), 3, "a dead process sends nothing")
}
