package dockerpods

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/virtual-kubelet/virtual-kubelet/errdefs"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1listers "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

// TestNameTakenAgainWhileThePredecessorStops: the API server has a pod under a new UID while
// the provider still holds (and stops) the old pod of that name. GetPod does not offer the old
// pod for the new one, and CreatePod refuses until the old one is gone, so virtual-kubelet
// retries; the same UID is still accepted as already running.
func TestNameTakenAgainWhileThePredecessorStops(t *testing.T) {
	pod := func(uid string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "node-1", UID: types.UID(uid)}}
	}
	api := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	require.NoError(t, api.Add(pod("new")))
	p := New(&Shared{}, "devnode-1", corev1listers.NewPodLister(api), nil, nil)
	// Stopping already (deleting), so CreatePod's stop of it has nothing more to do.
	p.pods[podKey("ns", "node-1")] = &podState{key: podKey("ns", "node-1"), pod: pod("old"), deleting: true}

	_, err := p.GetPod(context.Background(), "ns", "node-1")
	assert.True(t, errdefs.IsNotFound(err), "the old pod is not offered for the new one: %v", err)
	err = p.CreatePod(context.Background(), pod("new"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), `pod ns/node-1: its predecessor (UID old) is still stopping`)

	require.NoError(t, api.Update(pod("old")))
	got, err := p.GetPod(context.Background(), "ns", "node-1")
	require.NoError(t, err, "the API server's own pod is found")
	assert.Equal(t, types.UID("old"), got.UID)
	assert.NoError(t, p.CreatePod(context.Background(), pod("old")), "the same pod again: already running")
}
