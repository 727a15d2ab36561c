package reconciler

import (
	"testing"
	"time"

	"github.com/gomomento/valkey-operator/reconciler/views"
	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// TestUnboundClaims: a data claim still Pending a slow start after it was made is named with
// its node and class; a bound one, a young one, one being deleted and a node without a claim
// are not.
func TestUnboundClaims(t *testing.T) {
	now := time.Date(2026, 12, 7, 1, 0, 0, 0, time.UTC)
	node := func(name string) views.Node {
		u := views.NewNodeObject()
		u.SetName(name)
		return views.Node{U: u}
	}
	claim := func(age time.Duration, phase corev1.PersistentVolumeClaimPhase, class *string) *corev1.PersistentVolumeClaim {
		return &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(now.Add(-age))},
			Spec:       corev1.PersistentVolumeClaimSpec{StorageClassName: class},
			Status:     corev1.PersistentVolumeClaimStatus{Phase: phase},
		}
	}
	deleting := claim(time.Hour, corev1.ClaimPending, nil)
	deleting.DeletionTimestamp = ptr.To(metav1.NewTime(now))
	claims := map[string]*corev1.PersistentVolumeClaim{
		"c-stuck":    claim(5*time.Minute, corev1.ClaimPending, ptr.To("fast")),
		"c-default":  claim(4*time.Minute, corev1.ClaimPending, nil),
		"c-young":    claim(time.Minute, corev1.ClaimPending, ptr.To("fast")),
		"c-bound":    claim(time.Hour, corev1.ClaimBound, ptr.To("fast")),
		"c-deleting": deleting,
	}
	for name, c := range claims {
		c.Name = name + "-data"
	}
	var nodes []views.Node
	for _, name := range []string{"c-stuck", "c-default", "c-young", "c-bound", "c-deleting", "c-none"} {
		nodes = append(nodes, node(name))
	}
	got := unboundClaims(nodes, func(n views.Node) *corev1.PersistentVolumeClaim { return claims[n.Name()] }, now, 3*time.Minute)
	assert.Equal(t, []string{
		"c-default-data of ValkeyNode c-default (StorageClass the default class)",
		`c-stuck-data of ValkeyNode c-stuck (StorageClass "fast")`,
	}, got)
}
