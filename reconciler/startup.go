package reconciler

import (
	"context"
	"fmt"

	"github.com/gomomento/valkey-operator/reconciler/plan"
	"github.com/gomomento/valkey-operator/reconciler/render"
	"github.com/gomomento/valkey-operator/valkeyops/model"
	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
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

// replaceStoppedStale lets a forming cluster recover from a ValkeyConfig fixed after its
// servers refused it: a node whose server has stopped (its pod failed) and whose fixed spec no
// longer matches the live resolution is deleted, so ensureNodes makes a new one from the fixed
// config in the same pass. Nothing is lost: the cluster has not formed, so no node holds
// data. A stopped node whose spec is still current waits instead (the ConfigRejected Event
// says why); replacing it would only fail again.
func (r *Reconciler) replaceStoppedStale(ctx context.Context, p *pass) *outcome {
	want := map[int]string{}
	kept := p.nodes[:0:0]
	for _, n := range p.nodes {
		pod := p.pods[n.Name()]
		if pod == nil {
			kept = append(kept, n)
			continue
		}
		if _, ok := want[n.Shard()]; !ok {
			want[n.Shard()] = render.NodeSpec(p.cluster, n.Shard(), p.resolved, r.opts.Settings.DefaultZoneSpread).SpecHash
		}
		if st, _ := podState(pod); st != plan.PodGone || n.Spec().SpecHash == want[n.Shard()] {
			kept = append(kept, n)
			continue
		}
		if err := r.deleteNode(ctx, p, n); err != nil {
			return done(ctrl.Result{}, err)
		}
		r.event(p, n.U, ReasonNodeRetired, "ReplaceStoppedNode",
			"Deleted ValkeyNode %s of shard %d: its server stopped and its config has changed since; a new node takes its place", n.Name(), n.Shard())
	}
	p.nodes = kept
	return nil
}
