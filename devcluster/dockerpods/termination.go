package dockerpods

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/client"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// terminatedState reads how container id ended, as a kubelet reports it.
func (p *Provider) terminatedState(ctx context.Context, id string) *corev1.ContainerStateTerminated {
	term := &corev1.ContainerStateTerminated{ContainerID: "docker://" + id, Reason: "Error", FinishedAt: metav1.Now()}
	ins, err := p.shared.Docker.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if err != nil || ins.Container.State == nil {
		term.ExitCode = 137
		return term
	}
	s := ins.Container.State
	term.ExitCode = int32(s.ExitCode)
	if t, err := time.Parse(time.RFC3339Nano, s.StartedAt); err == nil {
		term.StartedAt = metav1.NewTime(t)
	}
	if t, err := time.Parse(time.RFC3339Nano, s.FinishedAt); err == nil {
		term.FinishedAt = metav1.NewTime(t)
	}
	switch {
	case s.OOMKilled:
		term.Reason = "OOMKilled"
	case s.ExitCode == 0:
		term.Reason = "Completed"
	}
	term.Message = s.Error
	return term
}

// Limits of a termination message taken from the logs, as a kubelet's.
const (
	terminationLogLines = 80
	terminationLogBytes = 2048
)

// fallbackToLogs fills term's message, when container c's terminationMessagePolicy is
// FallbackToLogsOnError and it failed without one, with the tail of its output, as a
// kubelet does: what a program that dies at start-up printed is then in the pod's status.
func (p *Provider) fallbackToLogs(ctx context.Context, st *podState, c *ctrState, term *corev1.ContainerStateTerminated) {
	st.mu.Lock()
	policy := c.specIn(st.pod).TerminationMessagePolicy
	st.mu.Unlock()
	if policy != corev1.TerminationMessageFallbackToLogsOnError || term.ExitCode == 0 || term.Message != "" {
		return
	}
	id := strings.TrimPrefix(term.ContainerID, "docker://")
	logs, err := p.shared.Docker.ContainerLogs(ctx, id, client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true, Tail: strconv.Itoa(terminationLogLines)})
	if err != nil {
		return
	}
	defer logs.Close()
	var out bytes.Buffer
	if _, err := stdcopy.StdCopy(&out, &out, logs); err != nil && out.Len() == 0 {
		return
	}
	b := out.Bytes()
	term.Message = string(b[max(0, len(b)-terminationLogBytes):])
}
