package dockerpods

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	corev1listers "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

// This file keeps the provider in step with the pod status others write.
//
// virtual-kubelet (v1.14.1) calls UpdatePod only when a pod's spec, labels,
// annotations or deletion change; a status PATCH by someone else (an
// operator setting a readiness gate's condition, the eviction API setting
// DisruptionTarget) reaches no provider method. And it writes the status the
// provider last published with a whole-status UpdateStatus, under the
// resourceVersion of its informer's copy: whatever condition that status
// lacks is dropped. So the provider
//   - watches the same pod informer (WatchPods) and, on every change of one
//     of its pods, re-reads the conditions others own and re-publishes if its
//     computed status (Ready, through the gates) changed, as a kubelet's
//     status manager re-syncs when its pod changes;
//   - has its status writes go through KeepForeignConditions, which puts the
//     API copy's foreign conditions into the written status, under that same
//     copy's resourceVersion: if the API server has moved on since, the write
//     is refused (Conflict) and virtual-kubelet retries, so a foreign
//     condition is never overwritten with an older value.

// WatchPods has the provider follow status changes others make to its pods
// through inf, the informer its pod lister (see New) reads. It must be
// called before the informer starts handing out events to be sure to see all
// of them (nodeutil.WithPodControllerConfigOverrides is such a place).
func (p *Provider) WatchPods(inf cache.SharedIndexInformer) error {
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, obj any) { p.apiPodChanged(obj) },
	})
	return err
}

// apiPodChanged re-publishes a pod whose computed status changed with what
// the API server now has. The provider's own status writes come back here
// too; they change nothing it computes, so they publish nothing, which is
// what keeps this from looping.
func (p *Provider) apiPodChanged(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	st := p.get(pod.Namespace, pod.Name)
	if st == nil || st.uid() != pod.UID {
		return
	}
	if p.refreshForeign(st) {
		go p.publish(st) // not on the informer's goroutine: publishing may wait
	}
}

// refreshForeign copies the conditions others own from the pod lister's
// copy of st's pod and reports whether that changed st's status. The lister
// is read under st's lock, so concurrent refreshes store copies in the order
// they read them and a newer copy is never replaced by an older one.
func (p *Provider) refreshForeign(st *podState) bool {
	if p.apiPods == nil {
		return false
	}
	return st.update(func() {
		api, err := p.apiPods.Pods(st.pod.Namespace).Get(st.pod.Name)
		if err != nil || api.UID != st.pod.UID {
			return
		}
		st.foreign = foreignConditions(api.Status.Conditions)
	})
}

func (st *podState) uid() types.UID {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.pod.UID
}

// KeepForeignConditions wraps the pod controller's client so that every
// status it writes keeps the conditions others own as pods (the informer's
// lister of the node's pods) has them. See the comment at the top of this
// file for why the write cannot lose a newer foreign condition.
func KeepForeignConditions(client corev1client.PodsGetter, pods corev1listers.PodLister) corev1client.PodsGetter {
	return foreignKeeper{PodsGetter: client, api: pods}
}

type foreignKeeper struct {
	corev1client.PodsGetter
	api corev1listers.PodLister
}

func (k foreignKeeper) Pods(ns string) corev1client.PodInterface {
	return statusWriter{PodInterface: k.PodsGetter.Pods(ns), api: k.api.Pods(ns)}
}

// statusWriter is a PodInterface whose UpdateStatus merges with the API copy.
type statusWriter struct {
	corev1client.PodInterface
	api corev1listers.PodNamespaceLister
}

func (w statusWriter) UpdateStatus(ctx context.Context, pod *corev1.Pod, opts metav1.UpdateOptions) (*corev1.Pod, error) {
	api, err := w.api.Get(pod.Name)
	if err != nil {
		api = nil // not in the informer (yet): nothing to keep
	}
	return w.PodInterface.UpdateStatus(ctx, statusToWrite(pod, api), opts)
}

// statusToWrite is pod (the provider's status) with the foreign conditions
// of api, the API server's copy, and api's resourceVersion, so that the
// write only succeeds if api is still current. A write without a
// resourceVersion (virtual-kubelet's unconditional one, reporting a
// provider error) stays unconditional.
func statusToWrite(pod, api *corev1.Pod) *corev1.Pod {
	if api == nil || api.UID != pod.UID {
		return pod
	}
	out := pod.DeepCopy()
	out.Status.Conditions = withForeignConditions(pod.Status.Conditions, api.Status.Conditions)
	if out.ResourceVersion != "" {
		out.ResourceVersion = api.ResourceVersion
	}
	return out
}
