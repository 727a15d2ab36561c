//go:build envtest

package reconciler_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/gomomento/valkey-operator/reconciler/views"
	"github.com/gomomento/valkey-operator/valkeyops/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
)

// TestExternalAccess: turning spec.externalAccess on for a running cluster gives each node a
// LoadBalancer Service of its own (selecting its pod, client port only, the user's
// annotations and source ranges) and replaces no pod; once the load balancer writes an
// address, each server is told it (a ClientAddressAnnounced Event names it), and an idle
// cluster sends nothing more; turning it off clears every server, then the Services go.
func TestExternalAccess(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	ctx := context.Background()
	key := createCluster(t, ns, "c", menu(t, ns, nil), clusterOpts{shards: 2, replicas: 0})
	waitState(t, key, views.StateActive)
	before := podUIDs(t, key)

	annotations := map[string]string{"example.com/lb-class": "internal"}
	editCluster(t, key, func(c views.Cluster) {
		c.SetExternalAccess(&views.ExternalAccess{Type: views.ExternalLoadBalancer, ServiceAnnotations: annotations,
			LoadBalancerSourceRanges: []string{"203.0.113.0/24"}})
	})
	nodes := listNodes(t, key)
	require.Len(t, nodes, 2)
	want := map[string]model.ClientAddress{}
	for i, n := range nodes {
		svc := &corev1.Service{}
		require.True(t, pollUntil(waitFor, func() bool {
			return k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: n.Name()}, svc) == nil
		}), "node %s gets its Service", n.Name())
		assert.Equal(t, corev1.ServiceTypeLoadBalancer, svc.Spec.Type)
		assert.Equal(t, map[string]string{"valkey.gomomento.com/cluster": "c", "valkey.gomomento.com/node": n.Name()}, svc.Spec.Selector)
		require.Len(t, svc.Spec.Ports, 1)
		assert.Equal(t, int32(6379), svc.Spec.Ports[0].Port)
		assert.Equal(t, []string{"203.0.113.0/24"}, svc.Spec.LoadBalancerSourceRanges)
		assert.Equal(t, "internal", svc.Annotations["example.com/lb-class"])
		assert.True(t, fake.announce.get(key, n.Name()) == model.ClientAddress{}, "nothing announced before the Service has an address")

		// The load balancer's part: an address in the Service's status.
		addr := fmt.Sprintf("203.0.113.%d", 10+i)
		svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: addr}}
		require.NoError(t, k8s.Status().Update(ctx, svc))
		want[n.Name()] = model.ClientAddress{IP: addr}
	}
	for name, addr := range want {
		require.True(t, pollUntil(waitFor, func() bool { return fake.announce.get(key, name) == addr }), "%s announces %s", name, addr)
		waitEvent(t, key, corev1.EventTypeNormal, "ClientAddressAnnounced", name+" announces "+addr.String()+" to clients")
	}
	for _, p := range listPods(t, key) {
		assert.Equal(t, p.Name, p.Labels["valkey.gomomento.com/node"], "each pod carries the label its Service selects")
	}
	assert.Equal(t, before, podUIDs(t, key), "turning external access on replaces no pod")

	writes, passesBefore := fake.writeCount(key), passes.of(key)
	require.True(t, pollUntil(waitFor, func() bool { return passes.of(key) > passesBefore+3 }), "more passes ran")
	assert.Equal(t, writes, fake.writeCount(key), "an idle cluster sends no write")

	editCluster(t, key, func(c views.Cluster) { c.SetExternalAccess(nil) })
	for name := range want {
		require.True(t, pollUntil(waitFor, func() bool { return fake.announce.get(key, name) == model.ClientAddress{} }), "%s cleared", name)
		require.True(t, pollUntil(waitFor, func() bool {
			return apierrors.IsNotFound(k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &corev1.Service{}))
		}), "%s's Service deleted once its server announces nothing", name)
	}
	assert.Equal(t, before, podUIDs(t, key), "turning it off replaces no pod")
	getObj(t, &corev1.Service{}, ns, "c") // the headless Service stays
}

// TestExternalNodePortRefusedBelow9: a NodePort on Valkey 8.0 (no client-port directive)
// makes no Service and says why in a Warning.
func TestExternalNodePortRefusedBelow9(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	createImage(t, ns+"-img", "valkey/valkey", "8.0.1", "8.0.1")
	createConfig(t, ns+"-cfg", ns+"-img", "", nil)
	key := createCluster(t, ns, "c", ns+"-cfg", clusterOpts{shards: 1, replicas: 0})
	waitState(t, key, views.StateActive)
	editCluster(t, key, func(c views.Cluster) {
		c.SetExternalAccess(&views.ExternalAccess{Type: views.ExternalNodePort})
	})
	msg := waitEvent(t, key, corev1.EventTypeWarning, "ExternalAccessRefused", "spec.externalAccess type NodePort needs Valkey 9.0 or later")
	assert.Contains(t, msg, "runs Valkey 8.0.1")
	assert.Contains(t, msg, "use type LoadBalancer")
	for _, n := range listNodes(t, key) {
		assert.True(t, apierrors.IsNotFound(k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: n.Name()}, &corev1.Service{})),
			"no Service for %s", n.Name())
	}
}
