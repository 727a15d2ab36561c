// Package clusterview is what the end-to-end tests and the day-2 benchmark read of a
// running cluster's ValkeyNodes, through the operator's own typed views.
package clusterview

import (
	"context"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gomomento/valkey-operator/crds"
	"github.com/gomomento/valkey-operator/reconciler/render"
	"github.com/gomomento/valkey-operator/reconciler/views"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
)

// Node is one ValkeyNode: its name, shard and status.
type Node struct {
	Name, Lifecycle, Role, NodeID string
	Shard                         int
}

var nodesGVR = schema.GroupVersionResource{Group: crds.Group, Version: crds.Version, Resource: "valkeynodes"}

// List returns the ValkeyNodes of cluster in namespace, sorted by name.
func List(ctx context.Context, dyn dynamic.Interface, namespace, cluster string) ([]Node, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	l, err := dyn.Resource(nodesGVR).Namespace(namespace).List(ctx, metav1.ListOptions{LabelSelector: render.LabelCluster + "=" + cluster})
	if err != nil {
		return nil, err
	}
	out := make([]Node, 0, len(l.Items))
	for i := range l.Items {
		v := views.Node{U: &l.Items[i]}
		s := v.Status()
		out = append(out, Node{Name: v.Name(), Shard: v.Shard(), Lifecycle: s.Lifecycle, Role: s.Role, NodeID: s.NodeID})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Describe lists name=lifecycle/role per node and counts the Active ones.
func Describe(nodes []Node) (string, int) {
	desc := make([]string, 0, len(nodes))
	active := 0
	for _, n := range nodes {
		desc = append(desc, n.Name+"="+n.Lifecycle+"/"+n.Role)
		if n.Lifecycle == views.LifecycleActive {
			active++
		}
	}
	return strings.Join(desc, " "), active
}

// PerShard counts the nodes of each shard.
func PerShard(nodes []Node) map[string]int {
	out := map[string]int{}
	for _, n := range nodes {
		out[strconv.Itoa(n.Shard)]++
	}
	return out
}
