package reconciler

import (
	"context"
	"crypto/x509"
	"net"
	"strconv"

	"github.com/gomomento/valkey-operator/reconciler/render"
	"github.com/gomomento/valkey-operator/reconciler/tlscheck"
	"github.com/gomomento/valkey-operator/reconciler/views"
	"github.com/gomomento/valkey-operator/valkeyops"
	"github.com/gomomento/valkey-operator/valkeyops/model"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
)

// Valkey is the reconciler's one boundary with the Valkey servers. A pass that needs Valkey
// connects once and then calls the cluster's client; it speaks the client's own types (those
// of valkeyops/model, which the planners use too), so an operation needs no translation
// layer: adding a day-2 operation (Rebalance, Failover, Forget, ApplyACL, ReloadTLS, ...) is
// one more method on ValkeyClient, already implemented by *valkeyops.Admin. Pure functions
// (model.Health, model.RenderACL) are called directly, never through this interface, so a
// test double cannot replace them.
type Valkey interface {
	// Connect returns the client of one cluster. Implementations pool clients per cluster
	// and keep one until the credentials' Token changes.
	Connect(ctx context.Context, cluster types.NamespacedName, cred valkeyops.Credentials) (ValkeyClient, error)
	// Release drops a cluster's pooled connections (it was deleted).
	Release(cluster types.NamespacedName)
}

// ValkeyClient is what the reconciler does to one cluster's servers.
type ValkeyClient interface {
	// Bootstrap forms the cluster from nodes grouped by their Shard; idempotent.
	Bootstrap(ctx context.Context, nodes []model.Node, shards int) error
	// Settle puts nodes at their configured cluster-node-timeout with replica failover on,
	// as Bootstrap leaves them when it returns.
	Settle(ctx context.Context, nodes []model.Node) error
	// Observe snapshots every node's own view; unreachable nodes are in it, never dropped.
	Observe(ctx context.Context, nodes []model.Node) (*model.Snapshot, error)
	// Replicate makes node name a replica of its shard's slot-holding primary (MEET first).
	Replicate(ctx context.Context, nodes []model.Node, name string, shard int) error
	// Rebalance moves slots with their keys to an even share, draining the primaries named
	// in leaving; it first finishes any move an earlier run left open. It counts what it
	// moved, also when it fails part-way.
	Rebalance(ctx context.Context, nodes []model.Node, leaving []string) (valkeyops.MoveStats, error)
	// RemoveNode makes every other node forget a node that holds no slots (its pod goes next).
	RemoveNode(ctx context.Context, nodes []model.Node, name string) error
	// Failover hands a primary's slots to its best in-sync replica (graceful CLUSTER FAILOVER).
	Failover(ctx context.Context, nodes []model.Node, primary string) error
	// ForceFailover promotes a replica by a vote started at once (its primary's process has
	// exited; a majority of primaries survives to vote).
	ForceFailover(ctx context.Context, nodes []model.Node, replica string) error
	// Takeover promotes a replica without a vote (its primary is gone and too few primaries
	// survive to elect it).
	Takeover(ctx context.Context, nodes []model.Node, replica string) error
	// AssignSlots gives slots nobody owns to the empty primary name (MEET first).
	AssignSlots(ctx context.Context, nodes []model.Node, name string, slots []model.SlotRange) error
	// Forget makes every reachable node forget the given node IDs.
	Forget(ctx context.Context, nodes []model.Node, ids []string) error
	// ServedCertificate is the certificate node presents in a TLS handshake (a read, no
	// command), checked against the cluster CA but not for expiry.
	ServedCertificate(ctx context.Context, node model.Node) (*x509.Certificate, error)
	// ReloadTLS makes node re-read its certificate, key and CA files, without a restart.
	ReloadTLS(ctx context.Context, node model.Node) error
	// ReadAuth reads each node's ACL users and replication login, changing nothing; a node
	// that cannot be read is reported in its state.
	ReadAuth(ctx context.Context, nodes []model.Node) ([]model.AuthState, error)
	// ApplyACL makes the nodes' users exactly spec's, live, and verifies them.
	ApplyACL(ctx context.Context, nodes []model.Node, spec model.ACLSpec) error
	// SyncReplicationAuth sets the nodes' replication login to the one the client logs in
	// with, and verifies it.
	SyncReplicationAuth(ctx context.Context, nodes []model.Node) error
}

// PoolValkey is the production Valkey: a valkeyops.Pool keyed by cluster.
type PoolValkey struct{ Pool *valkeyops.Pool }

var _ ValkeyClient = (*valkeyops.Admin)(nil)

// Connect returns the cluster's pooled admin client.
func (v PoolValkey) Connect(ctx context.Context, cluster types.NamespacedName, cred valkeyops.Credentials) (ValkeyClient, error) {
	adm, err := v.Pool.Connect(ctx, cluster.String(), cred)
	if err != nil {
		return nil, err // never a typed nil inside the interface
	}
	return adm, nil
}

// Release closes the cluster's pooled connections.
func (v PoolValkey) Release(cluster types.NamespacedName) { v.Pool.Release(cluster.String()) }

// credentials says how the operator logs in to a cluster's servers: as its own ACL user
// with the generated password and, with TLS, verifying each server against the cluster CA
// under the Service name while presenting the cluster certificate (servers that demand
// client certificates accept the operator).
func (p *pass) credentials() valkeyops.Credentials {
	c := valkeyops.Credentials{Username: model.OperatorUser, Password: p.operatorPassword}
	if p.tlsData != nil {
		c.CA = p.tlsData[tlscheck.KeyCA]
		c.Cert = p.tlsData[tlscheck.KeyCert]
		c.Key = p.tlsData[tlscheck.KeyKey]
		c.ServerName = tlscheck.ServiceName(p.key.Name, p.key.Namespace)
	}
	return c
}

// valkeyNode is how valkeyops addresses a member: its ValkeyNode name, the pod IP on the
// client port, the shard its fixed spec assigns it, and the cluster-node-timeout its pod is
// rendered with (Bootstrap restores it).
func valkeyNode(name, podIP string, shard int) model.Node {
	return model.Node{Name: name, Addr: net.JoinHostPort(podIP, strconv.Itoa(render.ClientPort)), Shard: shard, NodeTimeoutMillis: render.NodeTimeoutMillis}
}

// connect opens (or reuses) the cluster's Valkey client for the rest of the pass. Auth is
// always on: without the operator's password nothing is dialled.
func (r *Reconciler) connect(ctx context.Context, p *pass) *outcome {
	if p.operatorPassword == "" {
		return done(ctrl.Result{RequeueAfter: r.opts.PollInterval}, nil)
	}
	c, err := r.opts.Valkey.Connect(ctx, p.key, p.credentials())
	if err != nil {
		r.warn(p, ReasonConnectFailed, "Connect", "connecting to the Valkey servers failed: "+err.Error())
		return done(ctrl.Result{RequeueAfter: r.opts.PollInterval}, nil)
	}
	r.clearWarning(p, ReasonConnectFailed)
	p.valkey = c
	return nil
}

// observe snapshots the members (read-only, bounded by observeTimeout) into p.snapshot and
// records each reachable server's ID, role and pod IP on its ValkeyNode, writing only what
// changed.
func (r *Reconciler) observe(ctx context.Context, p *pass) *outcome {
	rctx, end := r.beginReads(ctx, p)
	defer end()
	octx, cancel := context.WithTimeout(rctx, observeTimeout)
	defer cancel()
	snap, err := p.valkey.Observe(octx, p.members)
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
