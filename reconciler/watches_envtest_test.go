//go:build envtest

package reconciler_test

import (
	"context"
	"sync"
	"testing"

	"github.com/gomomento/valkey-operator/reconciler"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
)

// TestSecretNamesSeeUsersSecretsByNameOnly: the Secret-name cache that wakes clusters on TLS
// Secret changes sees a user's Secret (unlabelled, so the manager's Secret cache never holds
// it) being created and changed, and keeps nothing of it but its identity: no labels, no
// annotations (kubectl's last-applied-configuration would hold the keys), no managedFields.
func TestSecretNamesSeeUsersSecretsByNameOnly(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	names, err := reconciler.NewSecretNames(cfg, cache.Options{Scheme: clientgoscheme.Scheme})
	require.NoError(t, err)
	go func() { _ = names.Start(ctx) }()
	informer, err := names.GetInformer(ctx, reconciler.SecretMetadata())
	require.NoError(t, err)

	ns := newNamespace(t)
	key := types.NamespacedName{Namespace: ns, Name: "users-tls"}
	var mu sync.Mutex
	events := map[string]int{}
	record := func(kind string, o any) {
		if m, ok := o.(*metav1.PartialObjectMetadata); ok && m.Namespace == key.Namespace && m.Name == key.Name {
			mu.Lock()
			events[kind]++
			mu.Unlock()
		}
	}
	_, err = informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { record("add", o) },
		UpdateFunc: func(_, o any) { record("update", o) },
	})
	require.NoError(t, err)
	seen := func(kind string) func() bool {
		return func() bool { mu.Lock(); defer mu.Unlock(); return events[kind] > 0 }
	}

	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace, Labels: map[string]string{"team": "payments"},
			Annotations: map[string]string{"kubectl.kubernetes.io/last-applied-configuration": `{"data":{"tls.key":"c2VjcmV0"}}`}},
		Data: map[string][]byte{"tls.key": []byte("secret")},
	}
	require.NoError(t, k8s.Create(ctx, secret))
	require.True(t, pollUntil(waitFor, seen("add")), "the Secret's creation is seen")
	secret.Data["tls.key"] = []byte("rotated")
	require.NoError(t, k8s.Update(ctx, secret))
	require.True(t, pollUntil(waitFor, seen("update")), "a change of its data is seen")

	stored := reconciler.SecretMetadata()
	require.NoError(t, names.Get(ctx, key, stored))
	for _, tc := range []struct {
		field string
		empty bool
	}{
		{"labels", len(stored.Labels) == 0},
		{"annotations", len(stored.Annotations) == 0},
		{"managedFields", len(stored.ManagedFields) == 0},
		{"ownerReferences", len(stored.OwnerReferences) == 0},
	} {
		assert.True(t, tc.empty, "the cache holds no %s", tc.field)
	}
	assert.Equal(t, key, types.NamespacedName{Namespace: stored.Namespace, Name: stored.Name})
	assert.Equal(t, secret.UID, stored.UID)
}
