//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/gomomento/valkey-operator/devcluster"
	"github.com/gomomento/valkey-operator/reconciler/render"
	"github.com/gomomento/valkey-operator/reconciler/views"
)

// What the operator's ServiceAccount may do beyond its own use of it (which the whole suite
// proves): RBAC denies what it never needs, and the admission policies of
// deploy/25-operator-writes-policy.yaml refuse the objects it never makes. Every write here
// is a server-side dry run as the operator (impersonated), so nothing is created.

// asOperator runs kubectl as the operator's ServiceAccount in namespace.
func asOperator(stdin, namespace string, args ...string) (string, error) {
	return kubectlAs(stdin, operatorUser(), nil, append(args, "-n", namespace)...)
}

// TestOperatorRBACIsNarrow: the shipped RBAC grants none of the rights finding 6 named
// (changing any Secret, reading a node by name) nor others the operator never uses. Nodes are
// only listed and watched, through a cache that keeps whether each is in maintenance; the
// operator never evicts (its budgets are for everyone else's evictions). Deleting pods, which
// finding 6 also named, is granted since durable nodes are restarted on their volumes (a pod
// whose server exited is deleted and made again): RBAC cannot narrow it, so the
// valkey-operator-deletes policy limits it to the operator's own pods (TestOperatorPodPolicy).
func TestOperatorRBACIsNarrow(t *testing.T) {
	denied := []struct{ verb, resource, subresource, namespace string }{
		{"update", "pods", "", "default"},
		{"create", "pods", "exec", "default"},
		{"create", "pods", "eviction", "default"},
		{"patch", "pods", "ephemeralcontainers", "default"},
		{"update", "secrets", "", "default"},
		{"delete", "secrets", "", "default"},
		{"delete", "configmaps", "", "default"},
		// Services are deleted one by one (a node's external Service, by the operator's
		// own policy only its own), never by collection.
		{"deletecollection", "services", "", "default"},
		{"create", "serviceaccounts", "token", "default"},
		{"update", "valkeyclusters.valkey.gomomento.com", "", "default"},
		{"delete", "valkeyclusters.valkey.gomomento.com", "", "default"},
		{"update", "valkeynodes.valkey.gomomento.com", "", "default"},
		{"create", "valkeyconfigs.valkey.gomomento.com", "", ""},
		{"update", "valkeybackups.valkey.gomomento.com", "", "default"},
		{"deletecollection", "valkeybackups.valkey.gomomento.com", "", "default"},
		{"update", "valkeybackups.valkey.gomomento.com", "status", "default"},
		{"update", "valkeybackups.valkey.gomomento.com", "finalizers", "default"},
		{"get", "nodes", "", ""},
		{"patch", "nodes", "", ""},
		{"update", "pods", "status", "default"},
		{"update", "poddisruptionbudgets.policy", "", "default"},
		{"update", "leases.coordination.k8s.io", "", "kube-system"},
		{"create", "rolebindings.rbac.authorization.k8s.io", "", "default"},
	}
	for _, d := range denied {
		t.Run(strings.TrimSuffix(d.verb+" "+d.resource+"/"+d.subresource, "/"), func(t *testing.T) {
			args := []string{"auth", "can-i", d.verb, d.resource}
			if d.subresource != "" {
				args = append(args, "--subresource", d.subresource)
			}
			if d.namespace != "" {
				args = append(args, "-n", d.namespace)
			}
			out, _ := kubectlAs("", operatorUser(), nil, args...) // "no" exits 1
			assert.Equal(t, "no", strings.TrimSpace(out))
		})
	}
}

// operatorPod is the pod the operator renders for a node of cluster "policy".
func operatorPod(namespace string) *corev1.Pod {
	spec := views.NodeSpec{Cluster: "policy", Image: devcluster.DefaultValkeyImage, Placement: views.Placement{ZoneSpread: views.ZoneSpreadBestEffort}}
	pod := render.Pod("policy-0000a", namespace, spec, nil)
	pod.APIVersion, pod.Kind = "v1", "Pod"
	return pod
}

// TestOperatorPodPolicy: the operator's ServiceAccount may create the pods the operator
// renders, and nothing that would let it run another workload: unlabelled pods, pods with a
// ServiceAccount token, on the host's namespaces or paths, as root or privileged. The same
// pods from another identity are not the policy's concern.
func TestOperatorPodPolicy(t *testing.T) {
	n := newNamespace(t, "e2e-podpolicy")
	container := func(p *corev1.Pod) *corev1.Container { return &p.Spec.Containers[0] }
	tests := []struct {
		name   string
		mutate func(*corev1.Pod)
		want   string // "" = admitted
	}{
		{"the operator's own pod", func(*corev1.Pod) {}, ""},
		{"no managed-by label", func(p *corev1.Pod) { delete(p.Labels, render.LabelManagedBy) }, "may only create or change its own pods"},
		{"another manager's label", func(p *corev1.Pod) { p.Labels[render.LabelManagedBy] = "helm" }, "may only create or change its own pods"},
		{"no cluster label", func(p *corev1.Pod) { delete(p.Labels, render.LabelCluster) }, "may only create or change its own pods"},
		{"a ServiceAccount token mounted", func(p *corev1.Pod) { p.Spec.AutomountServiceAccountToken = nil }, "automountServiceAccountToken: false"},
		{"a projected token volume", func(p *corev1.Pod) {
			p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "token", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
				Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}}}}}})
		}, "may only mount configMap, secret and emptyDir volumes"},
		{"its own data claim", func(p *corev1.Pod) {
			p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "claim", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: p.Name + "-data"}}})
		}, ""},
		{"another pod's claim", func(p *corev1.Pod) {
			p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "claim", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "someone-elses"}}})
		}, "their own data claim"},
		{"a hostPath volume", func(p *corev1.Pod) {
			p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "host", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}})
		}, "may only mount configMap, secret and emptyDir volumes"},
		{"hostNetwork", func(p *corev1.Pod) { p.Spec.HostNetwork = true }, "may not use the host's network"},
		{"hostPID", func(p *corev1.Pod) { p.Spec.HostPID = true }, "may not use the host's network"},
		{"hostIPC", func(p *corev1.Pod) { p.Spec.HostIPC = true }, "may not use the host's network"},
		{"a host port", func(p *corev1.Pod) { container(p).Ports[0].HostPort = 6379 }, "nor host ports"},
		{"runAsNonRoot unset", func(p *corev1.Pod) {
			p.Spec.SecurityContext.RunAsNonRoot = nil
			container(p).SecurityContext.RunAsNonRoot = nil
		}, "must run as non-root"},
		{"a container as uid 0", func(p *corev1.Pod) { container(p).SecurityContext.RunAsUser = ptr.To[int64](0) }, "must run as non-root"},
		{"a privileged container", func(p *corev1.Pod) {
			container(p).SecurityContext.Privileged = ptr.To(true)
			container(p).SecurityContext.AllowPrivilegeEscalation = nil
		}, "must not be privileged"},
		{"an added capability", func(p *corev1.Pod) {
			container(p).SecurityContext.Capabilities.Add = []corev1.Capability{"NET_ADMIN"}
		}, "must not be privileged"},
	}
	// Pods need the namespace's default ServiceAccount, made by the controller manager.
	n.eventually(30*time.Second, 200*time.Millisecond, "the default ServiceAccount exists", func() (bool, string, error) {
		out, err := kubectlRun("", "get", "serviceaccount", "default", "-n", n.name, "-o", "name")
		return err == nil && strings.TrimSpace(out) != "", out, nil
	})
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pod := operatorPod(n.name)
			tc.mutate(pod)
			b, err := json.Marshal(pod)
			require.NoError(t, err)
			out, err := asOperator(string(b), n.name, "create", "--dry-run=server", "-f", "-", "-o", "name")
			if tc.want == "" {
				assert.NoError(t, err, out)
				return
			}
			if assert.Error(t, err, "admitted: %s", out) {
				assert.Contains(t, err.Error(), "ValidatingAdmissionPolicy 'valkey-operator-pods'")
				assert.Contains(t, err.Error(), tc.want)
			}
			// Anyone else's pod is none of the policy's business.
			out, err = kubectlRun(string(b), "create", "--dry-run=server", "-f", "-", "-o", "name", "-n", n.name)
			assert.NoError(t, err, "the admin's pod: %s", out)
		})
	}
	t.Run("deleting someone else's pod", func(t *testing.T) {
		pod := operatorPod(n.name)
		pod.Name, pod.Labels = "users-own", map[string]string{"app": "users-own"}
		b, err := json.Marshal(pod)
		require.NoError(t, err)
		out, err := kubectlRun(string(b), "create", "-f", "-", "-n", n.name)
		require.NoError(t, err, out)
		out, err = asOperator("", n.name, "delete", "pod", "users-own", "--dry-run=server")
		if assert.Error(t, err, "deleted: %s", out) {
			assert.Contains(t, err.Error(), "ValidatingAdmissionPolicy 'valkey-operator-deletes'")
			assert.Contains(t, err.Error(), "may only delete its own pods")
		}
	})
}

// TestOperatorObjectPolicy: the operator's ServiceAccount may create and change its own
// Services, ConfigMaps and Secrets, but not anyone else's (not the identity ConfigMap the
// policies trust), not a Secret that would be filled with a ServiceAccount token, and not a
// Service reachable from outside the cluster but a node's own external Service (selecting
// only its pod, on the client port).
func TestOperatorObjectPolicy(t *testing.T) {
	n := newNamespace(t, "e2e-objpolicy")
	labels := fmt.Sprintf(`{%q:%q,%q:"c"}`, render.LabelManagedBy, render.ManagedBy, render.LabelCluster)
	n.kubectl("create", "secret", "generic", "users-own", "--from-literal=k=v")
	tests := []struct {
		name, stdin, namespace string
		args                   []string
		want                   string // "" = admitted
	}{
		{"its own Secret", fmt.Sprintf(`{"apiVersion":"v1","kind":"Secret","metadata":{"name":"c-auth","labels":%s},"type":"Opaque"}`, labels), n.name,
			[]string{"create", "--dry-run=server", "-f", "-"}, ""},
		{"its own headless Service", fmt.Sprintf(`{"apiVersion":"v1","kind":"Service","metadata":{"name":"c","labels":%s},"spec":{"clusterIP":"None","ports":[{"port":6379}]}}`, labels), n.name,
			[]string{"create", "--dry-run=server", "-f", "-"}, ""},
		{"an unlabelled Secret", `{"apiVersion":"v1","kind":"Secret","metadata":{"name":"x"}}`, n.name,
			[]string{"create", "--dry-run=server", "-f", "-"}, "may only create or change its own secrets"},
		{"a ServiceAccount token Secret", fmt.Sprintf(`{"apiVersion":"v1","kind":"Secret","metadata":{"name":"t","labels":%s,"annotations":{"kubernetes.io/service-account.name":"default"}},"type":"kubernetes.io/service-account-token"}`, labels), n.name,
			[]string{"create", "--dry-run=server", "-f", "-"}, "only write Secrets of type Opaque"},
		{"a user's Secret, relabelled", "", n.name,
			[]string{"label", "secret", "users-own", render.LabelManagedBy + "=" + render.ManagedBy, render.LabelCluster + "=c", "--dry-run=server"}, "may only create or change its own secrets"},
		{"the policies' identity ConfigMap", "", operatorNamespace,
			[]string{"patch", "configmap", "valkey-operator-identity", "--type=merge", "-p", `{"data":{"serviceAccountName":"nobody"}}`, "--dry-run=server"}, "may only create or change its own configmaps"},
		{"a NodePort Service", fmt.Sprintf(`{"apiVersion":"v1","kind":"Service","metadata":{"name":"np","labels":%s},"spec":{"type":"NodePort","ports":[{"port":6379}]}}`, labels), n.name,
			[]string{"create", "--dry-run=server", "-f", "-"}, "only write ClusterIP Services without externalIPs"},
		{"its own node's external LoadBalancer", externalService(labels, `{"valkey.gomomento.com/cluster":"c","valkey.gomomento.com/node":"c-abcde"}`, 6379), n.name,
			[]string{"create", "--dry-run=server", "-f", "-"}, ""},
		{"an external Service selecting other pods", externalService(labels, `{"app":"someone-else"}`, 6379), n.name,
			[]string{"create", "--dry-run=server", "-f", "-"}, "a node's external LoadBalancer or NodePort Service that selects only that node's pod"},
		{"an external Service exposing the bus", externalService(labels, `{"valkey.gomomento.com/cluster":"c","valkey.gomomento.com/node":"c-abcde"}`, 16379), n.name,
			[]string{"create", "--dry-run=server", "-f", "-"}, "on port 6379"},
		{"its own data claim", fmt.Sprintf(`{"apiVersion":"v1","kind":"PersistentVolumeClaim","metadata":{"name":"c-abcde-data","labels":%s},"spec":{"accessModes":["ReadWriteOnce"],"resources":{"requests":{"storage":"1Gi"}}}}`, labels), n.name,
			[]string{"create", "--dry-run=server", "-f", "-"}, ""},
		{"a claim of a named volume", fmt.Sprintf(`{"apiVersion":"v1","kind":"PersistentVolumeClaim","metadata":{"name":"steal","labels":%s},"spec":{"volumeName":"someone-elses-pv","accessModes":["ReadWriteOnce"],"resources":{"requests":{"storage":"1Gi"}}}}`, labels), n.name,
			[]string{"create", "--dry-run=server", "-f", "-"}, "only create claims that bind a new volume"},
		{"a claim cloning another claim", fmt.Sprintf(`{"apiVersion":"v1","kind":"PersistentVolumeClaim","metadata":{"name":"clone","labels":%s},"spec":{"dataSource":{"kind":"PersistentVolumeClaim","name":"someone-elses"},"accessModes":["ReadWriteOnce"],"resources":{"requests":{"storage":"1Gi"}}}}`, labels), n.name,
			[]string{"create", "--dry-run=server", "-f", "-"}, "only create claims that bind a new volume"},
		{"an unlabelled claim", `{"apiVersion":"v1","kind":"PersistentVolumeClaim","metadata":{"name":"x"},"spec":{"accessModes":["ReadWriteOnce"],"resources":{"requests":{"storage":"1Gi"}}}}`, n.name,
			[]string{"create", "--dry-run=server", "-f", "-"}, "may only create or change its own persistentvolumeclaims"},
		{"a Service with externalIPs", fmt.Sprintf(`{"apiVersion":"v1","kind":"Service","metadata":{"name":"ext","labels":%s},"spec":{"externalIPs":["192.0.2.1"],"ports":[{"port":6379}]}}`, labels), n.name,
			[]string{"create", "--dry-run=server", "-f", "-"}, "only write ClusterIP Services without externalIPs"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, err := asOperator(tc.stdin, tc.namespace, tc.args...)
			if tc.want == "" {
				assert.NoError(t, err, out)
				return
			}
			if assert.Error(t, err, "admitted: %s", out) {
				assert.Contains(t, err.Error(), "ValidatingAdmissionPolicy 'valkey-operator-objects'")
				assert.Contains(t, err.Error(), tc.want)
			}
		})
	}
	out, err := kubectlRun("", "get", "configmap", "valkey-operator-identity", "-n", operatorNamespace, "-o", "jsonpath={.data.serviceAccountName}")
	require.NoError(t, err, out)
	assert.Equal(t, operatorServiceAccount, strings.TrimSpace(out), "the identity is unchanged")
}

// externalService is a LoadBalancer Service labelled as node c-abcde's external Service of
// cluster c, with selector and port as given.
func externalService(clusterLabels, selector string, port int) string {
	labels := strings.TrimSuffix(clusterLabels, "}") + `,"valkey.gomomento.com/node":"c-abcde"}`
	return fmt.Sprintf(`{"apiVersion":"v1","kind":"Service","metadata":{"name":"c-abcde","labels":%s},`+
		`"spec":{"type":"LoadBalancer","selector":%s,"ports":[{"port":%d,"targetPort":%d}]}}`, labels, selector, port, port)
}

// TestBlockOwnerDeletionNeedsFinalizersRight: the dev cluster enforces owner-reference
// permissions (OwnerReferencesPermissionEnforcement, as hardened clusters do), so the
// operator's finalizers rule is exercised by every object it creates with blockOwnerDeletion.
// A user who may create ConfigMaps but not update a ValkeyCluster's finalizers is refused one
// that blocks a ValkeyCluster's deletion, and accepted without the block.
func TestBlockOwnerDeletionNeedsFinalizersRight(t *testing.T) {
	n := newNamespace(t, "e2e-ownerref")
	const user = "e2e-configmap-writer"
	n.kubectl("create", "role", "configmap-writer", "--verb=create", "--resource=configmaps")
	n.kubectl("create", "rolebinding", "configmap-writer", "--role=configmap-writer", "--user="+user)
	for _, tc := range []struct {
		block bool
		want  string // "" = admitted
	}{{false, ""}, {true, "cannot set blockOwnerDeletion"}} {
		t.Run(fmt.Sprintf("blockOwnerDeletion=%t", tc.block), func(t *testing.T) {
			cm := fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"owned","ownerReferences":[`+
				`{"apiVersion":"valkey.gomomento.com/v1alpha1","kind":"ValkeyCluster","name":"c","uid":"00000000-0000-0000-0000-000000000001","blockOwnerDeletion":%t}]}}`, tc.block)
			out, err := kubectlAs(cm, user, nil, "create", "--dry-run=server", "-f", "-", "-n", n.name)
			if tc.want == "" {
				assert.NoError(t, err, out)
			} else if assert.Error(t, err, "admitted: %s", out) {
				assert.Contains(t, err.Error(), tc.want)
			}
		})
	}
}
