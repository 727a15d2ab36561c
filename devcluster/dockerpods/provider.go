// Package dockerpods is a virtual-kubelet provider that runs every Pod bound
// to its Node as Docker containers on the dev cluster's bridge network.
//
// It does a kubelet's job for the parts the operator relies on: the pod's
// address is chosen before the container starts (so status.podIP can be
// injected through the downward API), env and $(VAR) expansion are resolved
// here, ConfigMap/Secret/projected volumes are written to host directories,
// bind-mounted and re-synced atomically when their sources change, probes
// drive readiness, init containers run one at a time to completion before
// the app containers start, container exits are reflected (and restarted per
// the restart policy), and deletion stops containers gracefully, each after
// its preStop hook (sleep, exec, httpGet) as a kubelet runs it.
package dockerpods

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/moby/moby/client"
	"github.com/virtual-kubelet/virtual-kubelet/errdefs"
	"github.com/virtual-kubelet/virtual-kubelet/log"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	corev1listers "k8s.io/client-go/listers/core/v1"

	"github.com/gomomento/valkey-operator/devcluster/dockernet"
	"github.com/gomomento/valkey-operator/devcluster/ipam"
)

// Shared is the state every Node of one process shares.
type Shared struct {
	Docker   *client.Client
	Instance string
	Network  dockernet.Network
	IPs      *ipam.Allocator
	// PodsDir holds one directory per pod for its volumes.
	PodsDir string
	// Kube is used when a lister has not seen an object yet, and for
	// service-account token requests.
	Kube kubernetes.Interface
	// FallbackImage replaces any image that is not present locally.
	FallbackImage string
	// FallbackByMajor picks a fallback by the major version in the wanted
	// image's tag (e.g. "9" -> the locally built Valkey 9 image) when present.
	FallbackByMajor map[string]string
	// ResyncPeriod is how often ConfigMap/Secret volumes are compared with
	// their sources.
	ResyncPeriod time.Duration
	// APIServer is the API server's address on the pod network, given to every
	// container as KUBERNETES_SERVICE_HOST/PORT (see podenv.Facts).
	APIServer netip.AddrPort
	// FinishResize, when set, completes a pending expansion of a claim's volume
	// before the volume is mounted, as a kubelet's NodeExpand does (see
	// hostvolumes.Config.FinishResize).
	FinishResize func(context.Context, *corev1.PersistentVolumeClaim, *corev1.PersistentVolume) error
}

// Provider runs the pods of one Node.
type Provider struct {
	shared   *Shared
	nodeName string
	apiPods  corev1listers.PodLister // the node's pods as the API server has them
	cms      corev1listers.ConfigMapLister
	secrets  corev1listers.SecretLister

	mu     sync.Mutex
	pods   map[string]*podState
	notify func(*corev1.Pod)
	ready  chan struct{} // closed once notify is set
}

// New returns the provider of node nodeName. pods lists the node's pods as
// the API server has them (virtual-kubelet's pod informer, see WatchPods).
func New(shared *Shared, nodeName string, pods corev1listers.PodLister, cms corev1listers.ConfigMapLister, secrets corev1listers.SecretLister) *Provider {
	return &Provider{shared: shared, nodeName: nodeName, apiPods: pods, cms: cms, secrets: secrets, pods: map[string]*podState{}, ready: make(chan struct{})}
}

// Run re-syncs volumes until ctx ends.
func (p *Provider) Run(ctx context.Context) {
	period := p.shared.ResyncPeriod
	if period <= 0 {
		period = time.Second
	}
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		for _, st := range p.snapshot() {
			if err := p.syncVolumes(ctx, st); err != nil {
				log.G(ctx).WithField("pod", st.key).WithError(err).Warn("volume resync failed")
			}
		}
	}, period)
}

func (p *Provider) snapshot() []*podState {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]*podState, 0, len(p.pods))
	for _, st := range p.pods {
		out = append(out, st)
	}
	return out
}

// NotifyPods implements node.PodNotifier.
func (p *Provider) NotifyPods(_ context.Context, f func(*corev1.Pod)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.notify = f
	close(p.ready)
}

// publish hands the pod's current status to the node controller. The
// snapshot and the hand-over happen under the pod's publish lock, so
// notifications reach the controller in the order their snapshots were
// taken. Without it, a publisher that read "not ready" could hand its copy
// over after a probe published "ready"; the controller keeps the last copy
// it got, and the probe, seeing no further change, never publishes again,
// so the pod stayed 0/1 for good.
func (p *Provider) publish(st *podState) {
	<-p.ready
	st.pubMu.Lock()
	defer st.pubMu.Unlock()
	p.notify(st.snapshot())
}

func podKey(ns, name string) string { return ns + "/" + name }

// CreatePod registers the pod and starts it in the background. Like a
// kubelet, the provider keeps retrying a pod that cannot start yet (a
// missing ConfigMap or Secret, say) and reports why in the container's
// waiting state, instead of failing the pod.
func (p *Provider) CreatePod(ctx context.Context, pod *corev1.Pod) error {
	key := podKey(pod.Namespace, pod.Name)
	p.mu.Lock()
	defer p.mu.Unlock()
	if old, ok := p.pods[key]; ok {
		if old.pod.UID == pod.UID {
			return nil
		}
		// A new pod of the same name while its predecessor still runs or stops here: the
		// old one was deleted from the API server at once and the name taken again (a
		// durable node restarted on its volume), and virtual-kubelet, whose queue is keyed
		// by name, may never have told this provider to delete it. Like a kubelet, stop
		// the old pod and start the new one once it is gone: refused until then, the
		// creation is retried by virtual-kubelet. Taken as done, it was never started
		// (Pending for good, the old pod's status retried against the new one).
		go func() { _ = p.DeletePod(context.WithoutCancel(ctx), old.snapshot()) }()
		return fmt.Errorf("pod %s: its predecessor (UID %s) is still stopping", key, old.pod.UID)
	}
	if err := unsupported(pod); err != nil {
		return err
	}
	ip, err := p.podIP(pod)
	if err != nil {
		return err
	}
	st := newPodState(key, pod.DeepCopy(), ip, p.shared.Network.Gateway, filepath.Join(p.shared.PodsDir, string(pod.UID)))
	st.keepInitialized(pod.Status)
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	st.cancel = cancel
	p.pods[key] = st
	go p.startPod(runCtx, st)
	go func() {
		// The pod's status may have changed on the API server since the
		// copy CreatePod got, before st was there for WatchPods to update.
		p.refreshForeign(st)
		p.publish(st)
	}()
	return nil
}

// podIP keeps the address a pod already reports (the nodes process was
// restarted; its emptyDir data is kept too, so a Valkey node rejoins under
// its old address) and allocates a new one otherwise.
func (p *Provider) podIP(pod *corev1.Pod) (netip.Addr, error) {
	if old, err := netip.ParseAddr(pod.Status.PodIP); err == nil {
		if p.shared.IPs.Reserve(old, string(pod.UID)) == nil {
			return old, nil
		}
	}
	return p.shared.IPs.Allocate(string(pod.UID))
}

// startPod runs the init containers, then prepares volumes and starts the
// app containers, retrying with a capped back-off until it works or the pod
// is deleted.
func (p *Provider) startPod(ctx context.Context, st *podState) {
	defer close(st.startDone)
	if !p.runInitContainers(ctx, st) {
		return
	}
	backoff := 200 * time.Millisecond
	for {
		err := p.tryStart(ctx, st)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			break
		}
		log.G(ctx).WithField("pod", st.key).WithError(err).Warn("pod cannot start yet; retrying")
		if st.update(func() {
			for _, c := range st.ctrs {
				c.state = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CreateContainerConfigError", Message: err.Error()}}
			}
		}) {
			p.publish(st)
		}
		if !sleepCtx(ctx, backoff) {
			return
		}
		backoff = min(backoff*2, 5*time.Second)
	}
	for i := range st.ctrs {
		ctrCtx, stop := context.WithCancel(ctx)
		st.mu.Lock()
		st.ctrs[i].stop = stop
		st.mu.Unlock()
		go p.superviseContainer(ctrCtx, st, i)
	}
	p.publish(st)
	log.G(ctx).WithField("pod", st.key).WithField("ip", st.ip.String()).Info("pod started")
}

// tryStart makes one attempt; on failure it removes what it created.
func (p *Provider) tryStart(ctx context.Context, st *podState) (err error) {
	defer func() {
		if err != nil || ctx.Err() != nil {
			for _, c := range st.ctrs {
				_ = p.removeContainer(context.WithoutCancel(ctx), st, c, 0)
			}
			st.mu.Lock()
			st.startTime = nil
			st.mu.Unlock()
		}
	}()
	if err := p.syncVolumes(ctx, st); err != nil {
		return err
	}
	for _, c := range st.ctrs {
		if err := p.createContainer(ctx, st, c); err != nil {
			return err
		}
	}
	now := metav1.Now()
	st.mu.Lock()
	st.startTime = &now
	st.mu.Unlock()
	for _, c := range st.ctrs {
		if err := p.startContainer(ctx, st, c); err != nil {
			return err
		}
	}
	return ctx.Err()
}

// UpdatePod records the new metadata; the fields a pod update may change
// (labels, annotations, images) do not require restarting containers here
// except images, which are rolled by recreating the container.
func (p *Provider) UpdatePod(ctx context.Context, pod *corev1.Pod) error {
	st := p.get(pod.Namespace, pod.Name)
	if st == nil {
		return errdefs.NotFoundf("pod %s/%s not found", pod.Namespace, pod.Name)
	}
	st.mu.Lock()
	old := st.pod
	st.pod = pod.DeepCopy()
	st.mu.Unlock()
	for i := range pod.Spec.Containers {
		// A container not created yet (init containers still running) will
		// be created from the new spec.
		if id, _ := st.container(i); id == "" {
			continue
		}
		if i < len(old.Spec.Containers) && old.Spec.Containers[i].Image != pod.Spec.Containers[i].Image {
			log.G(ctx).WithField("pod", st.key).Infof("image of %s changed, restarting it", pod.Spec.Containers[i].Name)
			if err := p.stopContainer(ctx, st, i, gracePeriod(pod)); err != nil {
				return err
			}
		}
	}
	go p.publish(st)
	return nil
}

// DeletePod stops the pod's containers gracefully in the background, as a
// kubelet does: each container's preStop hook, then SIGTERM, then SIGKILL
// once the grace period is over. The terminal status is published when they
// are gone, which lets virtual-kubelet remove the pod.
func (p *Provider) DeletePod(ctx context.Context, pod *corev1.Pod) error {
	st := p.get(pod.Namespace, pod.Name)
	if st == nil || string(st.pod.UID) != string(pod.UID) {
		return errdefs.NotFoundf("pod %s/%s not found", pod.Namespace, pod.Name)
	}
	st.mu.Lock()
	if st.deleting {
		st.mu.Unlock()
		return nil
	}
	st.deleting = true
	st.pod.DeletionTimestamp = pod.DeletionTimestamp
	st.pod.DeletionGracePeriodSeconds = pod.DeletionGracePeriodSeconds
	st.mu.Unlock()
	grace := deletionGrace(pod)
	go func() {
		ctx := context.WithoutCancel(ctx)
		p.cleanup(ctx, st, grace)
		p.mu.Lock()
		if p.pods[st.key] == st {
			delete(p.pods, st.key)
		}
		p.mu.Unlock()
		p.publish(st)
		// Like a kubelet, finish the deletion once the containers are gone
		// instead of leaving the pod Terminating until the grace period
		// ends (virtual-kubelet's fallback).
		zero := int64(0)
		err := p.shared.Kube.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
			GracePeriodSeconds: &zero, Preconditions: &metav1.Preconditions{UID: &pod.UID},
		})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			log.G(ctx).WithField("pod", st.key).WithError(err).Warn("final pod deletion")
		}
		log.G(ctx).WithField("pod", st.key).Info("pod deleted")
	}()
	return nil
}

// cleanup stops and removes the pod's containers, each after its preStop
// hook, and frees its address and directory.
func (p *Provider) cleanup(ctx context.Context, st *podState, grace int) {
	select {
	case <-st.startDone:
	default:
		// Still starting (or retrying, or running init containers): stop
		// trying. Whatever was created gets stopped below, without hooks as
		// nothing ran yet; a running init container gets the grace period.
		st.cancel()
		<-st.startDone
	}
	// No container gets created after this.
	var wg sync.WaitGroup
	for i := range st.ctrs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := p.killContainer(ctx, st, i, grace); err != nil {
				log.G(ctx).WithField("pod", st.key).WithError(err).Warn("remove container")
			}
		}()
	}
	for _, c := range st.inits {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := p.removeContainer(ctx, st, c, stopTimeout(grace, 0)); err != nil {
				log.G(ctx).WithField("pod", st.key).WithError(err).Warn("remove init container")
			}
		}()
	}
	wg.Wait()
	st.cancel()
	p.shared.IPs.Release(st.ip)
	_ = os.RemoveAll(st.dir)
}

func gracePeriod(pod *corev1.Pod) int {
	switch {
	case pod.DeletionGracePeriodSeconds != nil:
		return int(*pod.DeletionGracePeriodSeconds)
	case pod.Spec.TerminationGracePeriodSeconds != nil:
		return int(*pod.Spec.TerminationGracePeriodSeconds)
	}
	return 30
}

func (p *Provider) get(ns, name string) *podState {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pods[podKey(ns, name)]
}

// GetPod implements node.PodLifecycleHandler.
//
// A pod the API server now has under another UID (its name taken again) is not found:
// virtual-kubelet compares what GetPod returns with the API's pod by spec, not by UID, and
// would otherwise take the new pod as running already (CreatePod stops the old one).
func (p *Provider) GetPod(_ context.Context, ns, name string) (*corev1.Pod, error) {
	st := p.get(ns, name)
	if st == nil || p.replaced(st) {
		return nil, errdefs.NotFoundf("pod %s/%s not found", ns, name)
	}
	return st.snapshot(), nil
}

// replaced reports whether the API server has st's pod under another UID.
func (p *Provider) replaced(st *podState) bool {
	if p.apiPods == nil {
		return false
	}
	api, err := p.apiPods.Pods(st.pod.Namespace).Get(st.pod.Name)
	return err == nil && api.UID != st.pod.UID
}

// GetPodStatus implements node.PodLifecycleHandler.
func (p *Provider) GetPodStatus(ctx context.Context, ns, name string) (*corev1.PodStatus, error) {
	pod, err := p.GetPod(ctx, ns, name)
	if err != nil {
		return nil, err
	}
	return &pod.Status, nil
}

// GetPods implements node.PodLifecycleHandler.
func (p *Provider) GetPods(context.Context) ([]*corev1.Pod, error) {
	var out []*corev1.Pod
	for _, st := range p.snapshot() {
		out = append(out, st.snapshot())
	}
	return out, nil
}

// PodIP returns the address of a running pod, for tests.
func (p *Provider) PodIP(ns, name string) (netip.Addr, bool) {
	st := p.get(ns, name)
	if st == nil {
		return netip.Addr{}, false
	}
	return st.ip, true
}
