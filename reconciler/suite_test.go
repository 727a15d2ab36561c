//go:build envtest

package reconciler_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gomomento/valkey-operator/crds"
	"github.com/gomomento/valkey-operator/internal/testenv"
	"github.com/gomomento/valkey-operator/reconciler"
	"github.com/gomomento/valkey-operator/reconciler/render"
	"github.com/gomomento/valkey-operator/reconciler/views"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"crypto/sha256"

	"go.uber.org/zap/zapcore"
)

func hashHex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// The suite runs the real manager (reconciler.NewManager) against a real kube-apiserver
// from envtest. There is no kubelet: a small loop below plays one by writing pod status,
// and Valkey is fakeValkey, one fake per port.
var (
	cfg     *rest.Config
	k8s     client.Client // direct, uncached: what the tests observe is what the API server has
	fake    = newFakeValkey()
	kubelet = newFakeKubelet()
	passes  = &passCounter{}

	// resync is the informer resync period: every tick re-delivers every object to the
	// controller, so an idle window really exercises reconciles.
	resync = 2 * time.Second
)

const operatorNamespace = "valkey-operator"

func TestMain(m *testing.M) {
	os.Exit(runSuite(m))
}

func runSuite(m *testing.M) int {
	ctrl.SetLogger(zap.New(zap.UseDevMode(true), zap.Level(zapLevel())))
	start := time.Now()
	env, stop, err := testenv.Run()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer stop()
	cfg = env.Config
	fmt.Printf("envtest control plane up in %s\n", time.Since(start).Round(time.Millisecond))

	k8s, err = client.New(cfg, client.Options{Scheme: clientgoscheme.Scheme})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: operatorNamespace}}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	mgr, _, err := reconciler.NewManager(ctx, cfg, reconciler.ManagerConfig{
		Namespace:       operatorNamespace,
		MetricsAddr:     "0",
		ProbeAddr:       "0",
		SyncPeriod:      resync,
		RecheckInterval: time.Second,
		PollInterval:    200 * time.Millisecond,
		ActivePeriod:    time.Second,
		Valkey:          fake,
		Metrics:         passes,
		RestoreImage:    "valkey-operator:test",
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "manager:", err)
		return 1
	}
	mgrDone := make(chan error, 1)
	go func() { mgrDone <- mgr.Start(ctx) }()
	go kubelet.run(ctx, k8s)

	code := m.Run()
	cancel()
	if err := <-mgrDone; err != nil {
		fmt.Fprintln(os.Stderr, "manager stopped with error:", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

func zapLevel() zapcore.Level {
	if os.Getenv("VALKEY_TEST_VERBOSE") != "" {
		return -1
	}
	return 1 // warnings and errors only, keeps the suite output readable
}

// ---- helpers --------------------------------------------------------------------------

const (
	waitFor = 30 * time.Second
	tick    = 50 * time.Millisecond
)

func newNamespace(t *testing.T) string {
	t.Helper()
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	name := strings.ToLower(strings.NewReplacer("/", "-", "_", "-", " ", "-", ".", "-").Replace(t.Name()))
	if len(name) > 40 {
		name = name[:40]
	}
	name = strings.Trim(name, "-") + "-" + hex.EncodeToString(b)
	require.NoError(t, k8s.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}))
	return name
}

// menu creates a ValkeyImage and a ValkeyConfig using it, named after prefix.
func menu(t *testing.T, prefix string, valkey map[string]string) (configName string) {
	t.Helper()
	createImage(t, prefix+"-img", "valkey/valkey", "9.0.0", "9.0.0")
	createConfig(t, prefix+"-cfg", prefix+"-img", "", valkey)
	return prefix + "-cfg"
}

func createImage(t *testing.T, name, repo, tag, version string) {
	t.Helper()
	i := views.Image{U: views.NewImageObject()}
	i.U.SetName(name)
	i.SetRepository(repo)
	i.SetTag(tag)
	i.SetVersion(version)
	require.NoError(t, k8s.Create(context.Background(), i.U))
}

func createConfig(t *testing.T, name, imageRef, baseRef string, valkey map[string]string) {
	t.Helper()
	c := views.Config{U: views.NewConfigObject()}
	c.U.SetName(name)
	c.SetImageRef(imageRef)
	c.SetBaseRef(baseRef)
	c.SetResources(views.Resources{CPU: "100m", Memory: "256Mi"})
	c.SetValkey(valkey)
	require.NoError(t, k8s.Create(context.Background(), c.U))
}

type clusterOpts struct {
	shards, replicas int
	tlsSecret        string
	placement        views.Placement
	annotations      map[string]string
	acl              []views.ACLUser
	restoreFrom      *views.RestoreSource
}

func createCluster(t *testing.T, ns, name, configRef string, o clusterOpts) types.NamespacedName {
	t.Helper()
	c := views.Cluster{U: views.NewClusterObject()}
	c.U.SetName(name)
	c.U.SetNamespace(ns)
	c.SetConfigRef(configRef)
	c.SetShards(o.shards)
	c.SetReplicasPerShard(o.replicas)
	c.SetTLSSecretRef(o.tlsSecret)
	c.SetPlacement(o.placement)
	c.SetPodAnnotations(o.annotations)
	c.SetACL(o.acl)
	c.SetRestoreFrom(o.restoreFrom)
	require.NoError(t, k8s.Create(context.Background(), c.U))
	return types.NamespacedName{Namespace: ns, Name: name}
}

func getCluster(t *testing.T, key types.NamespacedName) views.Cluster {
	t.Helper()
	u := views.NewClusterObject()
	require.NoError(t, k8s.Get(context.Background(), key, u))
	return views.Cluster{U: u}
}

// editCluster applies mutate to the live cluster, retrying on conflicts.
func editCluster(t *testing.T, key types.NamespacedName, mutate func(views.Cluster)) {
	t.Helper()
	require.Eventually(t, func() bool {
		c := getCluster(t, key)
		mutate(c)
		err := k8s.Update(context.Background(), c.U)
		return err == nil || !apierrors.IsConflict(err) && assertNoErr(t, err)
	}, waitFor, tick)
}

func assertNoErr(t *testing.T, err error) bool {
	t.Helper()
	require.NoError(t, err)
	return true
}

// waitStatus polls until the cluster status satisfies pred and returns it.
func waitStatus(t *testing.T, key types.NamespacedName, what string, pred func(views.Status) bool) views.Status {
	t.Helper()
	var last views.Status
	ok := pollUntil(waitFor, func() bool {
		last = getCluster(t, key).Status()
		return pred(last)
	})
	require.True(t, ok, "cluster %s: waiting for %s; last status %+v (target %+v)", key, what, last, last.Target)
	return last
}

func waitState(t *testing.T, key types.NamespacedName, state string) views.Status {
	t.Helper()
	return waitStatus(t, key, "state "+state, func(s views.Status) bool { return s.State == state })
}

// waitPodsInSync waits until every pod of the cluster carries the in-sync condition True:
// the first Active passes set it, so a converged cluster is one whose pods are Ready.
func waitPodsInSync(t *testing.T, key types.NamespacedName) {
	t.Helper()
	require.True(t, pollUntil(waitFor, func() bool {
		pods := listPods(t, key)
		for _, pod := range pods {
			if !slices.ContainsFunc(pod.Status.Conditions, func(c corev1.PodCondition) bool {
				return c.Type == render.InSyncCondition && c.Status == corev1.ConditionTrue
			}) {
				return false
			}
		}
		return len(pods) > 0
	}), "cluster %s: every pod marked in sync", key)
}

func pollUntil(d time.Duration, cond func() bool) bool {
	err := wait.PollUntilContextTimeout(context.Background(), tick, d, true, func(context.Context) (bool, error) { return cond(), nil })
	return err == nil
}

func listNodes(t *testing.T, key types.NamespacedName) []views.Node {
	t.Helper()
	l := views.NewNodeListObject()
	require.NoError(t, k8s.List(context.Background(), l, client.InNamespace(key.Namespace),
		client.MatchingLabels{render.LabelCluster: key.Name}))
	var out []views.Node
	for i := range l.Items {
		out = append(out, views.Node{U: &l.Items[i]})
	}
	return out
}

func listPods(t *testing.T, key types.NamespacedName) []corev1.Pod {
	t.Helper()
	l := &corev1.PodList{}
	require.NoError(t, k8s.List(context.Background(), l, client.InNamespace(key.Namespace),
		client.MatchingLabels{render.LabelCluster: key.Name}))
	return l.Items
}

// waitEvent polls for an Event about the cluster with the given type and reason whose note
// contains substr, and returns its note.
func waitEvent(t *testing.T, key types.NamespacedName, eventType, reason, substr string) string {
	t.Helper()
	var note string
	ok := pollUntil(waitFor, func() bool {
		l := &eventsv1.EventList{}
		if err := k8s.List(context.Background(), l, client.InNamespace(key.Namespace)); err != nil {
			return false
		}
		for _, e := range l.Items {
			if e.Regarding.Name == key.Name && e.Regarding.Kind == crds.KindCluster &&
				e.Type == eventType && e.Reason == reason && strings.Contains(e.Note, substr) {
				note = e.Note
				return true
			}
		}
		return false
	})
	require.True(t, ok, "no %s Event %s containing %q for %s", eventType, reason, substr, key)
	return note
}

func getObj(t *testing.T, obj client.Object, ns, name string) {
	t.Helper()
	require.NoError(t, k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, obj))
}
