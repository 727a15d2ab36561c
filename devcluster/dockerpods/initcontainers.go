package dockerpods

import (
	"context"
	"time"

	"github.com/virtual-kubelet/virtual-kubelet/log"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Init containers, as a kubelet runs them: one at a time, in spec order,
// each to completion before the next starts and before any app container is
// created. Each is an ordinary container of the pod (createContainer,
// startContainer, waitExit, recordExit): same env, volumes, security context
// and limits as app containers. A failure fails the pod under restartPolicy
// Never; otherwise the container is started again after a back-off, as app
// containers are. The phase and conditions that follow are in phase.go.

// runInitContainers runs the init containers that have not completed yet and
// reports whether the app containers may start: false when one failed for
// good, the pod is being deleted, or ctx ended. Containers it leaves are
// removed by the pod's cleanup.
func (p *Provider) runInitContainers(ctx context.Context, st *podState) bool {
	for _, c := range st.inits {
		st.mu.Lock()
		done := completed(c.state)
		st.mu.Unlock()
		if done {
			continue
		}
		if !p.runInit(ctx, st, c) {
			return false
		}
	}
	return true
}

// runInit creates init container c and runs it until it completes (true) or
// fails for good, the pod is deleted, or ctx ends (false).
func (p *Provider) runInit(ctx context.Context, st *podState, c *ctrState) bool {
	if !p.createInit(ctx, st, c) {
		return false
	}
	backoff := time.Second
	for attempt := 0; ; attempt++ {
		if st.isDeleting() {
			return false
		}
		st.update(func() {
			if st.initStart == nil {
				now := metav1.Now()
				st.initStart = &now
			}
		})
		if err := p.startContainer(ctx, st, c); err != nil {
			if ctx.Err() != nil {
				return false
			}
			log.G(ctx).WithField("pod", st.key).WithError(err).Warn("start init container")
		} else {
			if attempt > 0 {
				st.update(func() { c.restarts++ })
			}
			p.publish(st)
			term, ok := p.waitExit(ctx, st, c)
			if !ok {
				return false
			}
			restart := p.recordExit(ctx, st, c, term, backoff)
			if term.ExitCode == 0 {
				p.publish(st) // Initialized may have turned True
				return true
			}
			if !restart {
				return false
			}
		}
		if !sleepCtx(ctx, backoff) {
			return false
		}
		backoff = min(backoff*2, 30*time.Second)
	}
}

// createInit prepares the pod's volumes and creates init container c,
// retrying with a capped back-off while it cannot (a missing ConfigMap or
// Secret, say), as startPod does for app containers, with the reason in c's
// waiting state.
func (p *Provider) createInit(ctx context.Context, st *podState, c *ctrState) bool {
	backoff := 200 * time.Millisecond
	for {
		if st.isDeleting() {
			return false
		}
		err := p.syncVolumes(ctx, st)
		if err == nil {
			err = p.createContainer(ctx, st, c)
		}
		if ctx.Err() != nil {
			return false
		}
		if err == nil {
			return true
		}
		log.G(ctx).WithField("pod", st.key).WithError(err).Warnf("init container %s cannot start yet; retrying", c.name)
		if st.update(func() {
			c.state = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CreateContainerConfigError", Message: err.Error()}}
		}) {
			p.publish(st)
		}
		if !sleepCtx(ctx, backoff) {
			return false
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

// keepInitialized takes over, from the pod's status as the API server has
// it, the init containers' final states when they all completed before (see
// initializedBefore), so that they are not run again.
func (st *podState) keepInitialized(api corev1.PodStatus) {
	pod := &corev1.Pod{Spec: st.pod.Spec, Status: api}
	done := initializedBefore(pod)
	if done == nil {
		return
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	for i, s := range done {
		c := st.inits[i]
		c.state, c.last, c.restarts, c.imageID = s.State, s.LastTerminationState, s.RestartCount, s.ImageID
	}
	st.initStart = api.StartTime
	for _, c := range st.ctrs {
		c.state = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}
	}
}
