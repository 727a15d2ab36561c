package dockerpods

import (
	"math/rand/v2"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The node controller keeps the last status it was handed. Concurrent
// publishers (a probe turning a container ready while the pod start
// publishes) must therefore hand their copies over in the order they were
// taken, or a stale "not ready" can be the last word for good.
func TestPublishHandsOverTheLatestStatusLast(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}}}
	for round := 0; round < 200; round++ {
		st := newPodState("ns/p", pod.DeepCopy(), netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("10.0.0.1"), t.TempDir())
		var mu sync.Mutex
		var last int32
		p := &Provider{ready: make(chan struct{})}
		p.NotifyPods(t.Context(), func(got *corev1.Pod) {
			// The controller compares before it stores; vary how long that takes.
			time.Sleep(time.Duration(rand.IntN(100)) * time.Microsecond)
			mu.Lock()
			defer mu.Unlock()
			last = got.Status.ContainerStatuses[0].RestartCount
		})
		var wg sync.WaitGroup
		for i := int32(1); i <= 8; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				st.update(func() { st.ctrs[0].restarts = max(st.ctrs[0].restarts, i) })
				p.publish(st)
			}()
		}
		wg.Wait()
		require.Equal(t, int32(8), st.snapshot().Status.ContainerStatuses[0].RestartCount)
		if !assert.Equal(t, int32(8), last, "round %d: the last status handed over is stale", round) {
			return
		}
	}
}
