package dockerpods

import (
	"context"
	"net/netip"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// podState is what the provider knows about one pod. mu guards every field
// that changes after creation.
type podState struct {
	key       string
	ip        netip.Addr
	hostIP    netip.Addr
	dir       string
	cancel    context.CancelFunc
	startDone chan struct{}     // closed when startPod returns
	volMu     sync.Mutex        // serialises syncVolumes
	volHash   map[string]string // volume name -> hash of the last payload written
	claimDirs map[string]string // volume name -> host directory of its claim's volume; under volMu
	pubMu     sync.Mutex        // orders status notifications (see Provider.publish)

	mu        sync.Mutex
	pod       *corev1.Pod
	inits     []*ctrState // spec.initContainers, in order
	ctrs      []*ctrState // spec.containers, in order
	startTime *metav1.Time
	initStart *metav1.Time // when the first init container was started (nil without any)
	deleting  bool
	conds     map[corev1.PodConditionType]corev1.PodCondition // last computed kubelet-owned conditions, for transition times
	tokens    map[string]cachedToken                          // projected service-account tokens by path

	// foreign are the conditions others own (readiness gates,
	// DisruptionTarget), as the API server last had them: the provider
	// reports them untouched and computes Ready from the gates among them.
	foreign []corev1.PodCondition
}

type ctrState struct {
	name     string
	init     bool // an init container: spec.initContainers[index], else spec.containers[index]
	index    int
	id       string
	stop     context.CancelFunc // ends the container's supervisor and probes
	image    string             // image actually run
	imageID  string
	started  bool // startup probe passed (or none)
	ready    bool
	restarts int32
	state    corev1.ContainerState
	last     corev1.ContainerState
}

func newPodState(key string, pod *corev1.Pod, ip, hostIP netip.Addr, dir string) *podState {
	st := &podState{key: key, pod: pod, ip: ip, hostIP: hostIP, dir: dir, volHash: map[string]string{}, claimDirs: map[string]string{}, startDone: make(chan struct{}),
		foreign: foreignConditions(pod.Status.Conditions)}
	// A kubelet reports every container of a pod with init containers as
	// waiting with reason PodInitializing until it gets to it.
	waiting := "ContainerCreating"
	if len(pod.Spec.InitContainers) > 0 {
		waiting = reasonPodInitializing
	}
	for i, c := range pod.Spec.InitContainers {
		st.inits = append(st.inits, &ctrState{name: c.Name, init: true, index: i,
			state: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: waiting}}})
	}
	for i, c := range pod.Spec.Containers {
		st.ctrs = append(st.ctrs, &ctrState{name: c.Name, index: i,
			state: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: waiting}}})
	}
	return st
}

// specIn is c's spec in pod.
func (c *ctrState) specIn(pod *corev1.Pod) *corev1.Container {
	if c.init {
		return &pod.Spec.InitContainers[c.index]
	}
	return &pod.Spec.Containers[c.index]
}

func (st *podState) isDeleting() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.deleting
}

// update runs f under the lock and reports whether the published status
// changed.
func (st *podState) update(f func()) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	before := st.statusLocked()
	f()
	after := st.statusLocked()
	return !equalStatus(before, after)
}

func equalStatus(a, b corev1.PodStatus) bool {
	if a.Phase != b.Phase || len(a.Conditions) != len(b.Conditions) {
		return false
	}
	for i := range a.Conditions {
		x, y := a.Conditions[i], b.Conditions[i]
		if x.Type != y.Type || x.Status != y.Status || x.Reason != y.Reason || x.Message != y.Message {
			return false
		}
	}
	return equalContainerStatuses(a.InitContainerStatuses, b.InitContainerStatuses) &&
		equalContainerStatuses(a.ContainerStatuses, b.ContainerStatuses)
}

func equalContainerStatuses(a, b []corev1.ContainerStatus) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if x.Ready != y.Ready || x.RestartCount != y.RestartCount || x.ContainerID != y.ContainerID ||
			stateName(x.State) != stateName(y.State) || stateName(x.LastTerminationState) != stateName(y.LastTerminationState) {
			return false
		}
	}
	return true
}

func stateName(s corev1.ContainerState) string {
	switch {
	case s.Running != nil:
		return "running"
	case s.Terminated != nil:
		return "terminated:" + s.Terminated.Reason
	case s.Waiting != nil:
		return "waiting:" + s.Waiting.Reason
	}
	return ""
}

// snapshot returns the pod with its current status.
func (st *podState) snapshot() *corev1.Pod {
	st.mu.Lock()
	defer st.mu.Unlock()
	pod := st.pod.DeepCopy()
	pod.Status = st.statusLocked()
	return pod
}

func (st *podState) statusLocked() corev1.PodStatus {
	s := *st.pod.Status.DeepCopy() // keep fields the API server owns (qosClass, ...)
	s.HostIP = st.hostIP.String()
	s.HostIPs = []corev1.HostIP{{IP: s.HostIP}}
	s.PodIP = st.ip.String()
	s.PodIPs = []corev1.PodIP{{IP: s.PodIP}}
	s.StartTime = st.startTime
	if st.initStart != nil {
		s.StartTime = st.initStart
	}
	s.Reason, s.Message = "", ""

	s.InitContainerStatuses = nil
	for _, c := range st.inits {
		s.InitContainerStatuses = append(s.InitContainerStatuses, c.statusIn(st.pod))
	}
	s.ContainerStatuses = nil
	for _, c := range st.ctrs {
		s.ContainerStatuses = append(s.ContainerStatuses, c.statusIn(st.pod))
	}
	s.Phase = podPhase(st.pod.Spec.RestartPolicy, st.deleting, st.startTime != nil, s.InitContainerStatuses, s.ContainerStatuses)

	ctrsReady := containersReadyCondition(s.Phase, s.ContainerStatuses)
	s.Conditions = []corev1.PodCondition{
		st.stamp(trueIf(corev1.PodReadyToStartContainers, (st.startTime != nil || st.initStart != nil) && !st.deleting)),
		st.stamp(initializedCondition(s.Phase, s.InitContainerStatuses, s.ContainerStatuses)),
		st.stamp(ctrsReady),
		// A kubelet keeps probing readiness while a pod terminates (its
		// preStop hooks run), so Ready follows the probes until the
		// containers stop; endpoints drop the pod because it is terminating.
		st.stamp(podReadyCondition(st.pod.Spec.ReadinessGates, ctrsReady, st.foreign)),
		st.stamp(trueIf(corev1.PodScheduled, true)),
	}
	s.Conditions = append(s.Conditions, st.foreign...)
	return s
}

// statusIn is c's status as a kubelet reports it; pod is the pod's spec.
// An init container is ready once it has completed (exit code 0), as a
// kubelet's prober manager sets it.
func (c *ctrState) statusIn(pod *corev1.Pod) corev1.ContainerStatus {
	started := c.started && c.state.Running != nil
	ready := c.ready && c.state.Running != nil
	if c.init {
		ready = completed(c.state)
	}
	cs := corev1.ContainerStatus{
		Name:                 c.name,
		Image:                c.specIn(pod).Image, // the image the pod asked for, as a kubelet reports it
		ImageID:              c.imageID,
		Ready:                ready,
		Started:              &started,
		RestartCount:         c.restarts,
		State:                c.state,
		LastTerminationState: c.last,
	}
	if c.id != "" {
		cs.ContainerID = "docker://" + c.id
	}
	return cs
}

// trueIf is a condition of type t without reason, True if ok.
func trueIf(t corev1.PodConditionType, ok bool) corev1.PodCondition {
	if ok {
		return corev1.PodCondition{Type: t, Status: corev1.ConditionTrue}
	}
	return corev1.PodCondition{Type: t, Status: corev1.ConditionFalse}
}

// stamp gives c its LastTransitionTime: that of the last computed condition
// of its type while the status holds (so that repeated snapshots of an
// unchanged pod are identical and publish nothing), now when it changed.
func (st *podState) stamp(c corev1.PodCondition) corev1.PodCondition {
	if old, ok := st.conds[c.Type]; ok && old.Status == c.Status {
		c.LastTransitionTime = old.LastTransitionTime
	} else {
		c.LastTransitionTime = metav1.Now()
	}
	if st.conds == nil {
		st.conds = map[corev1.PodConditionType]corev1.PodCondition{}
	}
	st.conds[c.Type] = c
	return c
}
