//go:build integration

package integration

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gomomento/valkey-operator/integration/harness"
	"github.com/gomomento/valkey-operator/internal/loadgen"
	"github.com/gomomento/valkey-operator/valkeyops"
	"github.com/gomomento/valkey-operator/valkeyops/model"
)

// Remove a replica (the shard's failover is then refused with ErrNoInSyncReplica), add a new
// replica, and fail the shard over gracefully to it: roles swap, no key is lost.
func TestReplicaAddRemoveAndGracefulFailover(t *testing.T) {
	for _, img := range []struct{ name, image string }{{"valkey8", harness.Image()}, {"valkey9", harness.Image9()}} {
		t.Run(img.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, harness.Config{Image: img.image}, 3, 2, valkeyops.Options{})
			ctx := ctxT(t, 3*time.Minute)
			require.NoError(t, f.admin.Bootstrap(ctx, f.nodes, 3))
			snap := waitHealthy(t, f, f.nodes, 3, 1, 30*time.Second)
			c := dataClient(t, f.nodes)
			fill(t, c, "f:", 20_000)
			snap, err := f.admin.Observe(ctx, f.nodes)
			require.NoError(t, err)
			var keys int64
			for _, p := range snap.Primaries() {
				keys += p.Keys
			}
			assert.Equal(t, int64(20_000), keys, "Observe reads each primary's key count (INFO keyspace)")

			var primary, replica *model.NodeState
			for _, p := range snap.Primaries() {
				if p.Shard == 0 {
					primary = p
				}
			}
			require.NotNil(t, primary)
			replica = snap.ReplicasOf(primary.ID)[0]

			// Remove the replica: Health wants 1 replica per shard, so it reports shard 0.
			require.NoError(t, f.admin.RemoveNode(ctx, f.nodes, replica.Name))
			remaining := without(f.nodes, replica.Name)
			// Until its pod goes the removed node still tells clients where every slot is
			// (a reset one would say no node serves any), and no other node lists it.
			snap, err = f.admin.Observe(ctx, f.nodes)
			require.NoError(t, err)
			assert.Equal(t, model.SlotCount, snap.ByName(replica.Name).SlotsAssigned, "the removed node still knows every slot's owner")
			for _, n := range remaining {
				assert.Nil(t, snap.ByName(n.Name).Peer(replica.ID), "%s forgot the removed node", n.Name)
			}
			require.NoError(t, f.env.Kill(ctx, replica.Name)) // as the operator deletes its pod
			waitHealthy(t, f, remaining, 3, 0, 30*time.Second)
			snap, err = f.admin.Observe(ctx, remaining)
			require.NoError(t, err)
			assert.Contains(t, model.Health(snap, 3, 1), "primary "+primary.Name+" has 0 of 1 linked replicas")

			err = f.admin.Failover(ctx, remaining, primary.Name)
			var opErr *model.OpError
			require.ErrorAs(t, err, &opErr)
			assert.ErrorIs(t, err, model.ErrNoInSyncReplica)
			assert.Equal(t, primary.Name, opErr.Node)

			// Add a new replica to shard 0.
			added, err := f.env.StartNode(ctx, 0)
			require.NoError(t, err)
			nodes := append(remaining, added)
			require.NoError(t, f.admin.Replicate(ctx, nodes, added.Name, 0))
			snap = waitHealthy(t, f, nodes, 3, 1, 30*time.Second)
			assert.Equal(t, primary.ID, snap.ByName(added.Name).PrimaryID)

			// Graceful failover to it while a writer runs.
			w := loadgen.Start(c, loadgen.Options{Prefix: "w:", Timeout: 5 * time.Second})
			require.Eventually(t, func() bool { return w.Acked() > 100 }, 30*time.Second, 10*time.Millisecond, "writer running")
			require.NoError(t, f.admin.Failover(ctx, nodes, primary.Name))
			res := w.Stop()
			acked := res.Acked
			snap = waitHealthy(t, f, nodes, 3, 1, 30*time.Second)
			assert.Equal(t, model.RolePrimary, snap.ByName(added.Name).Role)
			assert.Equal(t, model.RoleReplica, snap.ByName(primary.Name).Role)
			assert.Equal(t, snap.ByName(added.Name).ID, snap.ByName(primary.Name).PrimaryID)
			assert.Equal(t, model.EvenRanges(3)[0], snap.ByName(added.Name).Slots[0])

			verify(t, c, "f:", seq(20_000))
			verify(t, c, "w:", acked)
		})
	}
}

// SIGKILL a primary: its replica takes over, Observe reports the dead node unreachable and
// flagged failed by the others, and after Forget plus a new replica the cluster is healthy.
func TestKillPrimaryRecovers(t *testing.T) {
	t.Parallel()
	for _, image := range []string{harness.Image(), harness.Image9()} {
		t.Run(image, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, harness.Config{Image: image}, 3, 2, valkeyops.Options{})
			ctx := ctxT(t, 3*time.Minute)
			require.NoError(t, f.admin.Bootstrap(ctx, f.nodes, 3))
			snap := waitHealthy(t, f, f.nodes, 3, 1, 30*time.Second)
			c := dataClient(t, f.nodes)
			fill(t, c, "d:", 20_000)

			victim, heir := caughtUpPrimary(ctx, t, f, snap, 1)

			require.NoError(t, f.env.Kill(ctx, victim.Name))
			require.Eventually(t, func() bool {
				s, err := f.admin.Observe(ctx, f.nodes)
				require.NoError(t, err)
				dead := s.ByName(victim.Name)
				h := s.ByName(heir.Name)
				if dead.Reachable || h.Role != model.RolePrimary || len(h.Slots) == 0 {
					return false
				}
				for _, st := range s.Nodes {
					if !st.Reachable {
						continue
					}
					if !st.ClusterOK() {
						return false
					}
					if p := st.Peer(victim.ID); p == nil || !p.Failed() {
						return false
					}
				}
				return true
			}, 60*time.Second, 100*time.Millisecond, "replica takes over and every node flags the dead primary")

			snap, err := f.admin.Observe(ctx, f.nodes)
			require.NoError(t, err)
			require.Len(t, snap.Nodes, len(f.nodes), "unreachable nodes stay in the snapshot")
			assert.False(t, snap.ByName(victim.Name).Reachable)
			assert.Error(t, snap.ByName(victim.Name).Err)

			alive := without(f.nodes, victim.Name)
			require.NoError(t, f.admin.Forget(ctx, alive, []string{victim.ID}))
			added, err := f.env.StartNode(ctx, 1)
			require.NoError(t, err)
			nodes := append(alive, added)
			require.NoError(t, f.admin.Replicate(ctx, nodes, added.Name, 1))
			snap = waitHealthy(t, f, nodes, 3, 1, 30*time.Second)
			assert.Equal(t, snap.ByName(heir.Name).ID, snap.ByName(added.Name).PrimaryID)
			for _, st := range snap.Nodes {
				assert.Nil(t, st.Peer(victim.ID), "%s forgot the dead node", st.Name)
			}
			verify(t, c, "d:", seq(20_000))
		})
	}
}

// caughtUpPrimary is shard's primary and its replica, once the replica has every write the
// primary took (replication is asynchronous: a primary is lost only after that).
func caughtUpPrimary(ctx context.Context, t *testing.T, f *fixture, snap *model.Snapshot, shard int) (victim, heir *model.NodeState) {
	t.Helper()
	for _, p := range snap.Primaries() {
		if p.Shard == shard {
			victim = p
		}
	}
	require.NotNil(t, victim)
	heir = snap.ReplicasOf(victim.ID)[0]
	require.Eventually(t, func() bool {
		s, err := f.admin.Observe(ctx, f.nodes)
		return err == nil && s.ByName(heir.Name).ReplOffset == s.ByName(victim.Name).ReplOffset
	}, 30*time.Second, 50*time.Millisecond)
	return victim, heir
}

// SIGKILL a primary and, at once, CLUSTER FAILOVER FORCE its replica (what the operator does
// when the kubelet reports the primary's container exited): the surviving primaries vote
// without waiting for a node timeout, the replica serves the dead primary's slots with every
// key, and the cluster is ok again.
func TestForceFailoverAfterPrimaryExit(t *testing.T) {
	t.Parallel()
	for _, image := range []string{harness.Image(), harness.Image9()} {
		t.Run(image, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, harness.Config{Image: image}, 3, 2, valkeyops.Options{})
			ctx := ctxT(t, 3*time.Minute)
			require.NoError(t, f.admin.Bootstrap(ctx, f.nodes, 3))
			snap := waitHealthy(t, f, f.nodes, 3, 1, 30*time.Second)
			c := dataClient(t, f.nodes)
			fill(t, c, "x:", 20_000)

			victim, heir := caughtUpPrimary(ctx, t, f, snap, 2)

			require.NoError(t, f.env.Kill(ctx, victim.Name))
			killed := time.Now()
			alive := without(f.nodes, victim.Name)
			require.NoError(t, f.admin.ForceFailover(ctx, alive, heir.Name))
			t.Logf("replica promoted %s after the kill (cluster-node-timeout is 3 s)", time.Since(killed).Round(time.Millisecond))
			require.Eventually(t, func() bool {
				s, err := f.admin.Observe(ctx, alive)
				if err != nil {
					return false
				}
				for _, st := range s.Nodes {
					if !st.Reachable || !st.ClusterOK() {
						return false
					}
				}
				h := s.ByName(heir.Name)
				return h.Role == model.RolePrimary && model.FormatRanges(h.Slots) == model.FormatRanges(victim.Slots)
			}, 30*time.Second, 100*time.Millisecond, "the replica serves the dead primary's slots and the cluster is ok")
			verify(t, c, "x:", seq(20_000))
		})
	}
}

// A roll of one shard, as the operator runs it, round after round with a writer running: a
// new replica joins, the old replica leaves, and the primary fails over to the new replica
// as soon as the planner would allow (every server knows it as the primary's replica). The
// old primary must become the new one's replica every time. On Valkey 8.0 a failover a
// moment too early left it an empty primary instead (it had not yet counted the replica in
// its own shard), which Failover now waits out.
func TestFailoverToJustJoinedReplica(t *testing.T) {
	t.Parallel()
	for _, image := range []string{harness.Image(), harness.Image9()} {
		t.Run(image, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, harness.Config{Image: image, Args: []string{"--cluster-allow-replica-migration", "no"}}, 2, 2, valkeyops.Options{})
			ctx := ctxT(t, 5*time.Minute)
			require.NoError(t, f.admin.Bootstrap(ctx, f.nodes, 2))
			waitHealthy(t, f, f.nodes, 2, 1, 30*time.Second)
			c := dataClient(t, f.nodes)
			w := loadgen.Start(c, loadgen.Options{Prefix: "w:", Timeout: 5 * time.Second})
			nodes := f.nodes
			for round := 0; round < 5; round++ {
				snap, err := f.admin.Observe(ctx, nodes)
				require.NoError(t, err)
				var primary *model.NodeState
				for _, p := range snap.Primaries() {
					if p.Shard == 0 {
						primary = p
					}
				}
				require.NotNil(t, primary)
				old := snap.ReplicasOf(primary.ID)
				added, err := f.env.StartNode(ctx, 0)
				require.NoError(t, err)
				nodes = append(nodes, added)
				require.NoError(t, f.admin.Replicate(ctx, nodes, added.Name, 0))
				for _, r := range old {
					require.NoError(t, f.admin.RemoveNode(ctx, nodes, r.Name))
					require.NoError(t, f.env.Kill(ctx, r.Name))
					nodes = without(nodes, r.Name)
				}
				require.Eventually(t, func() bool {
					s, err := f.admin.Observe(ctx, nodes)
					return err == nil && model.BestReplica(s, primary.ID) != nil
				}, 30*time.Second, 20*time.Millisecond, "round %d: %s electable", round, added.Name)

				require.NoError(t, f.admin.Failover(ctx, nodes, primary.Name), "round %d", round)
				snap, err = f.admin.Observe(ctx, nodes)
				require.NoError(t, err)
				heir, was := snap.ByName(added.Name), snap.ByName(primary.Name)
				assert.Equal(t, model.RolePrimary, heir.Role, "round %d", round)
				assert.Equal(t, primary.Slots, heir.Slots, "round %d: the new replica took every slot", round)
				assert.Equal(t, model.RoleReplica, was.Role, "round %d: the old primary follows it", round)
				assert.Equal(t, heir.ID, was.PrimaryID, "round %d", round)
			}
			acked := w.Stop().Acked
			waitHealthy(t, f, nodes, 2, 1, 30*time.Second)
			verify(t, c, "w:", acked)
		})
	}
}

// A rebalance interrupted while slots are open (importing/migrating, keys half moved) is
// completed by the next run: no slot left open, no key lost. Valkey 8.0 only: there the
// operator moves the keys itself (MIGRATE) and a crash can leave slots open; on 9.x the
// servers run an atomic slot migration, which goes on without the operator, and a new
// operator waits for it to end (waitAtomicIdle) before moving anything.
func TestRebalanceResumesAfterInterruption(t *testing.T) {
	t.Parallel()
	f := newFixture(t, harness.Config{Image: harness.Image()}, 3, 1, valkeyops.Options{})
	ctx := ctxT(t, 3*time.Minute)
	require.NoError(t, f.admin.Bootstrap(ctx, f.nodes, 3))
	waitHealthy(t, f, f.nodes, 3, 0, 30*time.Second)
	c := dataClient(t, f.nodes)
	fill(t, c, "r:", 100_000)
	added, err := f.env.StartNode(ctx, 3)
	require.NoError(t, err)
	all := append(append([]model.Node(nil), f.nodes...), added)
	require.NoError(t, f.admin.Bootstrap(ctx, all, 4))

	// A second admin whose context is cancelled the moment the first slots are opened: the
	// "crash" lands between SETSLOT IMPORTING/MIGRATING and the end of the key moves.
	crashCtx, crash := context.WithCancel(ctx)
	crashing, err := valkeyops.NewAdmin(valkeyops.Options{
		Credentials: valkeyops.Credentials{Username: model.OperatorUser, Password: operatorPassword},
		Log: func(format string, args ...any) {
			if len(format) >= 6 && format[:6] == "opened" {
				crash()
			}
		},
	})
	require.NoError(t, err)
	defer crashing.Close()
	_, err = crashing.Rebalance(crashCtx, all, nil)
	require.Error(t, err)

	snap, err := f.admin.Observe(ctx, all)
	require.NoError(t, err)
	open := 0
	for _, p := range snap.Primaries() {
		open += len(p.Self().Importing) + len(p.Self().Migrating)
	}
	require.Positive(t, open, "the interrupted run left slots open")

	_, err = f.admin.Rebalance(ctx, all, nil)
	require.NoError(t, err)
	snap = waitHealthy(t, f, all, 4, 0, 30*time.Second)
	for _, p := range snap.Primaries() {
		assert.InDelta(t, model.SlotCount/4, model.CountSlots(p.Slots), 1)
	}
	verify(t, c, "r:", seq(100_000))
}

func without(nodes []model.Node, name string) []model.Node {
	var out []model.Node
	for _, n := range nodes {
		if n.Name != name {
			out = append(out, n)
		}
	}
	return out
}

// TestReplicateReturnsWhileSyncing: Replicate returns once the new replica's initial sync is
// under way, not when it ends (a sync of minutes must not hold the caller), and the replica
// then completes it by itself: link up, every key there.
func TestReplicateReturnsWhileSyncing(t *testing.T) {
	f := newFixture(t, harness.Config{}, 3, 1, valkeyops.Options{})
	ctx := ctxT(t, 3*time.Minute)
	require.NoError(t, f.admin.Bootstrap(ctx, f.nodes, 3))
	snap := waitHealthy(t, f, f.nodes, 3, 0, 30*time.Second)
	fill(t, dataClient(t, f.nodes), "s:", 9_000)
	var primary *model.NodeState
	for _, p := range snap.Primaries() {
		if p.Shard == 0 {
			primary = p
		}
	}
	require.NotNil(t, primary)
	snap, err := f.admin.Observe(ctx, f.nodes)
	require.NoError(t, err)
	keys := snap.ByName(primary.Name).Keys
	require.Greater(t, keys, int64(2_000))
	// The primary's sync child now spends 2 ms on each key: about 6 s for its ~3,000.
	require.NoError(t, operatorDo(t, primary.Node, operatorPassword, "CONFIG", "SET", "rdb-key-save-delay", "2000").Error())

	added, err := f.env.StartNode(ctx, 0)
	require.NoError(t, err)
	nodes := append(f.nodes, added)
	start := time.Now()
	require.NoError(t, f.admin.Replicate(ctx, nodes, added.Name, 0))
	returned := time.Since(start)
	snap, err = f.admin.Observe(ctx, nodes)
	require.NoError(t, err)
	st := snap.ByName(added.Name)
	assert.Equal(t, model.RoleReplica, st.Role)
	assert.Equal(t, primary.ID, st.PrimaryID)
	assert.True(t, st.SyncInProgress, "Replicate returned (after %s) with the sync still under way", returned)
	assert.False(t, st.LinkedToPrimary(), "the link is up only once the sync is done")

	require.NoError(t, operatorDo(t, primary.Node, operatorPassword, "CONFIG", "SET", "rdb-key-save-delay", "0").Error())
	snap = waitHealthy(t, f, nodes, 3, 0, time.Minute)
	require.Eventually(t, func() bool {
		s, err := f.admin.Observe(ctx, nodes)
		return err == nil && s.ByName(added.Name).LinkedToPrimary() && !s.ByName(added.Name).SyncInProgress && s.ByName(added.Name).Keys == keys
	}, time.Minute, 50*time.Millisecond, "the replica finishes its sync by itself with all %d keys", keys)
}
