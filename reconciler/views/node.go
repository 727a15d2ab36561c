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

// NodeSpec is a ValkeyNode's spec, fixed when the node is created.
type NodeSpec struct {
	Cluster      string
	Shard        int
	Image        string // repository:tag
	Version      string
	Valkey       map[string]string
	Resources    Resources
	Placement    Placement
	TLSSecretRef string
	SpecHash     string
}

func (n Node) Name() string { return n.U.GetName() }

// Spec reads the node's spec.
func (n Node) Spec() NodeSpec {
	shard, _ := getInt(n.U, "spec", "shard")
	return NodeSpec{
		Cluster:      getString(n.U, "spec", "cluster"),
		Shard:        int(shard),
		Image:        getString(n.U, "spec", "image"),
		Version:      getString(n.U, "spec", "version"),
		Valkey:       getStringMap(n.U, "spec", "valkey"),
		Resources:    getResources(n.U, "spec", "resources"),
		Placement:    getPlacement(n.U, "spec", "placement"),
		TLSSecretRef: getString(n.U, "spec", "tls", "secretRef"),
		SpecHash:     getString(n.U, "spec", "specHash"),
	}
}

// Shard is spec.shard.
func (n Node) Shard() int {
	s, _ := getInt(n.U, "spec", "shard")
	return int(s)
}

// SetSpec writes the whole spec (only ever done before the node is created).
func (n Node) SetSpec(s NodeSpec) {
	setString(n.U, s.Cluster, "spec", "cluster")
	setOrRemove(n.U, int64(s.Shard), "spec", "shard")
	setString(n.U, s.Image, "spec", "image")
	setString(n.U, s.Version, "spec", "version")
	setStringMap(n.U, s.Valkey, "spec", "valkey")
	setResources(n.U, s.Resources, "spec", "resources")
	setPlacement(n.U, s.Placement, "spec", "placement")
	if s.TLSSecretRef == "" {
		setOrRemove(n.U, nil, "spec", "tls")
	} else {
		setOrRemove(n.U, map[string]any{"secretRef": s.TLSSecretRef}, "spec", "tls")
	}
	setString(n.U, s.SpecHash, "spec", "specHash")
}

// NodeStatus is a ValkeyNode's status.
type NodeStatus struct {
	Lifecycle string
	PodIP     string
	NodeID    string
	Role      string
}

func (n Node) Status() NodeStatus {
	return NodeStatus{
		Lifecycle: getString(n.U, "status", "lifecycle"),
		PodIP:     getString(n.U, "status", "podIP"),
		NodeID:    getString(n.U, "status", "nodeID"),
		Role:      getString(n.U, "status", "role"),
	}
}

func (n Node) SetStatus(s NodeStatus) {
	setString(n.U, s.Lifecycle, "status", "lifecycle")
	setString(n.U, s.PodIP, "status", "podIP")
	setString(n.U, s.NodeID, "status", "nodeID")
	setString(n.U, s.Role, "status", "role")
}
