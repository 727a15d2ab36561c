package reconciler

import (
	"context"
	"net"
	"strconv"

	"github.com/gomomento/valkey-operator/reconciler/render"
	"github.com/gomomento/valkey-operator/reconciler/tlscheck"
	"github.com/gomomento/valkey-operator/valkeyops"
	"github.com/gomomento/valkey-operator/valkeyops/model"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
)

// Valkey is the reconciler's one boundary with the Valkey servers. A pass that needs Valkey
// connects once and then reaches the cluster's servers through its ports (Servers).
type Valkey interface {
	// Connect returns the ports of one cluster's servers. Implementations pool clients per
	// cluster and keep one until the credentials' Token changes.
	Connect(ctx context.Context, cluster types.NamespacedName, cred valkeyops.Credentials) (*Servers, error)
	// Release drops a cluster's pooled connections (it was deleted).
	Release(cluster types.NamespacedName)
}

// Servers is one cluster's servers as the reconciler's concerns reach them. Each concern
// owns a port that names the few operations it performs, declared beside the code that calls
// it: reads (observe.go), topology and failovers (topology.go), credentials (live_acl.go),
// certificates (live_tls.go), availability zones (zones.go), client addresses (announce.go). The ports speak the model's own types (valkeyops/model, which
// the planners use too), so no translation layer sits between them. *valkeyops.Admin
// implements every port; a test double implements one port at a time. A new concern
// (persistence, backup) adds its port and a field here, never a method to another
// concern's port. Pure functions (model.Health, model.RenderACL) are called directly, never
// through a port, so a test double cannot replace them.
type Servers struct {
	Reads        Reads
	Topology     Topology
	Failovers    Failovers
	Credentials  CredentialWrites
	Certificates CertificateReload
	Membership   Membership
	Zones        ZoneWrites
	Announces    AnnounceWrites
}

// serversOf is Servers with every port served by adm.
func serversOf(adm *valkeyops.Admin) *Servers {
	return &Servers{Reads: adm, Topology: adm, Failovers: adm, Credentials: adm, Certificates: adm, Membership: adm, Zones: adm, Announces: adm}
}

// PoolValkey is the production Valkey: a valkeyops.Pool keyed by cluster.
type PoolValkey struct{ Pool *valkeyops.Pool }

// Connect returns the ports of the cluster's pooled admin client.
func (v PoolValkey) Connect(ctx context.Context, cluster types.NamespacedName, cred valkeyops.Credentials) (*Servers, error) {
	adm, err := v.Pool.Connect(ctx, cluster.String(), cred)
	if err != nil {
		return nil, err
	}
	return serversOf(adm), nil
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
		p.raise(ReasonConnectFailed, "Connect", "connecting to the Valkey servers failed: "+err.Error())
		return done(ctrl.Result{RequeueAfter: r.opts.PollInterval}, nil)
	}
	p.settle(ReasonConnectFailed)
	p.valkey = c
	return nil
}
