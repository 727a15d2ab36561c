//go:build envtest

package reconciler_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomomento/valkey-operator/internal/poll"
	"github.com/gomomento/valkey-operator/reconciler/plan"
	"github.com/gomomento/valkey-operator/reconciler/render"
	"github.com/gomomento/valkey-operator/reconciler/views"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The Active phase driven through topology changes: the real manager on a real
// kube-apiserver, Valkey played by the day-2 fakes of the topology ports (fakes_day2_test.go,
// their outcomes and refusals; valkeyops' commands are tested on real servers in
// integration/), pods by a small kubelet that also stands in for the garbage collector.
//
// These tests run a control plane of their own rather than the suite's: the suite's manager
// reconciles every namespace, so a second manager there would race it for the same clusters,
// and resuming after a restart needs a manager the test can stop. Every write the operator
// makes goes through a recording transport, so a test sees the API writes and the Valkey
// writes of a cluster as one ordered timeline.

// Intervals of the tests' managers: short, so that a whole scale takes a second or two.
const (
	day2PollInterval = 100 * time.Millisecond
	day2ActivePeriod = 250 * time.Millisecond
	day2Wait         = 30 * time.Second
	// day2IdlePasses is how many reconcile passes an idle window must contain.
	day2IdlePasses = 8
)

func TestActivePhase(t *testing.T) {
	t.Parallel()
	e := startDay2Env(t)
	t.Run("one manager", func(t *testing.T) {
		e.startManager(t) // stopped once every subtest below is done
		t.Run("shards 2-3-2", func(t *testing.T) { t.Parallel(); testScaleShards(t, e) })
		t.Run("replicas 1-2-1", func(t *testing.T) { t.Parallel(); testScaleReplicas(t, e) })
		t.Run("lost primary pod", func(t *testing.T) { t.Parallel(); testLostPrimary(t, e) })
		t.Run("a long move blocks no other cluster", func(t *testing.T) { t.Parallel(); testLongMove(t, e) })
		t.Run("rolling replacement", func(t *testing.T) { t.Parallel(); testRollingReplacement(t, e) })
	})
	// Every manager reconciles every namespace: tests that stop their manager, or slow its
	// cache down, run one at a time.
	t.Run("own manager", func(t *testing.T) {
		t.Run("scale-in seen late by the cache", func(t *testing.T) { testScaleInLaggingCache(t, e) })
		t.Run("resume: new nodes without pods", func(t *testing.T) { testResumeNodesWithoutPods(t, e) })
		t.Run("resume: slots left migrating", func(t *testing.T) { testResumeOpenSlots(t, e) })
		t.Run("resume: roll after a primary's failover", func(t *testing.T) { testResumeRoll(t, e) })
	})
}

// testScaleShards: 2→3 and 3→2 shards happen one action at a time (CreateNodes, Join,
// Rebalance, MarkActive; then Rebalance draining the departing primary, MarkLeaving, Remove
// and Delete of each departing node), no action twice, while the cluster reports Active
// with no targetSpec at every change the API server shows; the slots end balanced (the keys
// going with them is integration's TestScaleOutAndIn); between the two, a converged cluster
// makes no write at all.
func testScaleShards(t *testing.T, e *day2Env) {
	key := e.createCluster(t, "scale", 2, 1)
	e.waitConverged(t, key, 2, 1)
	m := e.valkey.model(key)
	ops := e.valkey.log(key)
	states := e.watchState(t, key)

	since := time.Now()
	e.editCluster(t, key, func(c views.Cluster) { c.SetShards(3) })
	e.waitConverged(t, key, 3, 1)
	out := e.timeline(key, since)
	assertTimeline(t, out)
	assert.Equal(t, kinds(plan.CreateNodes, plan.Join, plan.Rebalance, plan.MarkActive), actionsOf(out), describeSteps(out))
	assert.Len(t, e.nodeCreates(key.Namespace, since), 2, "exactly the new shard's two ValkeyNodes are created")
	assert.Equal(t, []string{"leaving="}, opArgs(out, plan.Rebalance), "scale-out balances without draining anyone")
	// The joined nodes are put at their configured settings before they turn Active: a join
	// the operator did not see through ends there too.
	var joined []string
	for _, n := range e.nodes(t, key) {
		if n.Shard() == 2 {
			joined = append(joined, n.Name())
		}
	}
	writes := ops.since(since)
	require.NotEmpty(t, writes)
	if last := writes[len(writes)-1]; assert.Equal(t, settleStep, last.Op, "the scale-out's last Valkey write") {
		assert.NoError(t, last.Err)
		assert.ElementsMatch(t, joined, strings.Split(last.Args, ","), "the new shard's nodes are settled")
	}

	assert.Equal(t, []string{"scale-shard-0", "scale-shard-1", "scale-shard-2"}, e.budgetNames(t, key), "a budget per shard, the new one too")
	assert.ElementsMatch(t, joined, opArgs(out, recordInSyncKind), "the new shard's pods are marked in sync once, when they are")

	t.Run("converged makes no writes", func(t *testing.T) { e.assertIdle(t, key) })

	var departing []string
	drained := ""
	for _, n := range e.nodes(t, key) {
		if n.Shard() == 2 {
			departing = append(departing, n.Name())
			if st, _ := m.inspect(n.Name()); st.Slots > 0 {
				drained = n.Name()
			}
		}
	}
	require.Len(t, departing, 2)
	require.NotEmpty(t, drained, "shard 2 has a slot-holding primary")
	ids := map[string]string{}
	for _, n := range departing {
		st, _ := m.inspect(n)
		ids[n] = st.ID
	}

	since = time.Now()
	e.editCluster(t, key, func(c views.Cluster) { c.SetShards(2) })
	e.waitConverged(t, key, 2, 1)
	out = e.timeline(key, since)
	assertTimeline(t, out)
	acts := actionsOf(out)
	require.GreaterOrEqual(t, len(acts), 3, describeSteps(out))
	assert.Equal(t, kinds(plan.Rebalance, plan.MarkLeaving), acts[:2], "drain first, then mark the departing nodes: %s", describeSteps(out))
	assert.Subset(t, kinds(plan.Remove, plan.Delete), acts[2:], describeSteps(out))
	assert.Subset(t, acts[2:], kinds(plan.Remove, plan.Delete), describeSteps(out))
	assert.Equal(t, []string{"leaving=" + drained}, opArgs(out, plan.Rebalance), "only the departing primary is drained")
	for _, w := range ops.since(since) {
		if w.Op == string(plan.Remove) {
			assert.NoError(t, w.Err, "Remove(%s) was refused", w.Args)
		}
	}
	for _, n := range departing {
		removed, deleted := firstOK(out, plan.Remove, n), firstOK(out, plan.Delete, n)
		require.GreaterOrEqual(t, removed, 0, "%s removed from the cluster: %s", n, describeSteps(out))
		require.GreaterOrEqual(t, deleted, 0, "%s deleted: %s", n, describeSteps(out))
		assert.Less(t, removed, deleted, "%s leaves the cluster before its ValkeyNode goes", n)
		assert.Empty(t, m.knownBy(ids[n]), "no server remembers %s", n)
	}
	for _, n := range departing {
		if n != drained {
			assert.Less(t, firstOK(out, plan.Remove, n), firstOK(out, plan.Remove, drained), "the replica leaves before the primary it follows")
		}
	}
	assert.Empty(t, ops.overlapping())
	assert.True(t, pollUntil(waitFor, func() bool { return slices.Equal([]string{"scale-shard-0", "scale-shard-1"}, e.budgetNames(t, key)) }),
		"the departed shard's budget is gone with it: %v", e.budgetNames(t, key))
	states.assertActive(t)
}

// recordInSyncKind is recordInSync as a plan.Kind, for opArgs.
const recordInSyncKind = plan.Kind(recordInSync)

// budgetNames lists the cluster's PodDisruptionBudgets by name, sorted.
func (e *day2Env) budgetNames(t *testing.T, key types.NamespacedName) []string {
	t.Helper()
	l := &policyv1.PodDisruptionBudgetList{}
	require.NoError(t, e.c.List(context.Background(), l, client.InNamespace(key.Namespace), client.MatchingLabels{render.LabelCluster: key.Name}))
	var out []string
	for _, b := range l.Items {
		out = append(out, b.Name)
	}
	sort.Strings(out)
	return out
}

// testScaleReplicas: 1→2→1 replicas per shard. The new replicas are created, attached and
// activated one action at a time; on the way down only replicas leave, although each shard's
// primary is by then the node a choice by name alone would take (a failover made it primary).
func testScaleReplicas(t *testing.T, e *day2Env) {
	key := e.createCluster(t, "replicas", 2, 1)
	e.waitConverged(t, key, 2, 1)
	m := e.valkey.model(key)
	ops := e.valkey.log(key)
	states := e.watchState(t, key)

	since := time.Now()
	e.editCluster(t, key, func(c views.Cluster) { c.SetReplicasPerShard(2) })
	e.waitConverged(t, key, 2, 2)
	out := e.timeline(key, since)
	assertTimeline(t, out)
	assert.Equal(t, kinds(plan.CreateNodes, plan.Replicate, plan.MarkActive), actionsOf(out), describeSteps(out))
	assert.Len(t, e.nodeCreates(key.Namespace, since), 2)

	// Someone fails each shard over to its first node by name.
	byShard := map[int][]string{}
	for _, n := range e.nodes(t, key) {
		byShard[n.Shard()] = append(byShard[n.Shard()], n.Name())
	}
	for _, names := range byShard {
		sort.Strings(names)
		if st, _ := m.inspect(names[0]); st.Role == "replica" {
			require.NoError(t, m.manualFailover(names[0]))
		}
	}
	e.waitConverged(t, key, 2, 2)
	primaries := map[string]int{}
	for _, names := range byShard {
		st, _ := m.inspect(names[0])
		require.Equal(t, "primary", st.Role)
		primaries[names[0]] = st.Slots
	}

	since = time.Now()
	e.editCluster(t, key, func(c views.Cluster) { c.SetReplicasPerShard(1) })
	e.waitConverged(t, key, 2, 1)
	out = e.timeline(key, since)
	assertTimeline(t, out)
	acts := actionsOf(out)
	require.NotEmpty(t, acts)
	assert.Equal(t, string(plan.MarkLeaving), acts[0], describeSteps(out))
	assert.Subset(t, kinds(plan.MarkLeaving, plan.Remove, plan.Delete), acts, "only replicas leave: no failover, no slot moves: %s", describeSteps(out))
	for _, s := range out {
		if s.OK && (s.Kind == string(plan.MarkLeaving) || s.Kind == string(plan.Remove) || s.Kind == string(plan.Delete)) {
			_, isPrimary := primaries[strings.Fields(s.Target)[0]]
			assert.False(t, isPrimary, "%s %s: a primary never leaves", s.Kind, s.Target)
		}
	}
	for _, w := range ops.writes() {
		if w.Op == string(plan.Remove) && !w.Start.Before(since) {
			assert.Equal(t, "replica", w.TargetRole, "Remove(%s) names a replica", w.Args)
			assert.NoError(t, w.Err)
		}
	}
	for name, slots := range primaries {
		st, _ := m.inspect(name)
		assert.Equal(t, "primary", st.Role, name)
		assert.Equal(t, slots, st.Slots, "%s keeps its slots", name)
	}
	assert.Empty(t, ops.overlapping())
	states.assertActive(t)
}

// testLostPrimary: a primary's pod is deleted (its server dies with it). The operator marks
// it Leaving and creates its replacement, then waits: a majority of primaries survives, so
// Valkey's own failover must promote its replica, and the operator neither takes over nor
// forgets the dead ID while that ID still owns slots, not even once its peers flag it
// failed. After Valkey's own failover the dead ID is forgotten everywhere, the dead node
// deleted, and the replacement replicates the promoted primary.
func testLostPrimary(t *testing.T, e *day2Env) {
	key := e.createCluster(t, "lost", 3, 1)
	e.waitConverged(t, key, 3, 1)
	m := e.valkey.model(key)
	ops := e.valkey.log(key)
	var lost, replica string
	for _, n := range e.nodes(t, key) {
		if st, _ := m.inspect(n.Name()); n.Shard() == 0 && st.Role == "primary" {
			lost = n.Name()
		}
	}
	require.NotEmpty(t, lost)
	dead, _ := m.inspect(lost)
	for _, n := range e.nodes(t, key) {
		if st, _ := m.inspect(n.Name()); st.Primary == lost {
			replica = n.Name()
		}
	}
	require.NotEmpty(t, replica)
	states := e.watchState(t, key)

	since := time.Now()
	m.stop(lost)
	require.NoError(t, e.c.Delete(context.Background(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: lost}}))

	var replacement string
	waitUntil(t, "the lost node Leaving and its replacement running", func() (bool, string) {
		replacement = ""
		leaving := false
		for _, n := range e.nodes(t, key) {
			st, _ := m.inspect(n.Name())
			switch {
			case n.Name() == lost:
				leaving = n.Status().Lifecycle == views.LifecycleLeaving
			case n.Shard() == 0 && n.Name() != replica && st.Alive:
				replacement = n.Name()
			}
		}
		return leaving && replacement != "", fmt.Sprintf("leaving=%v replacement=%q", leaving, replacement)
	})
	e.waitPasses(t, key, 4)
	assert.Empty(t, opList(ops.since(since)), "nothing is done to Valkey while the lost primary's slots wait for a failover")
	require.NoError(t, m.nodeTimeout(lost))
	e.waitPasses(t, key, 4)
	assert.Empty(t, opList(ops.since(since)), "flagged failed, and still no takeover: the surviving majority elects a replica")

	failedOver := time.Now()
	promoted, err := m.valkeyFailover(lost)
	require.NoError(t, err)
	require.Equal(t, replica, promoted)
	e.waitConverged(t, key, 3, 1)

	out := e.timeline(key, since)
	assertTimeline(t, out)
	assert.Equal(t, kinds(plan.MarkLeaving, plan.CreateNodes, plan.Forget, plan.Delete, plan.Replicate, plan.MarkActive), actionsOf(out), describeSteps(out))
	assert.Equal(t, []string{dead.ID}, opArgs(out, plan.Forget), "only the dead ID is forgotten")
	assert.Equal(t, []string{replacement + " shard=0"}, opArgs(out, plan.Replicate))
	for _, w := range ops.since(since) {
		assert.NotEqual(t, string(plan.Takeover), w.Op, "no takeover while a majority can elect")
		assert.False(t, w.Start.Before(failedOver), "%s(%s) before Valkey's own failover", w.Op, w.Args)
	}
	assert.Empty(t, m.knownBy(dead.ID), "the dead ID is forgotten on every server")
	st, _ := m.inspect(replacement)
	assert.Equal(t, replica, st.Primary, "the replacement replicates the promoted primary")
	assert.True(t, st.Linked)
	for _, n := range e.nodes(t, key) {
		assert.NotEqual(t, lost, n.Name(), "the lost node's ValkeyNode is deleted")
	}
	assert.Empty(t, ops.overlapping())
	states.assertActive(t)
}

// testScaleInLaggingCache: 3→2 shards while the operator's cache is slow: of the two
// lifecycle writes of MarkLeaving, the departing replica's reaches the cache a second after
// the departing primary's, as a loaded informer can deliver them. The replica must still
// leave before the primary it follows, and no removal may be refused (a replica refuses to
// FORGET its own primary).
func testScaleInLaggingCache(t *testing.T, e *day2Env) {
	key := e.createCluster(t, "lagging", 3, 1)
	var replica atomic.Value
	replica.Store("")
	lagged := e.api.lagWatch("valkeynodes", time.Second, func(typ watch.EventType, u *unstructured.Unstructured) bool {
		return typ == watch.Modified && u.GetName() == replica.Load() && views.Node{U: u}.Status().Lifecycle == views.LifecycleLeaving
	})
	e.startManager(t) // its ValkeyNode watch goes through the lag
	e.waitConverged(t, key, 3, 1)
	m := e.valkey.model(key)
	ops := e.valkey.log(key)
	var primary string
	for _, n := range e.nodes(t, key) {
		if st, _ := m.inspect(n.Name()); n.Shard() == 2 && st.Slots > 0 {
			primary = n.Name()
		} else if n.Shard() == 2 {
			replica.Store(n.Name())
		}
	}
	require.NotEmpty(t, primary)
	require.Less(t, primary, replica.Load(), "a new shard's primary is its first node by name, so MarkLeaving writes it first")

	since := time.Now()
	e.editCluster(t, key, func(c views.Cluster) { c.SetShards(2) })
	select {
	case <-lagged:
	case <-time.After(day2Wait):
		t.Fatal("the departing replica was never marked Leaving")
	}
	e.waitConverged(t, key, 2, 1)
	out := e.timeline(key, since)
	assertTimeline(t, out)
	var attempts, refused []string
	for _, w := range ops.since(since) {
		if w.Op == string(plan.Remove) {
			attempts = append(attempts, w.Args)
			if w.Err != nil {
				refused = append(refused, w.String())
			}
		}
	}
	require.NotEmpty(t, attempts)
	assert.Equal(t, replica.Load(), attempts[0], "the replica leaves before the primary it follows: %s", describeSteps(out))
	assert.Empty(t, refused, "no removal refused")
	assert.Empty(t, ops.overlapping())
}

// testResumeNodesWithoutPods: the operator stops right after a scale-out created the new
// ValkeyNodes, before their pods exist. A fresh one creates the pods (never new nodes) and
// finishes: no orphan or duplicate node, no shard doubled, no slot left open.
func testResumeNodesWithoutPods(t *testing.T, e *day2Env) {
	key := e.createCluster(t, "resume-nodes", 2, 1)
	first := e.startManager(t)
	e.waitConverged(t, key, 2, 1)
	states := e.watchState(t, key)

	since := time.Now()
	held := e.api.hold(http.MethodPost, key.Namespace, "pods")
	e.editCluster(t, key, func(c views.Cluster) { c.SetShards(3) })
	select {
	case <-held:
	case <-time.After(day2Wait):
		t.Fatal("the scale-out never created a pod")
	}
	first.stop(t)
	var fresh []string
	for _, n := range e.nodes(t, key) {
		if n.Shard() == 2 {
			fresh = append(fresh, n.Name())
			assert.Equal(t, views.LifecycleJoining, n.Status().Lifecycle)
		}
	}
	require.Len(t, fresh, 2, "the crash came after both new ValkeyNodes were created")
	for _, p := range e.pods(t, key) {
		assert.NotContains(t, fresh, p.Name, "and before any of their pods")
	}

	e.startManager(t)
	e.waitConverged(t, key, 3, 1)
	out := e.timeline(key, since)
	assertTimeline(t, out)
	assert.Equal(t, kinds(plan.CreateNodes, plan.Join, plan.Rebalance, plan.MarkActive), actionsOf(out), describeSteps(out))
	assert.ElementsMatch(t, fresh, e.nodeCreates(key.Namespace, since), "the restarted operator created no node")
	e.assertShape(t, key, 3)
	assert.Empty(t, e.valkey.log(key).overlapping())
	states.assertActive(t)
}

// testResumeOpenSlots: the operator stops in the middle of the scale-out's Rebalance, a chunk
// of slots left MIGRATING on their source and IMPORTING on the new primary. A fresh one
// finishes the move and the scale: every slot closed, balanced (that the keys follow the
// slots is integration's TestRebalanceResumesAfterInterruption, on real servers).
func testResumeOpenSlots(t *testing.T, e *day2Env) {
	key := e.createCluster(t, "resume-slots", 2, 1)
	first := e.startManager(t)
	e.waitConverged(t, key, 2, 1)
	m := e.valkey.model(key)
	ops := e.valkey.log(key)
	states := e.watchState(t, key)

	since := time.Now()
	broken := ops.breakNextRebalance()
	e.editCluster(t, key, func(c views.Cluster) { c.SetShards(3) })
	select {
	case <-broken:
	case <-time.After(day2Wait):
		t.Fatal("the scale-out never moved a slot")
	}
	first.stop(t)
	open := 0
	for _, n := range e.nodes(t, key) {
		st, _ := m.inspect(n.Name())
		open += st.Open
	}
	require.Positive(t, open, "the crash left slots open")

	e.startManager(t)
	e.waitConverged(t, key, 3, 1)
	out := e.timeline(key, since)
	assertTimeline(t, out)
	assert.Equal(t, kinds(plan.CreateNodes, plan.Join, plan.Rebalance, plan.MarkActive), actionsOf(out), describeSteps(out))
	assert.Len(t, e.nodeCreates(key.Namespace, since), 2, "the restarted operator created no node")
	rebalances := 0
	for _, w := range ops.since(since) {
		if w.Op == string(plan.Rebalance) {
			rebalances++
		}
	}
	assert.Equal(t, 2, rebalances, "the interrupted Rebalance and the one that finished it: %s", describeSteps(out))
	e.assertShape(t, key, 3)
	assert.Empty(t, ops.overlapping())
	states.assertActive(t)
}

// testLongMove: cluster A scales out and its Rebalance is held by the recording ports for as long
// as the test wants. Meanwhile A's reconciles keep ending (passes are counted, each one
// waiting for the move without starting anything else) and cluster B, under the same
// manager, scales out from start to finish, its own Rebalance included. Once the move is
// let go, A finishes and converges; each cluster did one action at a time.
func testLongMove(t *testing.T, e *day2Env) {
	a := e.createCluster(t, "move-a", 2, 1)
	b := e.createCluster(t, "move-b", 2, 1)
	e.waitConverged(t, a, 2, 1)
	e.waitConverged(t, b, 2, 1)
	opsA, opsB := e.valkey.log(a), e.valkey.log(b)
	statesA, statesB := e.watchState(t, a), e.watchState(t, b)

	since := time.Now()
	held, release := opsA.holdNextRebalance()
	t.Cleanup(release) // a failed assertion must not leave the move held
	e.editCluster(t, a, func(c views.Cluster) { c.SetShards(3) })
	select {
	case <-held:
	case <-time.After(day2Wait):
		t.Fatal("cluster A never started its Rebalance")
	}
	heldAt := time.Now()

	sinceB := time.Now()
	e.editCluster(t, b, func(c views.Cluster) { c.SetShards(3) })
	e.waitConverged(t, b, 3, 1)
	passes := e.passes.of(a)
	e.waitPasses(t, a, day2IdlePasses)
	require.Equal(t, []string{"Rebalance(leaving=)"}, opsA.inflightOps(), "A's move is still held")
	t.Logf("while A's move was held (%s): B converged, and %d passes of A ended",
		time.Since(heldAt).Round(time.Millisecond), e.passes.of(a)-passes)
	for _, s := range e.timeline(a, heldAt) {
		assert.True(t, bookkeeping(s.Kind), "A made no other topology action while its move ran: %s %s", s.Kind, s.Target)
	}
	outB := e.timeline(b, sinceB)
	assertTimeline(t, outB)
	assert.Equal(t, kinds(plan.CreateNodes, plan.Join, plan.Rebalance, plan.MarkActive), actionsOf(outB), describeSteps(outB))

	release()
	e.waitConverged(t, a, 3, 1)
	outA := e.timeline(a, since)
	assertTimeline(t, outA)
	assert.Equal(t, kinds(plan.CreateNodes, plan.Join, plan.Rebalance, plan.MarkActive), actionsOf(outA), describeSteps(outA))
	var moveA writeOp
	for _, w := range opsA.since(since) {
		if w.Op == string(plan.Rebalance) {
			moveA = w
		}
	}
	require.NotZero(t, moveA.Start, "A's Rebalance ran")
	assert.NoError(t, moveA.Err)
	require.NotEmpty(t, outB)
	assert.True(t, moveA.Start.Before(outB[0].Start) && moveA.End.After(outB[len(outB)-1].End),
		"A's move (%s..%s) spans all of B's scale-out: %s", moveA.Start.Format("15:04:05.000"), moveA.End.Format("15:04:05.000"), describeSteps(outB))
	assert.Empty(t, opsA.overlapping())
	assert.Empty(t, opsB.overlapping())
	statesA.assertActive(t)
	statesB.assertActive(t)
}

// rollSettings is the ValkeyConfig edit the roll tests make: a valkey setting, which every
// node's spec hash covers.
var rollSettings = map[string]string{"maxmemory-policy": "allkeys-lru"}

// rolling is a roll under way: the cluster before its ValkeyConfig was edited.
type rolling struct {
	key     types.NamespacedName
	since   time.Time
	hash    string          // the spec hash every node must end with
	old     map[string]bool // the nodes before the edit
	primary map[int]string  // shard -> its primary before the edit
	replica map[int]string  // shard -> its replica before the edit
	states  *stateLog
}

// beginRoll notes the converged shards × 1 cluster as it is, has the servers check from now
// on that no shard ever has fewer than two synced members, and edits the cluster's
// ValkeyConfig.
func (e *day2Env) beginRoll(t *testing.T, key types.NamespacedName, shards int) *rolling {
	t.Helper()
	m := e.valkey.model(key)
	r := &rolling{key: key, old: map[string]bool{}, primary: map[int]string{}, replica: map[int]string{}}
	var spec views.NodeSpec
	for _, n := range e.nodes(t, key) {
		r.old[n.Name()] = true
		spec = n.Spec()
		st, ok := m.inspect(n.Name())
		require.True(t, ok)
		if st.Role == "primary" {
			r.primary[n.Shard()] = n.Name()
		} else {
			r.replica[n.Shard()] = n.Name()
		}
	}
	require.Len(t, r.primary, shards)
	require.Len(t, r.replica, shards)
	before := spec.SpecHash
	spec.Valkey = rollSettings
	r.hash = render.SpecHash(spec)
	require.NotEqual(t, before, r.hash, "the edit changes the spec hash")
	r.states = e.watchState(t, key)
	m.watchSynced(shards, 2)
	r.since = time.Now()
	e.editConfig(t, e.getCluster(t, key).ConfigRef(), func(c views.Config) { c.SetValkey(rollSettings) })
	return r
}

// finishRoll waits until every node of the shards × 1 cluster carries the new hash and the
// cluster has converged, then checks the whole roll: shard by shard, each replaced node by
// node (surge, attach, activate, then retire a stale replica, and a stale primary only
// after a graceful failover), one action at a time, never a Takeover, never fewer than two
// synced members in a shard, the state Active throughout, every node new.
func (e *day2Env) finishRoll(t *testing.T, r *rolling, shards int) {
	t.Helper()
	key, m := r.key, e.valkey.model(r.key)
	ops := e.valkey.log(key)
	what := fmt.Sprintf("%s rolled to spec hash %s", key, r.hash)
	err := poll.Until(context.Background(), 20*time.Millisecond, day2Wait, what, func(context.Context) (bool, string, error) {
		for _, n := range e.nodes(t, key) {
			if h := n.Spec().SpecHash; h != r.hash {
				return false, n.Name() + " has spec hash " + h, nil
			}
		}
		ok, status := e.converged(t, key, shards, 1)
		return ok, status, nil
	})
	require.NoError(t, err, "servers:%s", e.valkey.describe(key))
	t.Logf("%d shards rolled in %s", shards, time.Since(r.since).Round(time.Millisecond))
	e.waitPasses(t, key, 2)

	out := e.timeline(key, r.since)
	assertTimeline(t, out)
	assert.Empty(t, m.violations(), "every shard kept two synced members throughout")
	for _, w := range ops.since(r.since) {
		// Failover is the graceful one (CLUSTER FAILOVER, as integration/ shows on real
		// servers); a roll never promotes without it.
		assert.NotContains(t, kinds(plan.Takeover, plan.ForceFailover), w.Op, "a graceful failover only: %s", w)
		if w.Op == string(plan.Failover) && w.Err == nil {
			assert.Equal(t, "primary", w.TargetRole, "Failover(%s) names a primary", w.Args)
		}
	}
	var want []string
	for s := 0; s < shards; s++ {
		want = append(want, kinds(plan.CreateNodes, plan.Replicate, plan.MarkActive, plan.MarkLeaving, plan.Remove, plan.Delete,
			plan.CreateNodes, plan.Replicate, plan.MarkActive, plan.Failover, plan.MarkLeaving, plan.Remove, plan.Delete)...)
	}
	got := actionTargets(out)
	require.Equal(t, want, kindsOf(got), describeSteps(out))
	// Who each step names: per shard, the replacements (new names) and its old nodes.
	var wantNames []string
	for s := 0; s < shards; s++ {
		first, second := got[13*s].name, got[13*s+6].name
		assert.False(t, r.old[first] || r.old[second] || first == second, "shard %d: two new nodes, %s and %s", s, first, second)
		stale, primary := r.replica[s], r.primary[s]
		wantNames = append(wantNames, first, first, first, stale, stale, stale, second, second, second, primary, primary, primary, primary)
	}
	assert.Equal(t, wantNames, namesOf(got), describeSteps(out))
	shardOf := map[string]int{}
	for _, n := range e.nodes(t, key) {
		shardOf[n.Name()] = n.Shard()
	}
	for s := 0; s < shards; s++ {
		for _, i := range []int{13 * s, 13*s + 6} {
			sh, ok := shardOf[got[i].name]
			assert.True(t, ok && sh == s, "replacement %s is a node of shard %d (it is in %d)", got[i].name, s, sh)
		}
	}

	assert.Len(t, e.nodeCreates(key.Namespace, r.since), 2*shards, "one replacement per node, none doubled")
	for _, n := range e.nodes(t, key) {
		assert.False(t, r.old[n.Name()], "%s was replaced", n.Name())
		assert.Equal(t, r.hash, n.Spec().SpecHash, n.Name())
		assert.Equal(t, rollSettings, n.Spec().Valkey, n.Name())
	}
	e.assertShape(t, key, shards)
	assert.Empty(t, ops.overlapping())
	r.states.assertActive(t)
}

// testRollingReplacement: a valkey setting edited on a converged 2×1 cluster's ValkeyConfig
// replaces every node, shard 0 then shard 1 (see finishRoll for what is checked).
func testRollingReplacement(t *testing.T, e *day2Env) {
	key := e.createCluster(t, "roll", 2, 1)
	e.waitConverged(t, key, 2, 1)
	r := e.beginRoll(t, key, 2)
	e.finishRoll(t, r, 2)
}

// testResumeRoll: the operator dies right after a roll failed shard 0's stale primary over.
// At that moment shard 0 holds three nodes, the stale one now a replica; a fresh operator
// retires it and rolls shard 1, and the roll as a whole is what an uninterrupted one does:
// no replacement created twice, no shard doubled.
func testResumeRoll(t *testing.T, e *day2Env) {
	key := e.createCluster(t, "resume-roll", 2, 1)
	first := e.startManager(t)
	e.waitConverged(t, key, 2, 1)
	m := e.valkey.model(key)
	ops := e.valkey.log(key)

	killed := ops.afterNext(string(plan.Failover), first.proc.kill)
	r := e.beginRoll(t, key, 2)
	select {
	case <-killed:
	case <-time.After(day2Wait):
		t.Fatal("the roll never failed a primary over")
	}
	first.stop(t)
	st, _ := m.inspect(r.primary[0])
	require.Equal(t, "replica", st.Role, "the stale primary of shard 0 was failed over when the operator died")
	shard0 := 0
	for _, n := range e.nodes(t, key) {
		if n.Shard() == 0 {
			shard0++
			assert.Equal(t, views.LifecycleActive, n.Status().Lifecycle, "%s", n.Name())
		}
	}
	require.Equal(t, 3, shard0, "shard 0 held its stale node and two replacements")

	e.startManager(t)
	e.finishRoll(t, r, 2)
}

// editConfig applies mutate to the live ValkeyConfig, retrying on conflicts.
func (e *day2Env) editConfig(t *testing.T, name string, mutate func(views.Config)) {
	t.Helper()
	waitUntil(t, "editing ValkeyConfig "+name, func() (bool, string) {
		u := views.NewConfigObject()
		require.NoError(t, e.c.Get(context.Background(), types.NamespacedName{Name: name}, u))
		mutate(views.Config{U: u})
		err := e.c.Update(context.Background(), u)
		if err != nil && !apierrors.IsConflict(err) {
			require.NoError(t, err)
		}
		return err == nil, fmt.Sprint(err)
	})
}

// action is one folded action of a timeline and the node it names first.
type action struct{ kind, name string }

// actionTargets is actionsOf with the node each action names: the first word of its first
// write's target (a ValkeyNode or pod name, or the node a Valkey call names).
func actionTargets(steps []day2Step) []action {
	var out []action
	for _, s := range steps {
		if !s.OK || bookkeeping(s.Kind) || s.Kind == settleStep {
			continue
		}
		if len(out) == 0 || out[len(out)-1].kind != s.Kind {
			out = append(out, action{kind: s.Kind, name: strings.Fields(s.Target + " ")[0]})
		}
	}
	return out
}

func kindsOf(as []action) []string {
	out := make([]string, len(as))
	for i, a := range as {
		out[i] = a.kind
	}
	return out
}

func namesOf(as []action) []string {
	out := make([]string, len(as))
	for i, a := range as {
		out[i] = a.name
	}
	return out
}
