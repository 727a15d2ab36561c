package reconciler

import (
	"context"
	"crypto/x509"

	"github.com/gomomento/valkey-operator/reconciler/views"
	"github.com/gomomento/valkey-operator/valkeyops/model"
	ctrl "sigs.k8s.io/controller-runtime"
)

// Reads is the port of the reads a pass makes of the servers; none changes anything.
type Reads interface {
	// Observe snapshots every node's own view; unreachable nodes are in it, never dropped.
	Observe(ctx context.Context, nodes []model.Node) (*model.Snapshot, error)
	// ReadAuth reads each node's ACL users and replication login; a node that cannot be
	// read is reported in its state.
	ReadAuth(ctx context.Context, nodes []model.Node) ([]model.AuthState, error)
	// ServedCertificate is the certificate node presents in a TLS handshake (a read, no
	// command), checked against the cluster CA but not for expiry.
	ServedCertificate(ctx context.Context, node model.Node) (*x509.Certificate, error)
}

// observe snapshots the members (read-only, bounded by observeTimeout) into p.snapshot and
// records each reachable server's ID, role and pod IP on its ValkeyNode, writing only what
// changed.
func (r *Reconciler) observe(ctx context.Context, p *pass) *outcome {
	rctx, end := r.beginReads(ctx, p)
	defer end()
	octx, cancel := context.WithTimeout(rctx, observeTimeout)
	defer cancel()
	snap, err := p.valkey.Reads.Observe(octx, p.members)
	if interrupted(rctx) {
		return r.cutShort(p)
	}
	if err != nil {
		r.warn(p, ReasonObserveFailed, "Observe", "observing the cluster failed: "+err.Error())
		return done(ctrl.Result{RequeueAfter: r.opts.PollInterval}, nil)
	}
	r.clearWarning(p, ReasonObserveFailed)
	p.snapshot = snap
	for _, n := range p.nodes {
		s, pod := snap.ByName(n.Name()), p.pods[n.Name()]
		if s == nil || !s.Reachable || s.ID == "" || pod == nil {
			continue
		}
		if err := r.setNodeStatus(ctx, n, func(st *views.NodeStatus) {
			st.NodeID, st.Role, st.PodIP = s.ID, string(s.Role), pod.Status.PodIP
		}); err != nil {
			return done(ctrl.Result{}, err)
		}
	}
	return nil
}

// cutShort ends a pass whose reads a server's exit interrupted (interrupt.go): the next pass
// plans from the cache that shows the exit.
func (r *Reconciler) cutShort(p *pass) *outcome {
	p.log.V(1).Info("reads cut short", "reason", errServerExited)
	return done(ctrl.Result{RequeueAfter: nextActionDelay}, nil)
}
