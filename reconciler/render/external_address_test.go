package render_test

import (
	"testing"

	"github.com/gomomento/valkey-operator/reconciler/render"
	"github.com/gomomento/valkey-operator/valkeyops/model"
	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
)

// TestExternalAddress: what each kind of Service offers a node's clients.
func TestExternalAddress(t *testing.T) {
	lb := func(ingress ...corev1.LoadBalancerIngress) *corev1.Service {
		return &corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer},
			Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: ingress}}}
	}
	np := func(port int32) *corev1.Service {
		return &corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Ports: []corev1.ServicePort{{Port: 6379, NodePort: port}}}}
	}
	onNode := func(node string) *corev1.Pod { return &corev1.Pod{Spec: corev1.PodSpec{NodeName: node}} }
	nodes := map[string]string{"k1": "198.51.100.1"}
	for _, tc := range []struct {
		name    string
		svc     *corev1.Service
		pod     *corev1.Pod
		want    model.ClientAddress
		refused bool
	}{
		{"LoadBalancer without ingress yet", lb(), onNode("k1"), model.ClientAddress{}, false},
		{"LoadBalancer with an IP", lb(corev1.LoadBalancerIngress{IP: "203.0.113.5"}), onNode("k1"), model.ClientAddress{IP: "203.0.113.5"}, false},
		{"LoadBalancer: the first IP", lb(corev1.LoadBalancerIngress{Hostname: "lb.example"}, corev1.LoadBalancerIngress{IP: "203.0.113.6"}), nil, model.ClientAddress{IP: "203.0.113.6"}, false},
		{"LoadBalancer with a hostname only", lb(corev1.LoadBalancerIngress{Hostname: "lb.example"}), nil, model.ClientAddress{}, true},
		{"NodePort on a scheduled pod", np(31001), onNode("k1"), model.ClientAddress{IP: "198.51.100.1", Port: 31001}, false},
		{"NodePort, pod not scheduled", np(31001), onNode(""), model.ClientAddress{}, false},
		{"NodePort, node without an address", np(31001), onNode("k2"), model.ClientAddress{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, why := render.ExternalAddress(tc.svc, tc.pod, nodes)
			assert.Equal(t, tc.want, got)
			assert.Equal(t, tc.refused, why != "", why)
		})
	}
}

// TestNodeAddress: a node's ExternalIP, else its InternalIP, IPv4 only.
func TestNodeAddress(t *testing.T) {
	node := func(addrs ...corev1.NodeAddress) *corev1.Node {
		return &corev1.Node{Status: corev1.NodeStatus{Addresses: addrs}}
	}
	internal := corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "10.1.0.1"}
	external := corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: "198.51.100.1"}
	v6 := corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: "2001:db8::1"}
	assert.Equal(t, "198.51.100.1", render.NodeAddress(node(internal, external)))
	assert.Equal(t, "10.1.0.1", render.NodeAddress(node(v6, internal)))
	assert.Empty(t, render.NodeAddress(node(v6)))
}
