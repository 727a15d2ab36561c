package reconciler

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The cache keeps managedFields only on the kinds apply extracts its own fields from.
func TestStripManagedFields(t *testing.T) {
	fields := []metav1.ManagedFieldsEntry{{Manager: FieldManager, Operation: metav1.ManagedFieldsOperationApply}}
	node := &unstructured.Unstructured{}
	node.SetAPIVersion("valkey.gomomento.com/v1alpha1")
	node.SetKind("ValkeyNode")
	for _, tc := range []struct {
		obj  client.Object
		keep bool
	}{
		{&corev1.Pod{}, false},
		{node, false},
		{&corev1.Secret{}, true},
		{&corev1.Service{}, true},
		{&corev1.ConfigMap{}, true},
	} {
		tc.obj.SetManagedFields(fields)
		out, err := stripManagedFields(tc.obj)
		require.NoError(t, err)
		got := out.(client.Object).GetManagedFields()
		if tc.keep {
			assert.Equal(t, fields, got, "%T keeps its managedFields", tc.obj)
		} else {
			assert.Nil(t, got, "%T is cached without managedFields", tc.obj)
		}
	}
}
