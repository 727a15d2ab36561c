// Package topology is the reconciler's narrow view of everything that talks to Valkey. The
// reconciler depends only on this interface, so envtest suites can drive the state machine
// with a scripted topology while production wires in the valkeyops adapter
// (reconciler/valkeyadapter).
package topology

import (
	"context"
	"crypto/tls"

	"k8s.io/apimachinery/pkg/types"

	"github.com/gomomento/valkey-operator/valkeyops"
)

// OperatorUser is the ACL user the operator connects as.
const OperatorUser = valkeyops.OperatorUser

// Member is one Valkey server of a cluster: its ValkeyNode (= Pod) name, dialable address
// and desired shard.
type Member struct {
	Name  string
	Addr  string
	Shard int
}

// Conn says how to reach a cluster's servers. Cluster keys the adapter's connection pool.
type Conn struct {
	Cluster  types.NamespacedName
	Username string
	Password string
	// TLS is nil for plaintext clusters; otherwise it verifies the server with the cluster CA.
	TLS *tls.Config
}

// NodeState is what one server reports about itself.
type NodeState struct {
	Name      string
	Reachable bool
	ID        string
	Role      string // primary|replica
}

// Observation is a health verdict plus per-node facts the reconciler records on ValkeyNodes.
type Observation struct {
	Nodes []NodeState
	// Problems lists why the cluster does not meet the seed's Active criteria; empty = healthy.
	Problems []string
}

// The ACL input is plain data owned by valkeyops (which renders and applies it); the
// reconciler builds it from the CRDs, so it shares those types instead of mirroring them.
type (
	ACLRule       = valkeyops.ACLRule
	KeyPattern    = valkeyops.KeyPattern
	ACLPermission = valkeyops.ACLPermission
	ACLUser       = valkeyops.ACLUser
	ACLSpec       = valkeyops.ACLSpec
)

// Valkey is the reconciler's interface to the Valkey servers.
type Valkey interface {
	// RenderACL renders the ACL file (passwords only as #<sha256>).
	RenderACL(spec ACLSpec) string
	// Bootstrap forms the cluster from members grouped by shard; idempotent.
	Bootstrap(ctx context.Context, conn Conn, members []Member, shards int) error
	// Observe reports per-node facts and whether the cluster meets the Active criteria for
	// the given topology.
	Observe(ctx context.Context, conn Conn, members []Member, shards, replicasPerShard int) (Observation, error)
	// Release drops any pooled connections of a cluster (it was deleted).
	Release(cluster types.NamespacedName)
}
