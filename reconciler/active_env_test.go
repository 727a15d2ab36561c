//go:build envtest

package reconciler_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

	"github.com/gomomento/valkey-operator/internal/poll"
	"github.com/gomomento/valkey-operator/internal/testenv"
	"github.com/gomomento/valkey-operator/reconciler"
	"github.com/gomomento/valkey-operator/reconciler/render"
	"github.com/gomomento/valkey-operator/reconciler/views"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ---- the private control plane ----------------------------------------------------------

// day2Env is a control plane of the Active-phase tests' own (their managers reconcile every
// namespace, so they cannot share the suite's), with the day-2 servers, the recording
// transport every manager writes through, and a kubelet.
type day2Env struct {
	c      client.WithWatch // the tests' client: its writes are not recorded
	cfg    *rest.Config
	valkey *day2Valkey
	api    *apiRecorder
	passes *passCounter
	ips    atomic.Int64
}

func startDay2Env(t *testing.T) *day2Env {
	t.Helper()
	env := testenv.Start(t)
	c, err := client.NewWithWatch(env.Config, client.Options{Scheme: clientgoscheme.Scheme})
	require.NoError(t, err)
	require.NoError(t, c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: operatorNamespace}}))

	e := &day2Env{c: c, cfg: env.Config, valkey: newDay2Valkey(5 * time.Millisecond), api: &apiRecorder{}, passes: &passCounter{}}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() { defer close(stopped); e.runKubelet(ctx) }()
	t.Cleanup(func() { cancel(); <-stopped })
	return e
}

// day2Manager is one operator process: the real manager, whose every API request goes
// through the recording transport and every Valkey call through its own connections.
type day2Manager struct {
	proc   *operatorProcess
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
	everyTick(ctx, 20*time.Millisecond, func() {
		// Pods before nodes: a listed pod's node existed before the pod did.
		pods := &corev1.PodList{}
		if err := e.c.List(ctx, pods, client.MatchingLabels{render.LabelManagedBy: render.ManagedBy}); err != nil {
			return
		}
		nodes := views.NewNodeListObject()
		if err := e.c.List(ctx, nodes); err != nil {
			return
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
			pod.Status = runningStatus(ip)
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
	})
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
	img.SetTag(fakeVersion)
	img.SetVersion(fakeVersion)
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
// that model.Health finds healthy, balanced within 1%.
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
	require.NoError(t, err, "model:%s", e.valkey.describe(key))
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
// Valkey write (neither a topology call nor one of the credentials' or certificates').
func (e *day2Env) assertIdle(t *testing.T, key types.NamespacedName) {
	log := e.valkey.log(key)
	before := snapshotNamespace(t, e.c, key.Namespace)
	apiWrites, valkeyOps, others := len(e.api.in(key.Namespace, time.Time{})), len(log.writes()), e.valkey.base.writeCount(key)
	start, passes := time.Now(), e.passes.of(key)
	e.waitPasses(t, key, day2IdlePasses)
	t.Logf("idle window %s: %d passes", time.Since(start).Round(time.Millisecond), e.passes.of(key)-passes)
	assert.Empty(t, e.api.in(key.Namespace, time.Time{})[apiWrites:], "no API write")
	assert.Equal(t, before, snapshotNamespace(t, e.c, key.Namespace), "every object unchanged")
	assert.Len(t, log.writes(), valkeyOps, "no topology write call")
	assert.Equal(t, others, e.valkey.base.writeCount(key), "no credential or certificate write either")
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
