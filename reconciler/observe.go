package reconciler

import (
	"context"
	"crypto/x509"
	"slices"

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
	// AvailabilityZone reads node's availability-zone setting ("" when unset;
	// model.ErrUnsupported for a release without it).
	AvailabilityZone(ctx context.Context, node model.Node) (string, error)
	// ClientAnnounce reads the client address node announces (announce.go).
	ClientAnnounce(ctx context.Context, node model.Node) (model.ClientAddress, error)
}

// observation is what one pass read of the servers: one read under one deadline
// (observeTimeout), interrupted as a whole when a server exits (interrupt.go). Every planner
// of the pass (topology, credentials, certificates) plans from it; none reads the servers
// again before it acts. It is not changed once read.
type observation struct {
	// snapshot is every member's own view: topology, replication, health.
	snapshot *model.Snapshot
	// auth is each member's users and replication login, read against credentialInputs; that
	// is "" when they were not read this pass: they were found converged on the same inputs a
	// moment ago (credcheck.go), or the cluster has no ACL yet. authErr is a failure of the
	// read as a whole (a node that cannot be read is reported in its own state instead).
	auth             []model.AuthState
	authErr          error
	credentialInputs string
	// certs is the certificate each member serves, by name; nil without TLS.
	certs map[string]servedCertificate
	// zones is the availability-zone setting of the members read for it (zones.go), by
	// name; only servers the memory does not know are read.
	zones map[string]setting[string]
	// announces is the client address of the members read for it (announce.go), by name.
	announces map[string]setting[model.ClientAddress]
}

// setting is one server's value of a setting as read, or why it could not be.
type setting[T any] struct {
	value T
	err   error
}

// readReached reads a setting of each named member the snapshot reached, all at once. One it
// did not reach is not dialled again (as in readAuth: a dark zone's connections hang until
// the deadline); it is read on a later pass.
func readReached[T any](ctx context.Context, members []model.Node, names []string, snap *model.Snapshot, read func(context.Context, model.Node) (T, error)) map[string]setting[T] {
	var nodes []model.Node
	for _, m := range members {
		if st := snap.ByName(m.Name); st != nil && st.Reachable && slices.Contains(names, m.Name) {
			nodes = append(nodes, m)
		}
	}
	got := make([]setting[T], len(nodes))
	_ = inParallel(len(nodes), func(i int) error {
		got[i].value, got[i].err = read(ctx, nodes[i])
		return nil
	})
	out := make(map[string]setting[T], len(nodes))
	for i, n := range nodes {
		out[n.Name] = got[i]
	}
	return out
}

// servedCertificate is the certificate a node presented, or why none could be read.
type servedCertificate struct {
	cert *x509.Certificate
	err  error
}

// observe reads the members (read-only, bounded by observeTimeout) into p.seen and records
// each reachable server's ID, role and pod IP on its ValkeyNode, writing only what changed.
func (r *Reconciler) observe(ctx context.Context, p *pass, want reading) *outcome {
	rctx, end := r.beginReads(ctx, p)
	defer end()
	octx, cancel := context.WithTimeout(rctx, observeTimeout)
	defer cancel()
	seen := &observation{}
	snap, err := p.valkey.Reads.Observe(octx, p.members)
	if err == nil {
		seen.snapshot = snap
		if want.credentials != "" {
			seen.credentialInputs = want.credentials
			seen.auth, seen.authErr = readAuth(octx, p.valkey.Reads, p.members, snap)
		}
		if want.certificates {
			seen.certs = readCertificates(octx, p.valkey.Reads, p.members)
		}
		if len(want.zones) > 0 {
			seen.zones = readReached(octx, p.members, want.zones, snap, p.valkey.Reads.AvailabilityZone)
		}
		if len(want.announces) > 0 {
			seen.announces = readReached(octx, p.members, want.announces, snap, p.valkey.Reads.ClientAnnounce)
		}
	}
	if interrupted(rctx) {
		return r.cutShort(p)
	}
	if err != nil {
		p.raise(ReasonObserveFailed, "Observe", "observing the cluster failed: "+err.Error())
		return done(ctrl.Result{RequeueAfter: r.opts.PollInterval}, nil)
	}
	p.settle(ReasonObserveFailed)
	p.seen = seen
	for _, n := range p.nodes {
		s, pod := snap.ByName(n.Name()), p.pods[n.Name()]
		if s == nil || !s.Reachable || s.ID == "" || pod == nil {
			continue
		}
		if err := r.setNodeStatus(ctx, n, func(st *views.NodeStatus) {
			st.Role, st.PodIP = string(s.Role), pod.Status.PodIP
			// A durable node's identity is the one it first had: a server back on its
			// volume with another ID lost its nodes.conf, and the planner must see that.
			if st.NodeID == "" || !n.Spec().Persistence.Durable() {
				st.NodeID = s.ID
			}
			if s.ID == st.NodeID {
				st.FailedStarts = 0
			}
		}); err != nil {
			return done(ctrl.Result{}, err)
		}
	}
	return nil
}

// snapshot is the servers' own views as this pass observed them; nil before observe.
func (p *pass) snapshot() *model.Snapshot {
	if p.seen == nil {
		return nil
	}
	return p.seen.snapshot
}

// readAuth reads the users and replication login of every member the snapshot reached. A
// member it did not reach is reported as unread without being dialled again: when a zone
// goes dark, its servers' connections hang until a deadline, and a second wait on them here
// would hold the pass that fails their slots over.
func readAuth(ctx context.Context, reads Reads, members []model.Node, snap *model.Snapshot) ([]model.AuthState, error) {
	var reached []model.Node
	var unread []model.AuthState
	for _, n := range members {
		st := snap.ByName(n.Name)
		switch {
		case st != nil && st.Reachable:
			reached = append(reached, n)
		case st != nil && st.Err != nil:
			unread = append(unread, model.AuthState{Node: n, Err: st.Err})
		default:
			unread = append(unread, model.AuthState{Node: n, Err: model.ErrUnreachable})
		}
	}
	held, err := reads.ReadAuth(ctx, reached)
	if err != nil {
		return nil, err
	}
	return append(held, unread...), nil
}

// readCertificates reads the certificate every member serves, all at once. Every member is
// read, whether the snapshot reached it or not: one that refuses the operator's client
// certificate (a CA replaced in one step) still shows its own.
func readCertificates(ctx context.Context, reads Reads, members []model.Node) map[string]servedCertificate {
	got := make([]servedCertificate, len(members))
	_ = inParallel(len(members), func(i int) error {
		got[i].cert, got[i].err = reads.ServedCertificate(ctx, members[i])
		return nil
	})
	out := make(map[string]servedCertificate, len(members))
	for i, m := range members {
		out[m.Name] = got[i]
	}
	return out
}

// cutShort ends a pass whose reads a server's exit interrupted (interrupt.go): the next pass
// plans from the cache that shows the exit.
func (r *Reconciler) cutShort(p *pass) *outcome {
	p.log.V(1).Info("reads cut short", "reason", errServerExited)
	return done(ctrl.Result{RequeueAfter: nextActionDelay}, nil)
}
