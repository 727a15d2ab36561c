package crds_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	networkingv1 "k8s.io/api/networking/v1"
	"sigs.k8s.io/yaml"

	"github.com/gomomento/valkey-operator/crds"
	"github.com/gomomento/valkey-operator/reconciler/render"
)

// TestNetworkPolicyExample: the shipped NetworkPolicy selects the example cluster's servers
// (by the labels the operator puts on its pods), lets only those servers reach the cluster
// bus, opens the client port to them, the operator and the applications' rule, and the
// exporter's metrics port to Prometheus alone. The real API server accepts it in
// TestOnRealAPIServer ("every example applies"); the dev cluster cannot enforce it.
func TestNetworkPolicyExample(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(crds.Dir(), "..", "examples", "networkpolicy.yaml"))
	require.NoError(t, err)
	var np networkingv1.NetworkPolicy
	require.NoError(t, yaml.UnmarshalStrict(b, &np))

	own := render.Labels("my-cluster")
	assert.Equal(t, own, np.Spec.PodSelector.MatchLabels, "selects the cluster's servers by the operator's labels")
	assert.Equal(t, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}, np.Spec.PolicyTypes)

	clientPeers, metricsPeers := 0, 0
	for _, rule := range np.Spec.Ingress {
		var ports []int
		for _, p := range rule.Ports {
			ports = append(ports, p.Port.IntValue())
		}
		if assert.NotEmpty(t, ports, "every rule names its ports") && assert.NotEmpty(t, rule.From, "every rule names its peers") {
			for _, port := range ports {
				if port == render.BusPort {
					for _, peer := range rule.From {
						assert.Nil(t, peer.NamespaceSelector, "bus peers stay in the namespace")
						assert.Nil(t, peer.IPBlock, "bus peers are pods")
						if assert.NotNil(t, peer.PodSelector) {
							assert.Equal(t, own, peer.PodSelector.MatchLabels, "only the cluster's own servers reach the bus")
						}
					}
				}
				if port == render.ClientPort {
					clientPeers += len(rule.From)
					for _, peer := range rule.From {
						if peer.IPBlock != nil {
							assert.Equal(t, []int{render.ClientPort}, ports, "external clients reach the client port alone")
						}
					}
				}
				if port == render.ExporterPort {
					metricsPeers += len(rule.From)
					assert.Equal(t, []int{render.ExporterPort}, ports, "the metrics rule opens nothing else")
				}
			}
		}
	}
	assert.Equal(t, 4, clientPeers, "the client port admits the servers, the operator, the applications and external clients")
	assert.Equal(t, 1, metricsPeers, "the exporter's port admits Prometheus alone")
}
