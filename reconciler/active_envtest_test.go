//go:build envtest

package reconciler_test

import (
	"bufio"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomomento/valkey-operator/crds"
	"github.com/gomomento/valkey-operator/internal/poll"
	"github.com/gomomento/valkey-operator/reconciler"
	"github.com/gomomento/valkey-operator/reconciler/plan"
	"github.com/gomomento/valkey-operator/reconciler/render"
	"github.com/gomomento/valkey-operator/reconciler/views"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// The Active phase driven through topology changes: the real manager on a real
// kube-apiserver, Valkey played by the scripted model (scripted_test.go), pods by a small
// kubelet that also stands in for the garbage collector.
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
// with no targetSpec at every change the API server shows; the slots end balanced, every
// key on its owner; between the two, a converged cluster makes no write at all.
func testScaleShards(t *testing.T, e *day2Env) {
	key := e.createCluster(t, "scale", 2, 1)
	e.waitConverged(t, key, 2, 1)
	m := e.valkey.model(key)
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
	writes := valkeyWrites(m, since)
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
	for _, w := range valkeyWrites(m, since) {
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
	assert.Empty(t, m.overlapping())
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
	for _, w := range m.writes() {
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
	assert.Empty(t, m.overlapping())
	states.assertActive(t)
}

// testLostPrimary: a primary's pod is deleted (its server dies with it). The operator marks
// it Leaving and creates its replacement, then waits: a majority of primaries survives, so
// Valkey's own failover must promote its replica, and the operator neither takes over nor
// forgets the dead ID while that ID still owns slots, not even once its peers flag it
// failed. After the scripted failover the dead ID is forgotten everywhere, the dead node
// deleted, and the replacement replicates the promoted primary.
func testLostPrimary(t *testing.T, e *day2Env) {
	key := e.createCluster(t, "lost", 3, 1)
	e.waitConverged(t, key, 3, 1)
	m := e.valkey.model(key)
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
	assert.Empty(t, opList(valkeyWrites(m, since)), "nothing is done to Valkey while the lost primary's slots wait for a failover")
	require.NoError(t, m.nodeTimeout(lost))
	e.waitPasses(t, key, 4)
	assert.Empty(t, opList(valkeyWrites(m, since)), "flagged failed, and still no takeover: the surviving majority elects a replica")

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
	for _, w := range valkeyWrites(m, since) {
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
	assert.Empty(t, m.overlapping())
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
	for _, w := range valkeyWrites(m, since) {
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
	assert.Empty(t, m.overlapping())
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
	assert.Empty(t, e.valkey.model(key).overlapping())
	states.assertActive(t)
}

// testResumeOpenSlots: the operator stops in the middle of the scale-out's Rebalance, a chunk
// of slots left MIGRATING on their source and IMPORTING on the new primary. A fresh one
// finishes the move and the scale: every slot closed, balanced, every key on its owner.
func testResumeOpenSlots(t *testing.T, e *day2Env) {
	key := e.createCluster(t, "resume-slots", 2, 1)
	first := e.startManager(t)
	e.waitConverged(t, key, 2, 1)
	m := e.valkey.model(key)
	states := e.watchState(t, key)

	since := time.Now()
	broken := m.breakNextRebalance(512)
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
	for _, w := range valkeyWrites(m, since) {
		if w.Op == string(plan.Rebalance) {
			rebalances++
		}
	}
	assert.Equal(t, 2, rebalances, "the interrupted Rebalance and the one that finished it: %s", describeSteps(out))
	e.assertShape(t, key, 3)
	assert.Empty(t, m.overlapping())
	states.assertActive(t)
}

// testLongMove: cluster A scales out and its Rebalance is held inside the model for as long
// as the test wants. Meanwhile A's reconciles keep ending (passes are counted, each one
// waiting for the move without starting anything else) and cluster B, under the same
// manager, scales out from start to finish, its own Rebalance included. Once the move is
// let go, A finishes and converges; each cluster did one action at a time.
func testLongMove(t *testing.T, e *day2Env) {
	a := e.createCluster(t, "move-a", 2, 1)
	b := e.createCluster(t, "move-b", 2, 1)
	e.waitConverged(t, a, 2, 1)
	e.waitConverged(t, b, 2, 1)
	ma, mb := e.valkey.model(a), e.valkey.model(b)
	statesA, statesB := e.watchState(t, a), e.watchState(t, b)

	since := time.Now()
	held, release := ma.holdNextRebalance()
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
	require.Equal(t, []string{"Rebalance(leaving=)"}, ma.inflightOps(), "A's move is still held")
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
	for _, w := range valkeyWrites(ma, since) {
		if w.Op == string(plan.Rebalance) {
			moveA = w
		}
	}
	require.NotZero(t, moveA.Start, "A's Rebalance ran")
	assert.NoError(t, moveA.Err)
	require.NotEmpty(t, outB)
	assert.True(t, moveA.Start.Before(outB[0].Start) && moveA.End.After(outB[len(outB)-1].End),
		"A's move (%s..%s) spans all of B's scale-out: %s", moveA.Start.Format("15:04:05.000"), moveA.End.Format("15:04:05.000"), describeSteps(outB))
	assert.Empty(t, ma.overlapping())
	assert.Empty(t, mb.overlapping())
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

// beginRoll notes the converged shards × 1 cluster as it is, has the model check from now
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
	require.NoError(t, err, "model:%s", m.describe())
	t.Logf("%d shards rolled in %s", shards, time.Since(r.since).Round(time.Millisecond))
	e.waitPasses(t, key, 2)

	out := e.timeline(key, r.since)
	assertTimeline(t, out)
	assert.Empty(t, m.violations(), "every shard kept two synced members throughout")
	for _, w := range valkeyWrites(m, r.since) {
		assert.NotEqual(t, string(plan.Takeover), w.Op, "no takeover in a roll")
		if w.Op == string(plan.Failover) && w.Err == nil {
			assert.Equal(t, "primary", w.TargetRole, "Failover(%s) names a primary", w.Args)
			for _, c := range w.Cmds {
				assert.Equal(t, "CLUSTER FAILOVER", c.Args, "a graceful failover only")
			}
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
	assert.Empty(t, m.overlapping())
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

	killed := m.afterNext(string(plan.Failover), first.proc.kill)
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

// ---- the private control plane ----------------------------------------------------------

// day2Env is a control plane of the Active-phase tests' own, with the scripted Valkey, the
// recording transport every manager writes through, and a kubelet.
type day2Env struct {
	c      client.WithWatch // the tests' client: its writes are not recorded
	cfg    *rest.Config
	valkey *scriptedValkey
	api    *apiRecorder
	passes *passCounter
	ips    atomic.Int64
}

func startDay2Env(t *testing.T) *day2Env {
	t.Helper()
	defs, err := crds.Definitions()
	require.NoError(t, err)
	env := &envtest.Environment{CRDs: defs, ErrorIfCRDPathMissing: true}
	cfg, err := env.Start()
	require.NoError(t, err, "starting the Active-phase control plane")
	t.Cleanup(func() { _ = env.Stop() })
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: clientgoscheme.Scheme})
	require.NoError(t, err)
	require.NoError(t, c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: operatorNamespace}}))

	e := &day2Env{c: c, cfg: cfg, valkey: newScriptedValkey(5 * time.Millisecond), api: &apiRecorder{}, passes: &passCounter{}}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() { defer close(stopped); e.runKubelet(ctx) }()
	t.Cleanup(func() { cancel(); <-stopped })
	return e
}

// day2Manager is one operator process: the real manager, whose every API request goes
// through the recording transport and every Valkey command through its own scripted
// connections.
type day2Manager struct {
	proc   *scriptedProcess
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	err    error
}

// startManager runs a manager until stop or the end of t.
func (e *day2Env) startManager(t *testing.T) *day2Manager {
	t.Helper()
	valkey, proc := e.valkey.process()
	cfg := rest.CopyConfig(e.cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return e.api.wrap(rt, proc) })
	ctx, cancel := context.WithCancel(context.Background())
	mgr, _, err := reconciler.NewManager(ctx, cfg, reconciler.ManagerConfig{
		Namespace: operatorNamespace, MetricsAddr: "0", ProbeAddr: "0",
		RecheckInterval: time.Second, PollInterval: day2PollInterval, ActivePeriod: day2ActivePeriod,
		Valkey: valkey, Metrics: e.passes, SkipNameValidation: true, GracefulShutdownTimeout: 10 * time.Second,
	})
	if err != nil {
		cancel()
	}
	require.NoError(t, err)
	m := &day2Manager{proc: proc, cancel: cancel, done: make(chan error, 1)}
	go func() { m.done <- mgr.Start(ctx) }()
	t.Cleanup(func() { m.stop(t) })
	return m
}

// stop kills the process, as SIGKILL would: from that moment it sends nothing, to the API
// server or to Valkey, and whatever it had in flight ends where it was (a background task
// included). The manager is then shut down and waited for.
func (m *day2Manager) stop(t *testing.T) {
	t.Helper()
	m.once.Do(func() {
		m.proc.kill()
		m.cancel()
		m.err = <-m.done
	})
	assert.NoError(t, m.err, "manager stopped with an error")
}

// runKubelet plays kubelet and garbage collector for the operator's pods: a new pod runs
// (Running, Ready, a unique IP) with a fresh server in its cluster's model; a pod whose
// ValkeyNode is gone is deleted; a pod that is gone takes its server with it.
func (e *day2Env) runKubelet(ctx context.Context) {
	type podRef struct {
		cluster types.NamespacedName
		name    string
	}
	running := map[types.UID]podRef{}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		// Pods before nodes: a listed pod's node existed before the pod did.
		pods := &corev1.PodList{}
		if err := e.c.List(ctx, pods, client.MatchingLabels{render.LabelManagedBy: render.ManagedBy}); err != nil {
			continue
		}
		nodes := views.NewNodeListObject()
		if err := e.c.List(ctx, nodes); err != nil {
			continue
		}
		owners := map[types.UID]bool{}
		for i := range nodes.Items {
			owners[nodes.Items[i].GetUID()] = true
		}
		present := map[types.UID]bool{}
		for i := range pods.Items {
			pod := &pods.Items[i]
			present[pod.UID] = true
			if ref := metav1.GetControllerOf(pod); ref != nil && !owners[ref.UID] {
				_ = e.c.Delete(ctx, pod)
				continue
			}
			if _, ok := running[pod.UID]; ok || pod.DeletionTimestamp != nil || pod.Status.Phase == corev1.PodRunning {
				continue
			}
			n := e.ips.Add(1)
			ip := fmt.Sprintf("10.%d.%d.%d", 200+n/65536, (n/256)%256, n%256)
			now := metav1.Now()
			pod.Status = corev1.PodStatus{
				Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}, StartTime: &now,
				Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now}},
			}
			if err := e.c.Status().Update(ctx, pod); err != nil {
				continue
			}
			shard, _ := strconv.Atoi(pod.Labels[render.LabelShard])
			ref := podRef{types.NamespacedName{Namespace: pod.Namespace, Name: pod.Labels[render.LabelCluster]}, pod.Name}
			e.valkey.model(ref.cluster).start(pod.Name, ip, shard)
			running[pod.UID] = ref
		}
		for uid, ref := range running {
			if !present[uid] {
				e.valkey.model(ref.cluster).stop(ref.name)
				delete(running, uid)
			}
		}
	}
}

// ---- objects ------------------------------------------------------------------------------

// createCluster creates a namespace, a menu (image and config) and a cluster in it.
func (e *day2Env) createCluster(t *testing.T, name string, shards, replicas int) types.NamespacedName {
	t.Helper()
	ctx := context.Background()
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	ns := name + "-" + hex.EncodeToString(b)
	require.NoError(t, e.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))

	img := views.Image{U: views.NewImageObject()}
	img.U.SetName(ns)
	img.SetRepository("valkey/valkey")
	img.SetTag(scriptedVersion)
	img.SetVersion(scriptedVersion)
	require.NoError(t, e.c.Create(ctx, img.U))
	cfg := views.Config{U: views.NewConfigObject()}
	cfg.U.SetName(ns)
	cfg.SetImageRef(ns)
	cfg.SetResources(views.Resources{CPU: "100m", Memory: "256Mi"})
	require.NoError(t, e.c.Create(ctx, cfg.U))

	c := views.Cluster{U: views.NewClusterObject()}
	c.U.SetName(name)
	c.U.SetNamespace(ns)
	c.SetConfigRef(ns)
	c.SetShards(shards)
	c.SetReplicasPerShard(replicas)
	require.NoError(t, e.c.Create(ctx, c.U))
	return types.NamespacedName{Namespace: ns, Name: name}
}

func (e *day2Env) getCluster(t *testing.T, key types.NamespacedName) views.Cluster {
	t.Helper()
	u := views.NewClusterObject()
	require.NoError(t, e.c.Get(context.Background(), key, u))
	return views.Cluster{U: u}
}

// editCluster applies mutate to the live cluster, retrying on conflicts.
func (e *day2Env) editCluster(t *testing.T, key types.NamespacedName, mutate func(views.Cluster)) {
	t.Helper()
	waitUntil(t, "editing "+key.String(), func() (bool, string) {
		c := e.getCluster(t, key)
		mutate(c)
		err := e.c.Update(context.Background(), c.U)
		if err != nil && !apierrors.IsConflict(err) {
			require.NoError(t, err)
		}
		return err == nil, fmt.Sprint(err)
	})
}

func (e *day2Env) nodes(t *testing.T, key types.NamespacedName) []views.Node {
	t.Helper()
	l := views.NewNodeListObject()
	require.NoError(t, e.c.List(context.Background(), l, client.InNamespace(key.Namespace), client.MatchingLabels{render.LabelCluster: key.Name}))
	out := make([]views.Node, len(l.Items))
	for i := range l.Items {
		out[i] = views.Node{U: &l.Items[i]}
	}
	return out
}

func (e *day2Env) pods(t *testing.T, key types.NamespacedName) []corev1.Pod {
	t.Helper()
	l := &corev1.PodList{}
	require.NoError(t, e.c.List(context.Background(), l, client.InNamespace(key.Namespace), client.MatchingLabels{render.LabelCluster: key.Name}))
	return l.Items
}

// ---- waiting --------------------------------------------------------------------------------

// waitUntil polls cond (with a deadline) until it holds; cond says what it saw otherwise.
func waitUntil(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	err := poll.Until(context.Background(), 20*time.Millisecond, day2Wait, what, func(context.Context) (bool, string, error) {
		ok, status := cond()
		return ok, status, nil
	})
	require.NoError(t, err)
}

// waitPasses waits until n more reconcile passes of the cluster have ended.
func (e *day2Env) waitPasses(t *testing.T, key types.NamespacedName, n int64) {
	t.Helper()
	from := e.passes.of(key)
	waitUntil(t, fmt.Sprintf("%d passes of %s", n, key), func() (bool, string) {
		got := e.passes.of(key) - from
		return got >= n, fmt.Sprintf("%d passes", got)
	})
}

// converged reports whether the cluster is settled at shards × replicas: exactly that many
// ValkeyNodes, each Active with its pod, and their servers, and only they, form a cluster
// that model.Health finds healthy, balanced within 1%, every slot's keys on its owner.
func (e *day2Env) converged(t *testing.T, key types.NamespacedName, shards, replicas int) (bool, string) {
	t.Helper()
	perShard, want := map[int]int{}, map[int]int{}
	for s := 0; s < shards; s++ {
		want[s] = 1 + replicas
	}
	var names []string
	for _, n := range e.nodes(t, key) {
		if life := n.Status().Lifecycle; life != views.LifecycleActive {
			return false, n.Name() + " is " + life
		}
		perShard[n.Shard()]++
		names = append(names, n.Name())
	}
	if !maps.Equal(perShard, want) {
		return false, fmt.Sprintf("nodes per shard %v", perShard)
	}
	sort.Strings(names)
	var pods []string
	for _, p := range e.pods(t, key) {
		pods = append(pods, p.Name)
		// The operator marks a pod in sync from a pass after the one that saw it so; a window
		// that starts before every mark has landed would count the late ones as its own.
		if !podInSync(p) {
			return false, p.Name + " is not yet marked in sync"
		}
	}
	sort.Strings(pods)
	if !slices.Equal(names, pods) {
		return false, fmt.Sprintf("pods %v for nodes %v", pods, names)
	}
	m := e.valkey.model(key)
	if in := m.inCluster(); !slices.Equal(in, names) {
		return false, fmt.Sprintf("servers in the cluster %v, ValkeyNodes %v", in, names)
	}
	if problems := m.health(names, shards, replicas); len(problems) > 0 {
		return false, strings.Join(problems, "; ")
	}
	return true, "converged"
}

// podInSync reports whether the operator has marked pod an in-sync member of its shard.
func podInSync(pod corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == render.InSyncCondition {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// waitConverged waits for converged, then for two more passes, so that the last action's
// bookkeeping (IDs and roles recorded, its Event) has landed.
func (e *day2Env) waitConverged(t *testing.T, key types.NamespacedName, shards, replicas int) {
	t.Helper()
	what := fmt.Sprintf("%s converged at %d shards x %d replicas", key, shards, replicas)
	err := poll.Until(context.Background(), 20*time.Millisecond, day2Wait, what, func(context.Context) (bool, string, error) {
		ok, status := e.converged(t, key, shards, replicas)
		return ok, status, nil
	})
	require.NoError(t, err, "model:%s", e.valkey.model(key).describe())
	e.waitPasses(t, key, 2)
}

// assertShape checks what a restart must never leave behind: every shard has exactly one
// slot-holding primary among its own nodes (no shard doubled), no slot is open, and every
// ValkeyNode is a server in the cluster and every server in it a ValkeyNode (no orphan).
func (e *day2Env) assertShape(t *testing.T, key types.NamespacedName, shards int) {
	t.Helper()
	m := e.valkey.model(key)
	holders := map[int]int{}
	var names []string
	for _, n := range e.nodes(t, key) {
		st, ok := m.inspect(n.Name())
		require.True(t, ok, "%s has a server", n.Name())
		assert.Zero(t, st.Open, "%s has no open slot", n.Name())
		if st.Role == "primary" && st.Slots > 0 {
			holders[n.Shard()]++
		}
		names = append(names, n.Name())
	}
	for s := 0; s < shards; s++ {
		assert.Equal(t, 1, holders[s], "shard %d has one slot-holding primary", s)
	}
	sort.Strings(names)
	assert.Equal(t, names, m.inCluster(), "the servers in the cluster are exactly the ValkeyNodes")
}

// assertIdle: over an idle window of day2IdlePasses reconcile passes, the converged cluster
// causes no API write (none recorded, and every object's resourceVersion unchanged) and no
// Valkey write (neither a scripted call nor one of the fallback's).
func (e *day2Env) assertIdle(t *testing.T, key types.NamespacedName) {
	m := e.valkey.model(key)
	before := snapshotNamespace(t, e.c, key.Namespace)
	apiWrites, valkeyOps, fallback := len(e.api.in(key.Namespace, time.Time{})), len(m.writes()), e.valkey.fallback.writeCount(key)
	start, passes := time.Now(), e.passes.of(key)
	e.waitPasses(t, key, day2IdlePasses)
	t.Logf("idle window %s: %d passes", time.Since(start).Round(time.Millisecond), e.passes.of(key)-passes)
	assert.Empty(t, e.api.in(key.Namespace, time.Time{})[apiWrites:], "no API write")
	assert.Equal(t, before, snapshotNamespace(t, e.c, key.Namespace), "every object unchanged")
	assert.Len(t, m.writes(), valkeyOps, "no Valkey write call")
	assert.Equal(t, fallback, e.valkey.fallback.writeCount(key), "no unscripted Valkey write either")
}

// ---- the cluster's state, as a watch shows it ---------------------------------------------

// stateLog is every status a watch on one ValkeyCluster delivered, from the moment it began.
type stateLog struct {
	mu     sync.Mutex
	seen   []views.Status
	ended  bool
	cancel context.CancelFunc
	done   chan struct{}
}

func (e *day2Env) watchState(t *testing.T, key types.NamespacedName) *stateLog {
	t.Helper()
	c := e.getCluster(t, key)
	l := &stateLog{seen: []views.Status{c.Status()}, done: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	l.cancel = cancel
	w, err := e.c.Watch(ctx, views.NewClusterListObject(), client.InNamespace(key.Namespace),
		&client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: c.U.GetResourceVersion()}})
	require.NoError(t, err)
	go func() {
		defer close(l.done)
		defer w.Stop()
		for ev := range w.ResultChan() {
			u, ok := ev.Object.(*unstructured.Unstructured)
			if !ok || u.GetName() != key.Name {
				continue
			}
			l.mu.Lock()
			l.seen = append(l.seen, views.Cluster{U: u}.Status())
			l.mu.Unlock()
		}
		l.mu.Lock()
		l.ended = ctx.Err() == nil
		l.mu.Unlock()
	}()
	t.Cleanup(func() { cancel(); <-l.done })
	return l
}

// assertActive stops the watch and checks every status it saw: Active, no targetSpec.
func (l *stateLog) assertActive(t *testing.T) {
	t.Helper()
	l.cancel()
	<-l.done
	l.mu.Lock()
	defer l.mu.Unlock()
	assert.False(t, l.ended, "the watch ended early")
	for i, s := range l.seen {
		assert.Equal(t, views.StateActive, s.State, "status %d of %d", i+1, len(l.seen))
		assert.Nil(t, s.Target, "targetSpec stays unset (status %d)", i+1)
	}
	t.Logf("%d cluster statuses watched, all Active", len(l.seen))
}

// ---- the operator's writes as one timeline ----------------------------------------------

// day2Step is one write the operator made for a cluster: an API write or a Valkey write call.
type day2Step struct {
	Start, End time.Time
	// Kind is the plan action the write belongs to (a plan.Kind), or what it is otherwise:
	// RecordStatus for an observed ID, role or IP recorded on a ValkeyNode.
	Kind   string
	Target string
	OK     bool
}

const recordStatus = "RecordStatus"

// Bookkeeping beside the actions: a pod's in-sync condition set, a shard's budget applied
// or deleted. Neither is a topology action, and both may recur (a pod turns in sync, out,
// and in again).
const (
	recordInSync = "RecordInSync"
	budgetWrite  = "Budget"
)

// bookkeeping reports whether a step records something rather than acting.
func bookkeeping(kind string) bool {
	return kind == recordStatus || kind == recordInSync || kind == budgetWrite
}

// settleStep is the Valkey write MarkActive starts with.
const settleStep = "Settle"

// timeline is the cluster's writes since `since`, in the order they started. API writes are
// classified by what they do: a ValkeyNode created, or its status moved to Joining, is
// CreateNodes, as is a pod or its config ConfigMap created; a status moved to Active or Leaving is MarkActive or
// MarkLeaving; a ValkeyNode deleted is Delete. Events are left out (they are written
// asynchronously, after the pass).
func (e *day2Env) timeline(key types.NamespacedName, since time.Time) []day2Step {
	var out []day2Step
	lifecycle := map[string]string{}
	for _, w := range e.api.in(key.Namespace, time.Time{}) {
		if w.Resource == "events" {
			continue
		}
		s := day2Step{Start: w.Start, End: w.End, OK: w.OK, Target: w.Name}
		switch {
		case w.Resource == "valkeynodes" && w.Method == http.MethodPost:
			s.Kind = string(plan.CreateNodes)
		case w.Resource == "valkeynodes" && w.Sub == "status":
			s.Kind = recordStatus
			if w.OK && w.Lifecycle != lifecycle[w.Name] {
				lifecycle[w.Name] = w.Lifecycle
				s.Kind = map[string]string{views.LifecycleJoining: string(plan.CreateNodes),
					views.LifecycleActive: string(plan.MarkActive), views.LifecycleLeaving: string(plan.MarkLeaving)}[w.Lifecycle]
				s.Target += " " + w.Lifecycle
			}
		case w.Resource == "valkeynodes" && w.Method == http.MethodDelete:
			s.Kind = string(plan.Delete)
		case w.Resource == "pods" && w.Method == http.MethodPost:
			s.Kind, s.Target = string(plan.CreateNodes), w.Name+" pod"
		case w.Resource == "configmaps" && w.Method == http.MethodPost:
			s.Kind, s.Target = string(plan.CreateNodes), w.Name // a new node's config file
		case w.Resource == "pods" && w.Sub == "status":
			s.Kind = recordInSync
		case w.Resource == "poddisruptionbudgets":
			s.Kind = budgetWrite
		case w.Resource == "valkeyclusters" && w.Sub == "status":
			s.Kind = "ClusterStatus"
		default:
			s.Kind = w.Method + " " + w.Resource
		}
		if !s.Start.Before(since) {
			out = append(out, s)
		}
	}
	for _, w := range valkeyWrites(e.valkey.model(key), since) {
		out = append(out, day2Step{Start: w.Start, End: w.End, Kind: w.Op, Target: w.Args, OK: w.Err == nil})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Start.Before(out[j].Start) })
	return out
}

// valkeyWrites are the model's write calls that started at or after since.
func valkeyWrites(m *valkeyModel, since time.Time) []writeOp {
	var out []writeOp
	for _, w := range m.writes() {
		if !w.Start.Before(since) {
			out = append(out, w)
		}
	}
	return out
}

// opList is writes in one line each, for failure messages.
func opList(ws []writeOp) []string {
	out := make([]string, len(ws))
	for i, w := range ws {
		out[i] = w.String()
	}
	return out
}

func kinds(ks ...plan.Kind) []string {
	out := make([]string, len(ks))
	for i, k := range ks {
		out[i] = string(k)
	}
	return out
}

// actionsOf is the sequence of successful actions: bookkeeping left out, and the consecutive
// writes of one action (a CreateNodes writes a node, its status and its pod per new node; a
// MarkActive one status per node) folded into one.
func actionsOf(steps []day2Step) []string {
	var out []string
	for _, s := range steps {
		// Settle is MarkActive's first step, on the servers (testScaleShards checks it).
		if !s.OK || bookkeeping(s.Kind) || s.Kind == settleStep {
			continue
		}
		if len(out) == 0 || out[len(out)-1] != s.Kind {
			out = append(out, s.Kind)
		}
	}
	return out
}

// opArgs are the targets of the successful steps of one kind, in order.
func opArgs(steps []day2Step, k plan.Kind) []string {
	var out []string
	for _, s := range steps {
		if s.OK && s.Kind == string(k) {
			out = append(out, s.Target)
		}
	}
	return out
}

// firstOK is the index of the first successful step of kind k whose target starts with name
// (-1 if none).
func firstOK(steps []day2Step, k plan.Kind, name string) int {
	for i, s := range steps {
		if s.OK && s.Kind == string(k) && strings.Fields(s.Target + " ")[0] == name {
			return i
		}
	}
	return -1
}

// assertTimeline: no write of an action starts before the previous one has ended (one
// action at a time), no successful action is repeated, and the cluster's status is never
// written (the state stays Active, Updating is never written, targetSpec stays unset: by
// construction, not by luck of the watch). Bookkeeping (an observed ID or role recorded on
// a ValkeyNode) is no action: a pass may record one while a slot move runs in the background.
func assertTimeline(t *testing.T, steps []day2Step) {
	t.Helper()
	var last time.Time
	done := map[string]bool{}
	for i, s := range steps {
		assert.NotEqual(t, "ClusterStatus", s.Kind, "the Active phase wrote the cluster's status: %s", describeSteps(steps))
		if bookkeeping(s.Kind) {
			continue
		}
		assert.False(t, s.Start.Before(last), "step %d (%s %s) started before the one before it ended: %s", i, s.Kind, s.Target, describeSteps(steps))
		if s.End.After(last) {
			last = s.End
		}
		if !s.OK {
			continue
		}
		id := s.Kind + " " + s.Target
		assert.False(t, done[id], "%s succeeded twice: %s", id, describeSteps(steps))
		done[id] = true
	}
}

func describeSteps(steps []day2Step) string {
	var b strings.Builder
	for _, s := range steps {
		fmt.Fprintf(&b, "\n  %s +%5s %-12s %s ok=%v", s.Start.Format("15:04:05.000"), s.End.Sub(s.Start).Round(time.Millisecond), s.Kind, s.Target, s.OK)
	}
	return b.String()
}

// nodeCreates are the names of the ValkeyNodes created in ns since `since`.
func (e *day2Env) nodeCreates(ns string, since time.Time) []string {
	var out []string
	for _, w := range e.api.in(ns, since) {
		if w.Resource == "valkeynodes" && w.Method == http.MethodPost && w.OK {
			out = append(out, w.Name)
		}
	}
	return out
}

// ---- the recording transport ------------------------------------------------------------

// apiWrite is one write request of an operator.
type apiWrite struct {
	Start, End                             time.Time
	Method, Namespace, Resource, Name, Sub string
	Lifecycle                              string // a ValkeyNode status write: the lifecycle it writes
	OK                                     bool
}

// apiRecorder records every write request the operators send, and can hold one: a held
// request never reaches the API server and ends only when its context does or its process
// dies (an operator stopped in the middle of it).
type apiRecorder struct {
	mu     sync.Mutex
	writes []apiWrite
	holds  []*apiHold
	lags   []*watchLag
}

type apiHold struct {
	method, namespace, resource string
	hit                         chan struct{}
}

// hold holds the next write of method to resource in namespace; the channel closes once
// one is held.
func (a *apiRecorder) hold(method, namespace, resource string) <-chan struct{} {
	a.mu.Lock()
	defer a.mu.Unlock()
	h := &apiHold{method: method, namespace: namespace, resource: resource, hit: make(chan struct{})}
	a.holds = append(a.holds, h)
	return h.hit
}

// in are the recorded writes in namespace ns that started at or after since.
func (a *apiRecorder) in(ns string, since time.Time) []apiWrite {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []apiWrite
	for _, w := range a.writes {
		if w.Namespace == ns && !w.Start.Before(since) {
			out = append(out, w)
		}
	}
	return out
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// wrap records the writes of the process proc; once it is dead, its requests fail without
// reaching the API server.
func (a *apiRecorder) wrap(next http.RoundTripper, proc *scriptedProcess) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		if proc.gone() {
			return nil, fmt.Errorf("connection refused: the operator process is dead")
		}
		if req.Method == http.MethodGet || req.Method == http.MethodHead {
			resp, err := next.RoundTrip(req)
			if lag := a.lagFor(req); lag != nil && err == nil {
				resp.Body = &laggingBody{body: resp.Body, r: bufio.NewReader(resp.Body), lag: lag}
			}
			return resp, err
		}
		w := describeWrite(req)
		a.mu.Lock()
		var held *apiHold
		for i, h := range a.holds {
			if h.method == w.Method && h.namespace == w.Namespace && h.resource == w.Resource {
				held = h
				a.holds = append(a.holds[:i], a.holds[i+1:]...)
				break
			}
		}
		a.mu.Unlock()
		var resp *http.Response
		var err error
		if held != nil {
			close(held.hit)
			select {
			case <-req.Context().Done():
				err = req.Context().Err()
			case <-proc.killed():
				err = fmt.Errorf("connection reset: the operator process is dead")
			}
		} else {
			resp, err = next.RoundTrip(req)
		}
		w.End = time.Now()
		w.OK = err == nil && resp.StatusCode < 300
		a.mu.Lock()
		a.writes = append(a.writes, w)
		a.mu.Unlock()
		return resp, err
	})
}

// watchLag delays, once, the watch event of resource that match picks: the operators'
// caches then show every change before it at once, and that one only d later, as a slow
// informer would.
type watchLag struct {
	resource string
	match    func(watch.EventType, *unstructured.Unstructured) bool
	d        time.Duration
	used     atomic.Bool
	hit      chan struct{}
}

// lagWatch arms a watchLag; the channel closes when the event it delays arrives.
func (a *apiRecorder) lagWatch(resource string, d time.Duration, match func(watch.EventType, *unstructured.Unstructured) bool) <-chan struct{} {
	a.mu.Lock()
	defer a.mu.Unlock()
	l := &watchLag{resource: resource, match: match, d: d, hit: make(chan struct{})}
	a.lags = append(a.lags, l)
	return l.hit
}

// lagFor is the armed watchLag for a watch request, if any.
func (a *apiRecorder) lagFor(req *http.Request) *watchLag {
	if req.URL.Query().Get("watch") != "true" {
		return nil
	}
	w := parsePath(req)
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, l := range a.lags {
		if l.resource == w.Resource && !l.used.Load() {
			return l
		}
	}
	return nil
}

// laggingBody is a watch stream (one JSON event per line) that holds back the event its lag
// picks for the lag's duration.
type laggingBody struct {
	body io.ReadCloser
	r    *bufio.Reader
	lag  *watchLag
	buf  []byte
	err  error
}

func (b *laggingBody) Read(p []byte) (int, error) {
	for len(b.buf) == 0 {
		if b.err != nil {
			return 0, b.err
		}
		b.buf, b.err = b.r.ReadBytes('\n')
		var ev metav1.WatchEvent
		u := &unstructured.Unstructured{}
		if len(b.buf) > 0 && json.Unmarshal(b.buf, &ev) == nil && u.UnmarshalJSON(ev.Object.Raw) == nil &&
			b.lag.match(watch.EventType(ev.Type), u) && b.lag.used.CompareAndSwap(false, true) {
			close(b.lag.hit)
			time.Sleep(b.lag.d) // the lag itself: what is being simulated is a slow stream
		}
	}
	n := copy(p, b.buf)
	b.buf = b.buf[n:]
	return n, nil
}

func (b *laggingBody) Close() error { return b.body.Close() }

// parsePath reads the namespace, resource, name and subresource of an API request.
func parsePath(req *http.Request) apiWrite {
	w := apiWrite{Start: time.Now(), Method: req.Method}
	parts := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) >= 3 && parts[0] == "apis":
		parts = parts[3:]
	}
	if len(parts) >= 2 && parts[0] == "namespaces" {
		w.Namespace, parts = parts[1], parts[2:]
	}
	for i, p := range parts {
		switch i {
		case 0:
			w.Resource = p
		case 1:
			w.Name = p
		case 2:
			w.Sub = p
		}
	}
	return w
}

// describeWrite reads what a write request does from its path (and, for a create or a
// ValkeyNode write, its body) without consuming it.
func describeWrite(req *http.Request) apiWrite {
	w := parsePath(req)
	if req.GetBody == nil || (w.Method != http.MethodPost && w.Resource != "valkeynodes") {
		return w
	}
	body, err := req.GetBody()
	if err != nil {
		return w
	}
	defer body.Close()
	raw, err := io.ReadAll(body)
	if err != nil {
		return w
	}
	if w.Resource == "valkeynodes" {
		u := &unstructured.Unstructured{}
		if u.UnmarshalJSON(raw) == nil {
			w.Name = cmp.Or(w.Name, u.GetName())
			w.Lifecycle = views.Node{U: u}.Status().Lifecycle
		}
		return w
	}
	// Built-in kinds travel as protobuf.
	if obj, _, err := clientgoscheme.Codecs.UniversalDeserializer().Decode(raw, nil, nil); err == nil {
		if a, err := meta.Accessor(obj); err == nil {
			w.Name = cmp.Or(w.Name, a.GetName())
		}
	}
	return w
}
