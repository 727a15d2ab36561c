package reconciler

import (
	"context"
	"testing"

	"github.com/gomomento/valkey-operator/reconciler/render"
	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// TestPodEventsInterruptReads: an update showing a pod's server newly exited cuts short the
// reads under way for that pod's cluster, and only those; every update still enqueues the
// cluster.
func TestPodEventsInterruptReads(t *testing.T) {
	pod := func(cluster string, exited bool) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: cluster + "-0a", Labels: map[string]string{
			render.LabelCluster: cluster, render.LabelManagedBy: render.ManagedBy,
		}}}
		st := corev1.ContainerStatus{Name: render.ContainerName, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}
		if exited {
			st.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137}}
		}
		p.Status.Phase = corev1.PodRunning
		p.Status.ContainerStatuses = []corev1.ContainerStatus{st}
		return p
	}
	tests := []struct {
		name            string
		old, new        *corev1.Pod
		wantInterrupted bool
	}{
		{"the server exits", pod("c1", false), pod("c1", true), true},
		{"a status change that is no exit", pod("c1", false), pod("c1", false), false},
		{"an exit seen before", pod("c1", true), pod("c1", true), false},
		{"another cluster's server exits", pod("c2", false), pod("c2", true), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var reads memory
			ctx, end := reads.readsBegin(context.Background(), types.NamespacedName{Namespace: "ns", Name: "c1"})
			defer end()
			q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
			defer q.ShutDown()

			newPodEvents(&reads).Update(context.Background(), event.UpdateEvent{ObjectOld: tt.old, ObjectNew: tt.new}, q)

			assert.Equal(t, tt.wantInterrupted, interrupted(ctx))
			assert.Equal(t, tt.wantInterrupted, ctx.Err() != nil)
			assert.Equal(t, 1, q.Len(), "the pod's cluster is enqueued")
		})
	}
}

// TestServerReadsEnd: reads that ended are not interrupted afterwards, and a context ended
// normally does not count as interrupted.
func TestServerReadsEnd(t *testing.T) {
	var reads memory
	key := types.NamespacedName{Namespace: "ns", Name: "c1"}
	ctx, end := reads.readsBegin(context.Background(), key)
	end()
	reads.serverExited(key)
	assert.Error(t, ctx.Err(), "ended")
	assert.False(t, interrupted(ctx))
}
