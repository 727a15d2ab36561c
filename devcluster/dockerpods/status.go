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
	ctrs      []*ctrState
	startTime *metav1.Time
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
	for _, c := range pod.Spec.Containers {
		st.ctrs = append(st.ctrs, &ctrState{
			name:  c.Name,
			state: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}},
		})
	}
	return st
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
	if a.Phase != b.Phase || len(a.Conditions) != len(b.Conditions) || len(a.ContainerStatuses) != len(b.ContainerStatuses) {
		return false
	}
	for i := range a.Conditions {
		x, y := a.Conditions[i], b.Conditions[i]
		if x.Type != y.Type || x.Status != y.Status || x.Reason != y.Reason || x.Message != y.Message {
			return false
		}
	}
	for i := range a.ContainerStatuses {
		x, y := a.ContainerStatuses[i], b.ContainerStatuses[i]
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
	s.Reason, s.Message = "", ""

	running, waiting := false, false
	allSucceeded := true
	s.ContainerStatuses = nil
	for _, c := range st.ctrs {
		image := c.image
		for _, sc := range st.pod.Spec.Containers {
			if sc.Name == c.name {
				image = sc.Image // report the image the pod asked for, as a kubelet would
			}
		}
		started := c.started && c.state.Running != nil
		cs := corev1.ContainerStatus{
			Name:                 c.name,
			Image:                image,
			ImageID:              c.imageID,
			Ready:                c.ready && c.state.Running != nil,
			Started:              &started,
			RestartCount:         c.restarts,
			State:                c.state,
			LastTerminationState: c.last,
		}
		if c.id != "" {
			cs.ContainerID = "docker://" + c.id
		}
		s.ContainerStatuses = append(s.ContainerStatuses, cs)
		switch {
		case c.state.Running != nil:
			running = true
		case c.state.Waiting != nil:
			waiting = true
		case c.state.Terminated != nil && c.state.Terminated.ExitCode != 0:
			allSucceeded = false
		}
	}

	switch {
	case st.deleting && !running:
		if allSucceeded && !waiting {
			s.Phase = corev1.PodSucceeded
		} else {
			s.Phase = corev1.PodFailed
		}
	case running:
		s.Phase = corev1.PodRunning
	case waiting && st.startTime != nil:
		s.Phase = corev1.PodRunning // between restarts
	case waiting:
		s.Phase = corev1.PodPending
	case allSucceeded:
		s.Phase = corev1.PodSucceeded
	default:
		s.Phase = corev1.PodFailed
	}

	ctrsReady := containersReadyCondition(s.Phase, s.ContainerStatuses)
	s.Conditions = []corev1.PodCondition{
		st.stamp(trueIf(corev1.PodReadyToStartContainers, st.startTime != nil && !st.deleting)),
		st.stamp(trueIf(corev1.PodInitialized, true)),
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
