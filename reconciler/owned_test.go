//go:build envtest

package reconciler_test

import (
	"context"
	"testing"

	"github.com/gomomento/valkey-operator/reconciler/views"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestForeignObjectsAreNotAdopted: an auth Secret or ACL ConfigMap of the cluster's name
// that the cluster did not create (the ConfigMap unlabelled, so invisible to the operator's
// filtered cache) is left untouched, named in a Warning Event, and keeps the cluster from
// progressing; deleting it lets the cluster form.
func TestForeignObjectsAreNotAdopted(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name    string
		foreign client.Object
		kind    string
	}{
		{"secret", &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "c-auth"}, Data: map[string][]byte{"password": []byte("theirs")}}, "Secret"},
		{"configmap", &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "c-acl"}, Data: map[string]string{"users.acl": "user x on nopass +@all"}}, "ConfigMap"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ns := newNamespace(t)
			ctx := context.Background()
			tt.foreign.SetNamespace(ns)
			require.NoError(t, k8s.Create(ctx, tt.foreign))
			rv := tt.foreign.GetResourceVersion()
			key := createCluster(t, ns, "c", menu(t, ns, nil), clusterOpts{shards: 1, replicas: 0})

			waitEvent(t, key, corev1.EventTypeWarning, "ObjectConflict", tt.kind+` "`+tt.foreign.GetName()+`" exists but was not created by this ValkeyCluster`)
			before := passes.of(key)
			require.True(t, pollUntil(waitFor, func() bool { return passes.of(key) > before+2 }), "more passes ran")
			getObj(t, tt.foreign, ns, tt.foreign.GetName())
			assert.Equal(t, rv, tt.foreign.GetResourceVersion(), "the foreign object is untouched")
			assert.Empty(t, tt.foreign.GetOwnerReferences())
			assert.Empty(t, listNodes(t, key), "the cluster does not progress")
			assert.Equal(t, 0, fake.callCount(key), "Valkey is not dialled")

			require.NoError(t, k8s.Delete(ctx, tt.foreign))
			waitState(t, key, views.StateActive)
		})
	}
}

// TestOwnedFieldsDriftBack: a field the operator applies, changed by someone else, is put
// back by the next apply; fields it does not own (an extra label) are left alone.
func TestOwnedFieldsDriftBack(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	ctx := context.Background()
	key := createCluster(t, ns, "c", menu(t, ns, nil), clusterOpts{shards: 1, replicas: 0})
	waitState(t, key, views.StateActive)

	svc := &corev1.Service{}
	require.Eventually(t, func() bool {
		getObj(t, svc, ns, "c")
		svc.Spec.PublishNotReadyAddresses = false
		svc.Labels["team"] = "payments"
		return k8s.Update(ctx, svc) == nil
	}, waitFor, tick)
	require.True(t, pollUntil(waitFor, func() bool {
		getObj(t, svc, ns, "c")
		return svc.Spec.PublishNotReadyAddresses
	}), "publishNotReadyAddresses restored")
	assert.Equal(t, "payments", svc.Labels["team"], "a label the operator does not own stays")
	assert.Equal(t, "c", svc.Labels["valkey.gomomento.com/cluster"])
}
