//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/gomomento/valkey-operator/internal/poll"
)

// The ValkeyNode policy (deploy/20-admission-policy.yaml) on the dev cluster: users may read
// ValkeyNodes but not write them, and Kubernetes' own controllers can still finish every kind
// of deletion. Its kube-controller-manager runs with --use-service-account-credentials, so the
// garbage collector is system:serviceaccount:kube-system:generic-garbage-collector and the
// namespace controller system:serviceaccount:kube-system:namespace-controller.

const (
	nodePolicyMessage = "ValkeyNodes are managed by the Valkey operator and are read-only for users"
	nodePolicy        = "ValidatingAdmissionPolicy 'valkeynodes-operator-only'"
)

// kubectlAs runs kubectl as user, with groups, impersonated by the suite's admin identity.
func kubectlAs(stdin, user string, groups []string, args ...string) (string, error) {
	full := append([]string{"--as", user}, args...)
	for _, g := range groups {
		full = append(full, "--as-group", g)
	}
	return kubectlRun(stdin, full...)
}

// nodeManifest is a minimal ValkeyNode.
func nodeManifest(namespace, name string) string {
	return fmt.Sprintf(`{"apiVersion":"valkey.gomomento.com/v1alpha1","kind":"ValkeyNode","metadata":{"name":%q,"namespace":%q},`+
		`"spec":{"cluster":"c","shard":0,"image":"valkey/valkey:8.0.1","specHash":"x"}}`, name, namespace)
}

// waitPoliciesInForce waits until the API server enforces the policies installDeploy
// applied (a new binding takes effect a moment after it is written): a cluster admin is
// refused a ValkeyNode, the operator a pod on the host's network and an unlabelled ConfigMap
// (server-side dry runs: nothing is created).
func waitPoliciesInForce(timeout time.Duration) error {
	probes := []struct {
		what, user, manifest, policy string
		groups                       []string
	}{
		{"a cluster admin's ValkeyNode", "e2e-admin", nodeManifest(operatorNamespace, "policy-probe"), "valkeynodes-operator-only", []string{"system:masters"}},
		{"the operator's host-network pod", operatorUser(), fmt.Sprintf(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"policy-probe","namespace":%q},`+
			`"spec":{"hostNetwork":true,"containers":[{"name":"c","image":"x"}]}}`, operatorNamespace), "valkey-operator-pods", nil},
		{"the operator's unlabelled ConfigMap", operatorUser(), fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"policy-probe","namespace":%q}}`,
			operatorNamespace), "valkey-operator-objects", nil},
	}
	for _, p := range probes {
		err := poll.Until(context.Background(), 200*time.Millisecond, timeout, "admission policy refuses "+p.what, func(context.Context) (bool, string, error) {
			out, err := kubectlAs(p.manifest, p.user, p.groups, "create", "--dry-run=server", "-f", "-")
			if err == nil {
				return false, "accepted: " + out, nil
			}
			return strings.Contains(err.Error(), "ValidatingAdmissionPolicy '"+p.policy+"'"), err.Error(), nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// TestValkeyNodesAreReadOnlyForUsers: a user whose RBAC allows everything on ValkeyNodes, and
// a cluster admin, may read a live ValkeyNode but the policy refuses them every write:
// create, an edit of its labels or annotations, its status, delete. (An edit of its spec is
// refused before admission: the CRD fixes the spec at creation.) The node stays as it was.
func TestValkeyNodesAreReadOnlyForUsers(t *testing.T) {
	n := newNamespace(t, "e2e-readonly")
	const cluster = "readonly"
	applyMenu(n)
	n.applyCluster(cluster, "standard", 1, 0)
	var node string
	n.eventually(time.Minute, 200*time.Millisecond, "the cluster's ValkeyNode exists", func() (bool, string, error) {
		nodes, err := n.valkeyNodes(cluster)
		if err != nil || len(nodes) == 0 {
			return false, fmt.Sprint(err), nil
		}
		node = nodes[0].GetName()
		return true, "", nil
	})
	const editor = "e2e-valkeynode-editor"
	n.kubectl("create", "role", "valkeynode-editor", "--verb=*", "--resource=valkeynodes,valkeynodes/status")
	n.kubectl("create", "rolebinding", "valkeynode-editor", "--role=valkeynode-editor", "--user="+editor)
	can, _ := kubectlAs("", editor, nil, "auth", "can-i", "delete", "valkeynodes", "-n", n.name)
	require.Equal(t, "yes", strings.TrimSpace(can), "RBAC lets the editor write ValkeyNodes: only the policy refuses")

	users := []struct {
		name   string
		groups []string
	}{{editor, nil}, {"e2e-admin", []string{"system:masters"}}}
	writes := []struct {
		name  string
		stdin string
		args  []string
	}{
		{"create", nodeManifest(n.name, cluster+"-fffff"), []string{"create", "-f", "-"}},
		{"edit labels", "", []string{"label", "valkeynode", node, "valkey.gomomento.com/shard=7", "--overwrite"}},
		{"edit annotations", "", []string{"annotate", "valkeynode", node, "example.com/note=mine"}},
		{"edit status", "", []string{"patch", "valkeynode", node, "--subresource=status", "--type=merge", "-p", `{"status":{"lifecycle":"Leaving"}}`}},
		{"delete", "", []string{"delete", "valkeynode", node, "--wait=false"}},
	}
	for _, u := range users {
		t.Run(u.name, func(t *testing.T) {
			out, err := kubectlAs("", u.name, u.groups, "get", "valkeynode", node, "-n", n.name, "-o", "name")
			if assert.NoError(t, err, "users may read ValkeyNodes") {
				assert.Equal(t, "valkeynode.valkey.gomomento.com/"+node, strings.TrimSpace(out))
			}
			for _, w := range writes {
				out, err := kubectlAs(w.stdin, u.name, u.groups, append(w.args, "-n", n.name)...)
				if assert.Error(t, err, "%s: %s", w.name, out) {
					assert.Contains(t, err.Error(), nodePolicy, w.name)
					assert.Contains(t, err.Error(), nodePolicyMessage, w.name)
				}
			}
		})
	}
	// The operator keeps writing the node's status, so compare what the users tried to write.
	nodes, err := n.valkeyNodes(cluster)
	require.NoError(t, err)
	require.Len(t, nodes, 1, "no node was created or deleted")
	assert.Equal(t, node, nodes[0].GetName())
	assert.Equal(t, "0", nodes[0].GetLabels()["valkey.gomomento.com/shard"], "labels unchanged")
	assert.NotContains(t, nodes[0].GetAnnotations(), "example.com/note", "annotations unchanged")
	lifecycle, _, _ := unstructured.NestedString(nodes[0].Object, "status", "lifecycle")
	assert.NotEqual(t, "Leaving", lifecycle, "status unchanged")
	assert.Nil(t, nodes[0].GetDeletionTimestamp(), "not deleted")
}

// TestDeletionsCompleteUnderThePolicies: with the policies in force, `kubectl delete
// valkeycluster --cascade=foreground` (the garbage collector deletes the ValkeyNodes and
// then removes their foregroundDeletion finalizer), `--cascade=orphan` (it removes the
// ownerReferences of the ValkeyNodes and the cluster's other objects) and deleting the
// namespace (the namespace controller deletes what the orphaning left) all complete.
func TestDeletionsCompleteUnderThePolicies(t *testing.T) {
	n := newNamespace(t, "e2e-cascade")
	applyMenu(n)
	for _, c := range []string{"foreground", "orphan"} {
		n.applyCluster(c, "standard", 1, 0)
	}
	// Active: the pods run, so the foreground deletion waits for a real pod's termination.
	for _, c := range []string{"foreground", "orphan"} {
		n.waitState(c, "Active", 3*time.Minute)
	}

	start := time.Now()
	n.kubectl("delete", "valkeycluster", "foreground", "--cascade=foreground", "--timeout=2m")
	t.Logf("e2e: foreground deletion completed in %.1fs", time.Since(start).Seconds())
	nodes, err := n.valkeyNodes("foreground")
	require.NoError(t, err)
	assert.Empty(t, nodes, "a foreground deletion ends after the ValkeyNodes are gone")
	pods, err := n.pods("foreground")
	require.NoError(t, err)
	assert.Empty(t, pods, "and after their pods, which block their deletion")

	start = time.Now()
	n.kubectl("delete", "valkeycluster", "orphan", "--cascade=orphan", "--timeout=2m")
	t.Logf("e2e: orphan deletion completed in %.1fs", time.Since(start).Seconds())
	nodes, err = n.valkeyNodes("orphan")
	require.NoError(t, err)
	require.Len(t, nodes, 1, "an orphan deletion leaves the ValkeyNode")
	assert.Empty(t, nodes[0].GetOwnerReferences(), "the garbage collector removed the ValkeyNode's owner reference")
	for _, kind := range []string{"service/orphan", "secret/orphan-auth", "configmap/orphan-acl"} {
		assert.Empty(t, n.kubectl("get", kind, "-o", "jsonpath={.metadata.ownerReferences}"), kind)
	}

	start = time.Now()
	n.kubectl("delete", "namespace", n.name, "--timeout=3m")
	t.Logf("e2e: namespace deletion (an orphaned ValkeyNode and its pod) completed in %.1fs", time.Since(start).Seconds())
	out, err := kubectlRun("", "get", "namespace", n.name, "--ignore-not-found", "-o", "name")
	require.NoError(t, err)
	assert.Empty(t, strings.TrimSpace(out), "the namespace is gone")
}
