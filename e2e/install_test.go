//go:build e2e

package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// The suite runs the operator the way deploy/ installs it: under the shipped ServiceAccount,
// with nothing but the shipped RBAC, and with the shipped admission policies in force. So a
// verb missing from deploy/30-rbac.yaml fails the test that needs it, and every pod the
// operator creates passes the pod policy or the suite fails.

// deployFiles are the manifests of deploy/ the suite installs. Not the Namespace, not the
// settings ConfigMap (the suite runs on the defaults unless a test writes one) and not the
// Deployment (the operator runs on the host, from the binary under test).
var deployFiles = []string{"20-admission-policy.yaml", "25-operator-writes-policy.yaml", "30-rbac.yaml"}

// operatorServiceAccount is the ServiceAccount of deploy/30-rbac.yaml.
const operatorServiceAccount = "valkey-operator"

// leaderLease is the operator's leader election Lease (cmd/manager's default ID).
const leaderLease = "valkey-operator-leader"

// operatorTokenLifetime outlives any run of the suite (its timeout is 40 minutes).
const operatorTokenLifetime = "3h"

// operatorUser is the operator's username as the API server sees it.
func operatorUser() string {
	return "system:serviceaccount:" + operatorNamespace + ":" + operatorServiceAccount
}

// readDeploy reads the objects of deployFiles.
func readDeploy(root string) ([]*unstructured.Unstructured, error) {
	var objs []*unstructured.Unstructured
	for _, name := range deployFiles {
		b, err := os.ReadFile(filepath.Join(root, "deploy", name))
		if err != nil {
			return nil, err
		}
		part, err := decodeObjects(string(b))
		if err != nil {
			return nil, fmt.Errorf("deploy/%s: %w", name, err)
		}
		objs = append(objs, part...)
	}
	return objs, nil
}

// decodeObjects reads a YAML (or JSON) stream of objects, skipping empty documents.
func decodeObjects(stream string) ([]*unstructured.Unstructured, error) {
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(stream), 4096)
	for {
		o := &unstructured.Unstructured{}
		if err := dec.Decode(&o.Object); errors.Is(err, io.EOF) {
			return objs, nil
		} else if err != nil {
			return nil, err
		}
		if len(o.Object) > 0 {
			objs = append(objs, o)
		}
	}
}

// moveToNamespace rewrites deploy/'s objects for an operator installed in namespace instead
// of valkey-operator, exactly what an installer changes: every namespaced object's namespace,
// the ServiceAccount subjects of the bindings, and the admission bindings' paramRef (the
// identity ConfigMap, whose own namespace names the operator). Nothing else names the
// namespace, so if the policies work here they work wherever the operator is installed.
func moveToNamespace(objs []*unstructured.Unstructured, namespace string) error {
	for _, o := range objs {
		if o.GetNamespace() != "" {
			o.SetNamespace(namespace)
		}
		switch o.GetKind() {
		case "RoleBinding", "ClusterRoleBinding":
			subjects, _, err := unstructured.NestedSlice(o.Object, "subjects")
			if err != nil {
				return err
			}
			for _, s := range subjects {
				if m, ok := s.(map[string]any); ok && m["kind"] == "ServiceAccount" {
					m["namespace"] = namespace
				}
			}
			if err := unstructured.SetNestedSlice(o.Object, subjects, "subjects"); err != nil {
				return err
			}
		case "ValidatingAdmissionPolicyBinding":
			if _, found, _ := unstructured.NestedString(o.Object, "spec", "paramRef", "namespace"); found {
				if err := unstructured.SetNestedField(o.Object, namespace, "spec", "paramRef", "namespace"); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// installDeploy applies deployFiles, moved to the suite's operator namespace, with kubectl.
// It returns the objects, for uninstallClusterScoped.
func installDeploy() ([]*unstructured.Unstructured, error) {
	objs, err := readDeploy(suite.root)
	if err != nil {
		return nil, err
	}
	if err := moveToNamespace(objs, operatorNamespace); err != nil {
		return nil, err
	}
	items := make([]any, len(objs))
	for i, o := range objs {
		items[i] = o.Object
	}
	list, err := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "List", "items": items})
	if err != nil {
		return nil, err
	}
	if out, err := kubectlRun(string(list), "apply", "-f", "-"); err != nil {
		return nil, fmt.Errorf("kubectl apply deploy/ (%s): %w\n%s", strings.Join(deployFiles, ", "), err, out)
	}
	return objs, nil
}

// uninstallClusterScoped deletes the cluster-scoped objects installDeploy made (policies,
// ClusterRole and its binding): with DEVCLUSTER_REUSE=1 the cluster outlives the suite, and
// the ValkeyNode policy would otherwise lock out `make dev`'s operator, which runs as admin.
func uninstallClusterScoped(objs []*unstructured.Unstructured) error {
	var errs []error
	for _, o := range objs {
		if o.GetNamespace() != "" {
			continue
		}
		kind := strings.ToLower(o.GetKind()) + "." + strings.Split(o.GetAPIVersion(), "/")[0]
		if out, err := kubectlRun("", "delete", kind, o.GetName(), "--ignore-not-found"); err != nil {
			errs = append(errs, fmt.Errorf("%w: %s", err, out))
		}
	}
	return errors.Join(errs...)
}

// writeOperatorKubeconfig writes a kubeconfig for the operator's ServiceAccount to path: the
// admin kubeconfig's server and CA with a token from the TokenRequest API (`kubectl create
// token`), so the operator process holds exactly the ServiceAccount's rights. The token is
// written only to the file (mode 0600), never logged.
func writeOperatorKubeconfig(adminKubeconfig, path string) error {
	return writeTokenKubeconfig(adminKubeconfig, path, operatorServiceAccount, operatorNamespace, operatorTokenLifetime)
}

// writeTokenKubeconfig writes a kubeconfig for ServiceAccount namespace/account to path, as
// writeOperatorKubeconfig does, its context in that namespace.
func writeTokenKubeconfig(adminKubeconfig, path, account, namespace, lifetime string) error {
	token, err := kubectlRun("", "create", "token", account, "-n", namespace, "--duration", lifetime)
	if err != nil {
		return fmt.Errorf("kubectl create token: %w", err)
	}
	admin, err := clientcmd.LoadFromFile(adminKubeconfig)
	if err != nil {
		return err
	}
	ctx, ok := admin.Contexts[admin.CurrentContext]
	if !ok || admin.Clusters[ctx.Cluster] == nil {
		return fmt.Errorf("%s: no cluster for the current context %q", adminKubeconfig, admin.CurrentContext)
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["devcluster"] = admin.Clusters[ctx.Cluster].DeepCopy()
	kc.AuthInfos[account] = &clientcmdapi.AuthInfo{Token: strings.TrimSpace(token)}
	kc.Contexts[account] = &clientcmdapi.Context{Cluster: "devcluster", AuthInfo: account, Namespace: namespace}
	kc.CurrentContext = account
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		return err
	}
	return os.Chmod(path, 0o600)
}
