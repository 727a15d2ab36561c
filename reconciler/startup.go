package reconciler

import (
	"context"
	"fmt"

	"github.com/gomomento/valkey-operator/reconciler/render"
	"github.com/gomomento/valkey-operator/valkeyops/model"
	corev1 "k8s.io/api/core/v1"
)

// reportRejectedSettings turns a server that exited at start-up on a setting it refused
// into a Warning Event naming that setting. Settings pass the CRD's checks but only Valkey
// knows every directive's arguments (`maxmemory-policy: bogus`); without this, the only trace
// would be pods that fail. The pod's terminationMessagePolicy puts valkey-server's last
// output into its status, which is where the refusal is read from.
func (r *Reconciler) reportRejectedSettings(_ context.Context, p *pass) *outcome {
	for _, n := range p.nodes {
		pod := p.pods[n.Name()]
		if pod == nil {
			continue
		}
		if rej, ok := rejectedSetting(pod); ok {
			p.raise(ReasonConfigRejected, "StartServer", fmt.Sprintf(
				"Valkey refused setting %q (from configRef %q) at start-up: %s (read as: %s); its servers exit until the ValkeyConfig is fixed",
				rej.Directive, p.cluster.ConfigRef(), rej.Reason, rej.Line))
			return nil
		}
	}
	p.settle(ReasonConfigRejected)
	return nil
}

// rejectedSetting reads the Valkey container's last termination (current or previous) for
// valkey-server's fatal configuration error.
func rejectedSetting(pod *corev1.Pod) (model.ConfigRejection, bool) {
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name != render.ContainerName {
			continue
		}
		for _, t := range []*corev1.ContainerStateTerminated{cs.State.Terminated, cs.LastTerminationState.Terminated} {
			if t != nil && t.ExitCode != 0 {
				if rej, ok := model.ParseConfigRejection(t.Message); ok {
					return rej, true
				}
			}
		}
	}
	return model.ConfigRejection{}, false
}
