//go:build envtest

package reconciler_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/gomomento/valkey-operator/reconciler/views"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/gomomento/valkey-operator/internal/testcerts"
	"github.com/stretchr/testify/assert"
)

// TestIdleClusterMakesNoWrites: once Active, an idle cluster causes zero API writes across a
// window of reconciles driven by informer resyncs. Every object in the namespace (owned,
// menu-related and Events) is listed before and after; any write would change a
// resourceVersion. VALKEY_IDLE_WINDOW (a Go duration) sets the window, 60s by default.
func TestIdleClusterMakesNoWrites(t *testing.T) {
	t.Parallel()
	window := time.Minute
	if v := os.Getenv("VALKEY_IDLE_WINDOW"); v != "" {
		d, err := time.ParseDuration(v)
		require.NoError(t, err)
		window = d
	}
	ns := newNamespace(t)
	good := testcerts.New(t, testcerts.Options{DNSNames: testcerts.ForCluster("c", ns)})
	require.NoError(t, k8s.Create(context.Background(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "tls", Namespace: ns}, Data: good.Data()}))
	key := createCluster(t, ns, "c", menu(t, ns, nil), clusterOpts{shards: 2, replicas: 1, tlsSecret: "tls",
		acl: []views.ACLUser{{Username: "app", PasswordHashes: []string{hashHex("pw")},
			Permissions: []views.ACLPermission{{RoleRef: "missing-role-" + ns, Keys: []views.KeyPermission{{Pattern: "app:*", Access: "readwrite"}}}}}}})
	waitState(t, key, views.StateActive)
	// Let the Events of the transition land before taking the baseline.
	waitEvent(t, key, corev1.EventTypeNormal, "StateChanged", "Creating -> Active")
	waitPodsInSync(t, key)

	before := snapshotNamespace(t, k8s, ns)
	writes := fake.writeCount(key)
	reconciles := passes.of(key)
	start := time.Now()
	time.Sleep(window) // the window itself is what is being measured
	after := snapshotNamespace(t, k8s, ns)
	passes := passes.of(key) - reconciles

	minPasses := int64(window / resync / 2)
	t.Logf("idle window %s: %d reconcile passes of this cluster (resync %s), %d objects watched", time.Since(start).Round(time.Second), passes, resync, len(before))
	assert.GreaterOrEqual(t, passes, minPasses, "the window must really contain idle reconciles")
	assert.Equal(t, before, after, "an idle cluster makes zero API writes")
	assert.Equal(t, writes, fake.writeCount(key), "an idle Active cluster sends Valkey no write command")
}

// snapshotNamespace maps kind/name to resourceVersion for everything the operator could
// write in ns, read through c.
func snapshotNamespace(t *testing.T, c client.Reader, ns string) map[string]string {
	t.Helper()
	return snapshot(t, c, map[string]client.ObjectList{
		"ValkeyCluster": views.NewClusterListObject(), "ValkeyNode": views.NewNodeListObject(),
		"Pod": &corev1.PodList{}, "Service": &corev1.ServiceList{}, "Secret": &corev1.SecretList{},
		"ConfigMap": &corev1.ConfigMapList{}, "Event": &eventsv1.EventList{},
	}, client.InNamespace(ns))
}

// snapshot maps kind/name to resourceVersion for the objects of lists that opts select.
func snapshot(t *testing.T, c client.Reader, lists map[string]client.ObjectList, opts ...client.ListOption) map[string]string {
	t.Helper()
	out := map[string]string{}
	for kind, list := range lists {
		require.NoError(t, c.List(context.Background(), list, opts...))
		require.NoError(t, meta.EachListItem(list, func(o runtime.Object) error {
			m, err := meta.Accessor(o)
			if err != nil {
				return err
			}
			out[kind+"/"+m.GetName()] = m.GetResourceVersion()
			return nil
		}))
	}
	require.NotEmpty(t, out)
	return out
}
