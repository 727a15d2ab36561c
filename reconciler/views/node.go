package views

import (
	"github.com/gomomento/valkey-operator/crds"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// ValkeyNode lifecycles.
const (
	LifecycleJoining = "Joining"
	LifecycleActive  = "Active"
	LifecycleLeaving = "Leaving"
)

// Node roles as the operator records them.
const (
	RolePrimary = "primary"
	RoleReplica = "replica"
)

// Node is the typed view of a ValkeyNode.
type Node struct{ U *unstructured.Unstructured }

// NewNodeObject returns an empty ValkeyNode object with its GVK set.
func NewNodeObject() *unstructured.Unstructured { return object(crds.KindNode) }

// NewNodeListObject returns an empty ValkeyNodeList with its GVK set.
func NewNodeListObject() *unstructured.UnstructuredList { return list(crds.KindNode) }

// NodeSpec is a ValkeyNode's spec, fixed when the node is created. Its tags are the stored
// field names, except TLSSecretRef: it is stored nested, as spec.tls.secretRef (see nodeSpec).
type NodeSpec struct {
	Cluster      string            `json:"cluster,omitempty"`
	Shard        int               `json:"shard"`           // shard 0 is a shard: always stored
	Image        string            `json:"image,omitempty"` // repository:tag
	Version      string            `json:"version,omitempty"`
	Valkey       map[string]string `json:"valkey,omitempty"`
	Resources    Resources         `json:"resources,omitzero"`
	Placement    Placement         `json:"placement,omitzero"`
	TLSSecretRef string            `json:"-"`
	// Exporter: the node's pod runs the metrics exporter sidecar.
	Exporter bool `json:"exporter,omitempty"`
	// Persistence is the resolved spec.persistence; absent on nodes that keep no data on a
	// volume and were made before persistence existed.
	Persistence Persistence `json:"persistence,omitzero"`
	SpecHash    string      `json:"specHash,omitempty"`
	// Restore is the backup object the node's server starts from: set on the first node of
	// each shard of a cluster created from a backup (spec.restoreFrom), nil otherwise.
	Restore *NodeRestore `json:"restore,omitempty"`
}

// NodeRestore is spec.restore of a ValkeyNode: where a restoring shard's snapshot is and
// what the backup recorded of it. It is fixed with the rest of the spec, so a pod made again
// for the node before it ever served (its first pod failed) fetches the same object.
type NodeRestore struct {
	Endpoint          string   `json:"endpoint"`
	Bucket            string   `json:"bucket"`
	Region            string   `json:"region,omitempty"`
	CredentialsSecret string   `json:"credentialsSecretRef,omitempty"`
	CASecret          string   `json:"caSecretRef,omitempty"`
	Object            string   `json:"object"`
	SHA256            string   `json:"sha256"`
	Bytes             int64    `json:"bytes,omitempty"`
	RDBVersion        int      `json:"rdbVersion,omitempty"`
	Keys              int64    `json:"keys,omitempty"`
	Slots             []string `json:"slots,omitempty"`
	// FetcherImage is the operator's image, whose restore-fetch command the init container
	// runs.
	FetcherImage string `json:"fetcherImage"`
}

// nodeSpec is the stored spec: NodeSpec's flat fields plus spec.tls.
type nodeSpec struct {
	NodeSpec `json:",inline"`
	TLS      *tlsSpec `json:"tls,omitempty"`
}

func (n Node) Name() string { return n.U.GetName() }

// Spec reads the node's spec.
func (n Node) Spec() NodeSpec {
	w := decode[nodeSpec](n.U, specKey)
	s := w.NodeSpec
	s.TLSSecretRef = w.TLS.secretRef()
	return s
}

// Shard is spec.shard.
func (n Node) Shard() int { return n.Spec().Shard }

// SetSpec writes the whole spec (only ever done before the node is created).
func (n Node) SetSpec(s NodeSpec) {
	encode(n.U, specKey, &nodeSpec{NodeSpec: s, TLS: tlsFor(s.TLSSecretRef)})
}

// NodeStatus is a ValkeyNode's status, all of it operator-written.
type NodeStatus struct {
	Lifecycle string `json:"lifecycle,omitempty"`
	PodIP     string `json:"podIP,omitempty"`
	NodeID    string `json:"nodeID,omitempty"`
	Role      string `json:"role,omitempty"`
	// Restarts counts the times a durable node's server was restarted on its volume;
	// FailedStarts those since it last answered with its node ID.
	Restarts     int64 `json:"restarts,omitempty"`
	FailedStarts int64 `json:"failedStarts,omitempty"`
}

// Status is the node's status. A node whose status was never written reads as Joining: the
// operator writes Joining right after it creates a node, so a node without it is one whose
// creator stopped in between (killed, or its status write failed) and it has served nothing.
// Read as "no lifecycle", such a node of a restored cluster once had its pod made without the
// snapshot it was created to fetch, and its shard formed empty.
func (n Node) Status() NodeStatus {
	s := decode[NodeStatus](n.U, statusKey)
	if s.Lifecycle == "" {
		s.Lifecycle = LifecycleJoining
	}
	return s
}

// SetStatus writes the whole status: the operator owns every field of it.
func (n Node) SetStatus(s NodeStatus) { encode(n.U, statusKey, &s) }
