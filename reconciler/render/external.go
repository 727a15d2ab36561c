package render

import (
	"maps"
	"strings"

	"github.com/gomomento/valkey-operator/reconciler/views"
	"github.com/gomomento/valkey-operator/valkeyops/model"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
)

// ExternalServiceName is the name of node's external Service: the node's (and its pod's)
// own name, which already fits a Service name (a cluster name leaves room for the suffix).
func ExternalServiceName(node string) string { return node }

// ExternalLabels are the labels of node's external Service: the cluster's, and the node's
// name, by which the operator finds the Service's node and the admission policy tells it
// from the headless Service.
func ExternalLabels(cluster, node string) map[string]string {
	l := Labels(cluster)
	l[LabelNode] = node
	return l
}

// ExternalService renders node's Service for clients outside the pod network
// (spec.externalAccess): of the access's type, selecting the node's one pod by its cluster
// and node labels, with the client port only (the cluster bus stays on the pod network),
// the user's annotations and, for a LoadBalancer, source ranges. Only the fields the
// operator owns: the node port and the load balancer's address are the API server's and the
// load-balancer implementation's to choose.
func ExternalService(cluster, node, namespace string, ea views.ExternalAccess) *corev1ac.ServiceApplyConfiguration {
	spec := corev1ac.ServiceSpec().
		WithType(corev1.ServiceType(ea.Type)).
		WithSelector(map[string]string{LabelCluster: cluster, LabelNode: node}).
		// The server accepts clients as soon as it listens; its pod is Ready only once it is
		// an in-sync member, and a new primary may be handed slots (and clients redirected
		// to it) before that.
		WithPublishNotReadyAddresses(true).
		WithPorts(corev1ac.ServicePort().WithName("client").WithPort(ClientPort).
			WithTargetPort(intstr.FromInt32(ClientPort)).WithProtocol(corev1.ProtocolTCP))
	if ea.Type == views.ExternalLoadBalancer && len(ea.LoadBalancerSourceRanges) > 0 {
		spec = spec.WithLoadBalancerSourceRanges(ea.LoadBalancerSourceRanges...)
	}
	svc := corev1ac.Service(ExternalServiceName(node), namespace).
		WithLabels(ExternalLabels(cluster, node)).
		WithSpec(spec)
	if len(ea.ServiceAnnotations) > 0 {
		svc = svc.WithAnnotations(maps.Clone(ea.ServiceAnnotations))
	}
	return svc
}

// ExternalAddress is the client address svc offers for pod: a LoadBalancer's first IP
// ingress on the client port (no port of its own), or a NodePort's node port on the
// address of the Kubernetes node running the pod (nodeAddrs: NodeAddress by node name). The zero address while there is none yet
// (no ingress, pod not scheduled); why says what stops there ever being one.
func ExternalAddress(svc *corev1.Service, pod *corev1.Pod, nodeAddrs map[string]string) (addr model.ClientAddress, why string) {
	switch svc.Spec.Type {
	case corev1.ServiceTypeLoadBalancer:
		for _, in := range svc.Status.LoadBalancer.Ingress {
			if in.IP != "" {
				return model.ClientAddress{IP: in.IP}, ""
			}
		}
		if len(svc.Status.LoadBalancer.Ingress) > 0 {
			return model.ClientAddress{}, "its load balancer gives a hostname (" + svc.Status.LoadBalancer.Ingress[0].Hostname + ") and no IP; servers announce IPv4 addresses only"
		}
	case corev1.ServiceTypeNodePort:
		if pod == nil || pod.Spec.NodeName == "" || len(svc.Spec.Ports) == 0 || svc.Spec.Ports[0].NodePort == 0 {
			return model.ClientAddress{}, ""
		}
		if ip := nodeAddrs[pod.Spec.NodeName]; ip != "" {
			return model.ClientAddress{IP: ip, Port: int(svc.Spec.Ports[0].NodePort)}, ""
		}
		return model.ClientAddress{}, "its Kubernetes node " + pod.Spec.NodeName + " has no IPv4 ExternalIP or InternalIP"
	}
	return model.ClientAddress{}, ""
}

// NodeAddress is the IPv4 address clients outside reach a Kubernetes node at: its
// ExternalIP, else its InternalIP ("" without either).
func NodeAddress(node *corev1.Node) string {
	for _, kind := range []corev1.NodeAddressType{corev1.NodeExternalIP, corev1.NodeInternalIP} {
		for _, a := range node.Status.Addresses {
			if a.Type == kind && !strings.Contains(a.Address, ":") {
				return a.Address
			}
		}
	}
	return ""
}
