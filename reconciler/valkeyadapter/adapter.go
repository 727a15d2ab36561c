// Package valkeyadapter connects the reconciler's topology.Valkey interface to the real
// valkeyops package. It keeps one valkeyops.Admin (one connection per node) per cluster and
// replaces it only when the credentials or TLS material change.
package valkeyadapter

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"sync"

	"github.com/go-logr/logr"
	"github.com/gomomento/valkey-operator/reconciler/topology"
	"github.com/gomomento/valkey-operator/valkeyops"
	"k8s.io/apimachinery/pkg/types"
)

// Adapter implements topology.Valkey with valkeyops.
type Adapter struct {
	// Remap turns an announced address into a dialable one (nil = identity); dev setups
	// where the operator runs outside the pod network use it.
	Remap func(announced string) string
	Log   logr.Logger

	mu     sync.Mutex
	admins map[types.NamespacedName]*pooled
}

type pooled struct {
	conn  topology.Conn
	admin *valkeyops.Admin
}

var _ topology.Valkey = (*Adapter)(nil)

// New returns an Adapter.
func New(log logr.Logger, remap func(string) string) *Adapter {
	return &Adapter{Log: log, Remap: remap, admins: map[types.NamespacedName]*pooled{}}
}

func (a *Adapter) admin(conn topology.Conn) (*valkeyops.Admin, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if p, ok := a.admins[conn.Cluster]; ok {
		if sameConn(p.conn, conn) {
			return p.admin, nil
		}
		p.admin.Close()
		delete(a.admins, conn.Cluster)
	}
	log := a.Log.WithValues("cluster", conn.Cluster.String())
	adm, err := valkeyops.NewAdmin(valkeyops.Options{
		Username: conn.Username,
		Password: conn.Password,
		TLS:      conn.TLS,
		Remap:    a.Remap,
		Log:      func(format string, args ...any) { log.V(1).Info("valkeyops", "detail", fmt.Sprintf(format, args...)) },
	})
	if err != nil {
		return nil, err
	}
	a.admins[conn.Cluster] = &pooled{conn: conn, admin: adm}
	return adm, nil
}

// sameConn reports whether an existing pool can serve conn: same user and password and the
// same TLS trust roots, server name and client certificate.
func sameConn(a, b topology.Conn) bool {
	if a.Username != b.Username || a.Password != b.Password || (a.TLS == nil) != (b.TLS == nil) {
		return false
	}
	if a.TLS == nil {
		return true
	}
	if a.TLS.ServerName != b.TLS.ServerName || !poolEqual(a.TLS, b.TLS) || len(a.TLS.Certificates) != len(b.TLS.Certificates) {
		return false
	}
	for i := range a.TLS.Certificates {
		ca, cb := a.TLS.Certificates[i].Certificate, b.TLS.Certificates[i].Certificate
		if len(ca) != len(cb) {
			return false
		}
		for j := range ca {
			if !bytes.Equal(ca[j], cb[j]) {
				return false
			}
		}
	}
	return true
}

func poolEqual(a, b *tls.Config) bool {
	if a.RootCAs == nil || b.RootCAs == nil {
		return a.RootCAs == b.RootCAs
	}
	return a.RootCAs.Equal(b.RootCAs)
}

func nodes(members []topology.Member) []valkeyops.Node {
	out := make([]valkeyops.Node, len(members))
	for i, m := range members {
		out[i] = valkeyops.Node{Name: m.Name, Addr: m.Addr, Shard: m.Shard}
	}
	return out
}

// Bootstrap forms the cluster with valkeyops.
func (a *Adapter) Bootstrap(ctx context.Context, conn topology.Conn, members []topology.Member, shards int) error {
	adm, err := a.admin(conn)
	if err != nil {
		return err
	}
	return adm.Bootstrap(ctx, nodes(members), shards)
}

// Observe snapshots the nodes and applies valkeyops.Health.
func (a *Adapter) Observe(ctx context.Context, conn topology.Conn, members []topology.Member, shards, replicasPerShard int) (topology.Observation, error) {
	adm, err := a.admin(conn)
	if err != nil {
		return topology.Observation{}, err
	}
	snap, err := adm.Observe(ctx, nodes(members))
	if err != nil {
		return topology.Observation{}, err
	}
	var obs topology.Observation
	for _, n := range snap.Nodes {
		obs.Nodes = append(obs.Nodes, topology.NodeState{Name: n.Name, Reachable: n.Reachable, ID: n.ID, Role: string(n.Role)})
	}
	obs.Problems = valkeyops.Health(snap, shards, replicasPerShard)
	return obs, nil
}

// Release closes a cluster's pooled connections.
func (a *Adapter) Release(cluster types.NamespacedName) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if p, ok := a.admins[cluster]; ok {
		p.admin.Close()
		delete(a.admins, cluster)
	}
}

// Close releases every pool (at shutdown).
func (a *Adapter) Close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for k, p := range a.admins {
		p.admin.Close()
		delete(a.admins, k)
	}
}

// RenderACL renders the ACL file with valkeyops.
func (a *Adapter) RenderACL(spec topology.ACLSpec) string {
	return valkeyops.RenderACL(spec)
}
