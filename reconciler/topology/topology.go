// Package topology is the reconciler's narrow view of everything that talks to Valkey. The
// reconciler depends only on this interface, so envtest suites can drive the state machine
// with a scripted topology while production wires in the valkeyops adapter
// (reconciler/valkeyadapter).
package topology

import (
	"context"
	"crypto/tls"

	"k8s.io/apimachinery/pkg/types"
)

// OperatorUser is the ACL user the operator connects as.
const OperatorUser = "operator"

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

// ACLRule is a +/- rule for a category or a command.
type ACLRule struct {
	Name  string
	Allow bool
}

// KeyPattern is a key glob with read, write or readwrite access.
type KeyPattern struct {
	Pattern string
	Access  string
}

// ACLPermission is one permission set: the first of a user is its root, the rest selectors.
type ACLPermission struct {
	Categories []ACLRule
	Commands   []ACLRule
	Keys       []KeyPattern
	Channels   []string
}

// ACLUser is one application user with the SHA-256 hex digests of its passwords.
type ACLUser struct {
	Name           string
	PasswordHashes []string
	Permissions    []ACLPermission
}

// ACLSpec is everything the ACL file of a cluster is rendered from.
type ACLSpec struct {
	DefaultPassword  string
	OperatorPassword string
	Users            []ACLUser
}

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
