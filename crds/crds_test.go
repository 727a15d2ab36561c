//go:build envtest

package crds_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/gomomento/valkey-operator/crds"
	kubectlcmd "github.com/gomomento/valkey-operator/internal/kubectl"
	"github.com/gomomento/valkey-operator/internal/poll"
	"github.com/gomomento/valkey-operator/internal/testenv"
)

// TestOnRealAPIServer installs the CRDs on a real kube-apiserver and exercises them the way a
// user would: kubectl apply of the examples and of malformed manifests, updates that the CEL
// transition rules must refuse, and kubectl's printer columns.
func TestOnRealAPIServer(t *testing.T) {
	env := testenv.Start(t)
	ctx := context.Background()

	t.Run("every CRD is Established", func(t *testing.T) {
		ext, err := apiextensionsclient.NewForConfig(env.Config)
		require.NoError(t, err)
		defs, err := crds.Definitions()
		require.NoError(t, err)
		for _, d := range defs {
			got, err := ext.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, d.Name, metav1.GetOptions{})
			require.NoError(t, err)
			assert.True(t, established(got), "%s not Established", d.Name)
		}
	})

	t.Run("kubectl explain describes every field", func(t *testing.T) {
		defs, err := crds.Definitions()
		require.NoError(t, err)
		for _, d := range defs {
			resource := d.Spec.Names.Plural
			for _, v := range d.Spec.Versions {
				if !v.Served {
					continue
				}
				apiVersion := "--api-version=" + d.Spec.Group + "/" + v.Name
				// The API server publishes a CRD's OpenAPI shortly after it is Established.
				require.NoError(t, poll.Until(ctx, 200*time.Millisecond, 30*time.Second, "kubectl explain "+resource, func(ctx context.Context) (bool, string, error) {
					_, err := kubectl(env, "", "explain", resource, apiVersion)
					if err != nil {
						return false, err.Error(), nil
					}
					return true, "", nil
				}))
				for _, path := range explainPaths(resource, v.Schema.OpenAPIV3Schema) {
					out, err := kubectl(env, "", "explain", path, apiVersion)
					require.NoError(t, err, out)
					assert.NotContains(t, out, "<empty>", "kubectl explain %s:\n%s", path, out)
					assert.NotContains(t, out, "<no description>", "kubectl explain %s:\n%s", path, out)
				}
			}
		}
	})

	t.Run("kubectl get valkey lists every kind", func(t *testing.T) {
		out, err := kubectl(env, "", "api-resources", "--categories=valkey", "-o", "name")
		require.NoError(t, err, out)
		for _, r := range []string{"valkeyimages", "valkeyconfigs", "valkeyroles", "valkeyclusters", "valkeynodes", "valkeybackups"} {
			assert.Contains(t, out, r+"."+crds.Group)
		}
	})

	t.Run("every example applies", func(t *testing.T) {
		examples, err := filepath.Glob(filepath.Join(crds.Dir(), "..", "examples", "*.yaml"))
		require.NoError(t, err)
		require.NotEmpty(t, examples)
		for _, f := range examples {
			manifest := withPlaceholders(t, f)
			out, err := kubectlcmd.Runner{Kubeconfig: env.Kubeconfig, Timeout: time.Minute}.RunWithInput(ctx, manifest, "apply", "-n", "default", "-f", "-")
			assert.NoError(t, err, "%s: %s", filepath.Base(f), out)
		}
	})

	t.Run("malformed manifests are rejected with their message", func(t *testing.T) {
		fixtures, err := filepath.Glob(filepath.Join("testdata", "invalid", "*.yaml"))
		require.NoError(t, err)
		require.GreaterOrEqual(t, len(fixtures), 15)
		for _, f := range fixtures {
			t.Run(strings.TrimSuffix(filepath.Base(f), ".yaml"), func(t *testing.T) {
				want := expectation(t, f)
				out, err := kubectl(env, "", "create", "-f", f)
				require.Error(t, err, "kubectl accepted %s: %s", f, out)
				assert.Contains(t, err.Error(), want)
			})
		}
	})

	t.Run("tls cannot be added or removed, secretRef may change", func(t *testing.T) {
		dyn, err := dynamic.NewForConfig(env.Config)
		require.NoError(t, err)
		clusters := dyn.Resource(gvr(crds.KindCluster, "valkeyclusters")).Namespace("default")
		plain := object(t, crds.KindCluster, "default", "tls-plain", `{"configRef":"standard","shards":1}`)
		secure := object(t, crds.KindCluster, "default", "tls-secure", `{"configRef":"standard","shards":1,"tls":{"secretRef":"a"}}`)
		for _, o := range []*unstructured.Unstructured{plain, secure} {
			_, err := clusters.Create(ctx, o, metav1.CreateOptions{})
			require.NoError(t, err)
		}
		const msg = "spec.tls cannot be added or removed after the cluster is created"

		got, err := clusters.Get(ctx, "tls-plain", metav1.GetOptions{})
		require.NoError(t, err)
		require.NoError(t, unstructured.SetNestedField(got.Object, "a", "spec", "tls", "secretRef"))
		_, err = clusters.Update(ctx, got, metav1.UpdateOptions{})
		require.Error(t, err, "adding tls")
		assert.Contains(t, err.Error(), msg)

		got, err = clusters.Get(ctx, "tls-secure", metav1.GetOptions{})
		require.NoError(t, err)
		unstructured.RemoveNestedField(got.Object, "spec", "tls")
		_, err = clusters.Update(ctx, got, metav1.UpdateOptions{})
		require.Error(t, err, "removing tls")
		assert.Contains(t, err.Error(), msg)

		got, err = clusters.Get(ctx, "tls-secure", metav1.GetOptions{})
		require.NoError(t, err)
		require.NoError(t, unstructured.SetNestedField(got.Object, "b", "spec", "tls", "secretRef"))
		_, err = clusters.Update(ctx, got, metav1.UpdateOptions{})
		assert.NoError(t, err, "changing secretRef")
	})

	t.Run("a volume size may grow, not shrink; mode None leaves spec.valkey its persistence", func(t *testing.T) {
		dyn, err := dynamic.NewForConfig(env.Config)
		require.NoError(t, err)
		configs := dyn.Resource(gvr(crds.KindConfig, "valkeyconfigs"))
		cache := object(t, crds.KindConfig, "", "persist-none", `{"imageRef":"valkey-8.0","persistence":{"mode":"None"},"valkey":{"save":"60 1","appendonly":"yes"}}`)
		_, err = configs.Create(ctx, cache, metav1.CreateOptions{})
		require.NoError(t, err, "mode None: spec.valkey may set save and appendonly")

		durable := object(t, crds.KindConfig, "", "persist-aof", `{"imageRef":"valkey-8.0","persistence":{"mode":"AOF","size":"1Gi"}}`)
		_, err = configs.Create(ctx, durable, metav1.CreateOptions{})
		require.NoError(t, err)
		for _, tc := range []struct {
			size any
			ok   bool
		}{{"2Gi", true}, {"2048Mi", true}, {int64(4294967296), true}, {"3Gi", false}, {"1Gi", false}} {
			got, err := configs.Get(ctx, "persist-aof", metav1.GetOptions{})
			require.NoError(t, err)
			require.NoError(t, unstructured.SetNestedField(got.Object, tc.size, "spec", "persistence", "size"))
			_, err = configs.Update(ctx, got, metav1.UpdateOptions{})
			if tc.ok {
				assert.NoError(t, err, "size %v", tc.size)
				continue
			}
			if assert.Error(t, err, "size %v", tc.size) {
				assert.Contains(t, err.Error(), "spec.persistence.size cannot shrink: a volume can only grow")
			}
		}
	})

	t.Run("ValkeyNode spec is fixed at creation", func(t *testing.T) {
		dyn, err := dynamic.NewForConfig(env.Config)
		require.NoError(t, err)
		nodes := dyn.Resource(gvr(crds.KindNode, "valkeynodes")).Namespace("default")
		n := object(t, crds.KindNode, "default", "fixed-1a2b3", `{"cluster":"fixed","shard":0,"image":"valkey/valkey:8.0.1","specHash":"x"}`)
		_, err = nodes.Create(ctx, n, metav1.CreateOptions{})
		require.NoError(t, err)
		got, err := nodes.Get(ctx, "fixed-1a2b3", metav1.GetOptions{})
		require.NoError(t, err)
		require.NoError(t, unstructured.SetNestedField(got.Object, int64(2), "spec", "shard"))
		_, err = nodes.Update(ctx, got, metav1.UpdateOptions{})
		require.Error(t, err)
		assert.Contains(t, err.Error(), "ValkeyNode spec is fixed at creation")
	})

	// The printer columns of docs/status.md (the "seed" of this subtest's name is the status
	// document they were first specified in, which docs/status.md replaces).
	t.Run("kubectl prints the seed's columns", func(t *testing.T) {
		dyn, err := dynamic.NewForConfig(env.Config)
		require.NoError(t, err)
		_, err = kubectl(env, "", "create", "namespace", "my-app")
		require.NoError(t, err)
		cluster := object(t, crds.KindCluster, "my-app", "my-cluster", `{"configRef":"standard","shards":3,"replicasPerShard":1}`)
		clusters := dyn.Resource(gvr(crds.KindCluster, "valkeyclusters")).Namespace("my-app")
		created, err := clusters.Create(ctx, cluster, metav1.CreateOptions{})
		require.NoError(t, err)
		require.NoError(t, unstructured.SetNestedField(created.Object, "Active", "status", "state"))
		_, err = clusters.UpdateStatus(ctx, created, metav1.UpdateOptions{})
		require.NoError(t, err)

		node := object(t, crds.KindNode, "my-app", "my-cluster-1a4f2", `{"cluster":"my-cluster","shard":0,"image":"valkey/valkey:9.0.0","specHash":"x"}`)
		nodes := dyn.Resource(gvr(crds.KindNode, "valkeynodes")).Namespace("my-app")
		created, err = nodes.Create(ctx, node, metav1.CreateOptions{})
		require.NoError(t, err)
		require.NoError(t, unstructured.SetNestedField(created.Object, "Active", "status", "lifecycle"))
		_, err = nodes.UpdateStatus(ctx, created, metav1.UpdateOptions{})
		require.NoError(t, err)

		out, err := kubectl(env, "my-app", "get", "valkeyclusters")
		require.NoError(t, err, out)
		assert.Equal(t, [][]string{
			{"NAME", "CONFIG", "SHARDS", "REPLICAS", "STATE"},
			{"my-cluster", "standard", "3", "1", "Active"},
		}, kubectlcmd.Table(out))

		out, err = kubectl(env, "my-app", "get", "valkeynodes")
		require.NoError(t, err, out)
		assert.Equal(t, [][]string{
			{"NAME", "CLUSTER", "IMAGE", "LIFECYCLE"},
			{"my-cluster-1a4f2", "my-cluster", "valkey/valkey:9.0.0", "Active"},
		}, kubectlcmd.Table(out))
	})

	t.Run("replicasPerShard defaults to 1 and a new cluster's state to Creating", func(t *testing.T) {
		dyn, err := dynamic.NewForConfig(env.Config)
		require.NoError(t, err)
		clusters := dyn.Resource(gvr(crds.KindCluster, "valkeyclusters")).Namespace("default")
		created, err := clusters.Create(ctx, object(t, crds.KindCluster, "default", "defaults", `{"configRef":"standard","shards":2}`), metav1.CreateOptions{})
		require.NoError(t, err)
		replicas, _, _ := unstructured.NestedInt64(created.Object, "spec", "replicasPerShard")
		assert.Equal(t, int64(1), replicas)
		require.NoError(t, unstructured.SetNestedField(created.Object, "", "status", "message"))
		updated, err := clusters.UpdateStatus(ctx, created, metav1.UpdateOptions{})
		require.NoError(t, err)
		state, _, _ := unstructured.NestedString(updated.Object, "status", "state")
		assert.Equal(t, "Creating", state)
	})

	t.Run("a ValkeyBackup is printed with its size and its spec is fixed at creation", func(t *testing.T) {
		dyn, err := dynamic.NewForConfig(env.Config)
		require.NoError(t, err)
		_, err = kubectl(env, "", "create", "namespace", "backups")
		require.NoError(t, err)
		backups := dyn.Resource(gvr(crds.KindBackup, "valkeybackups")).Namespace("backups")
		created, err := backups.Create(ctx, object(t, crds.KindBackup, "backups", "nightly", `{"cluster":"my-cluster","storage":`+validStorage+`}`), metav1.CreateOptions{})
		require.NoError(t, err)

		// A status written without a phase reads Pending (the schema default).
		require.NoError(t, unstructured.SetNestedField(created.Object, "waiting for my-cluster to be Active", "status", "message"))
		updated, err := backups.UpdateStatus(ctx, created, metav1.UpdateOptions{})
		require.NoError(t, err)
		phase, _, _ := unstructured.NestedString(updated.Object, "status", "phase")
		assert.Equal(t, "Pending", phase)

		require.NoError(t, unstructured.SetNestedField(updated.Object, "Completed", "status", "phase"))
		require.NoError(t, unstructured.SetNestedField(updated.Object, int64(123456789), "status", "bytes"))
		require.NoError(t, unstructured.SetNestedSlice(updated.Object, []any{map[string]any{
			"index": int64(0), "object": "dev/backups/my-cluster/nightly/shard-0.rdb", "bytes": int64(123456789),
			"sha256": strings.Repeat("ab", 32), "keys": int64(1000000), "slots": []any{"0-5460"}, "rdbVersion": int64(11),
			"valkeyVersion": "8.0.1", "node": "my-cluster-1a4f2",
		}}, "status", "shards"))
		_, err = backups.UpdateStatus(ctx, updated, metav1.UpdateOptions{})
		require.NoError(t, err)

		for _, resource := range []string{"valkeybackups", "vkb"} {
			out, err := kubectl(env, "backups", "get", resource)
			require.NoError(t, err, out)
			rows := kubectlcmd.Table(out)
			require.Len(t, rows, 2, out)
			assert.Equal(t, []string{"NAME", "CLUSTER", "PHASE", "SIZE", "AGE"}, rows[0])
			require.Len(t, rows[1], 5, out)
			assert.Equal(t, []string{"nightly", "my-cluster", "Completed", "123456789"}, rows[1][:4], resource)
		}

		const fixed = "ValkeyBackup spec is fixed at creation"
		for _, edit := range []struct {
			name  string
			value any
			path  []string
		}{
			{"cluster", "other-cluster", []string{"spec", "cluster"}},
			{"bucket", "elsewhere", []string{"spec", "storage", "bucket"}},
			{"credentials", "other-secret", []string{"spec", "storage", "credentialsSecretRef", "name"}},
		} {
			got, err := backups.Get(ctx, "nightly", metav1.GetOptions{})
			require.NoError(t, err)
			require.NoError(t, unstructured.SetNestedField(got.Object, edit.value, edit.path...))
			_, err = backups.Update(ctx, got, metav1.UpdateOptions{})
			if assert.Error(t, err, "editing %s", edit.name) {
				assert.Contains(t, err.Error(), fixed)
			}
		}
		got, err := backups.Get(ctx, "nightly", metav1.GetOptions{})
		require.NoError(t, err)
		got.SetLabels(map[string]string{"team": "payments"})
		_, err = backups.Update(ctx, got, metav1.UpdateOptions{})
		assert.NoError(t, err, "labels are not the spec")
	})

	t.Run("backup and restore fields: what is admitted and what is refused with its message", func(t *testing.T) {
		dyn, err := dynamic.NewForConfig(env.Config)
		require.NoError(t, err)
		resources := map[string]dynamic.ResourceInterface{
			crds.KindBackup:  dyn.Resource(gvr(crds.KindBackup, "valkeybackups")).Namespace("default"),
			crds.KindCluster: dyn.Resource(gvr(crds.KindCluster, "valkeyclusters")).Namespace("default"),
		}
		for i, tc := range backupAdmissionCases() {
			t.Run(tc.name, func(t *testing.T) {
				o := object(t, tc.kind, "default", fmt.Sprintf("admission-%d", i), tc.spec)
				got, err := resources[tc.kind].Create(ctx, o, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
				if tc.want == "" {
					require.NoError(t, err, tc.spec)
					if tc.check != nil {
						tc.check(t, got)
					}
					return
				}
				if assert.Error(t, err, "admitted: %s", tc.spec) {
					assert.Contains(t, err.Error(), tc.want)
				}
			})
		}
	})

	t.Run("restoreFrom cannot be added, changed or removed; backup may change", func(t *testing.T) {
		dyn, err := dynamic.NewForConfig(env.Config)
		require.NoError(t, err)
		clusters := dyn.Resource(gvr(crds.KindCluster, "valkeyclusters")).Namespace("default")
		for _, o := range []*unstructured.Unstructured{
			object(t, crds.KindCluster, "default", "restored", `{"configRef":"standard","shards":3,"restoreFrom":{"backup":"nightly"}}`),
			object(t, crds.KindCluster, "default", "restored-elsewhere", `{"configRef":"standard","shards":3,"restoreFrom":{"storage":`+validStorage+`,"path":"prod/my-cluster/my-cluster-20261207030000"}}`),
			object(t, crds.KindCluster, "default", "fresh", `{"configRef":"standard","shards":3}`),
		} {
			_, err := clusters.Create(ctx, o, metav1.CreateOptions{})
			require.NoError(t, err)
		}
		const msg = "spec.restoreFrom is fixed at creation: it cannot be added, changed or removed"
		for _, tc := range []struct {
			name, cluster string
			edit          func(u *unstructured.Unstructured) error
			want          string // "" = admitted
		}{
			{"change the backup", "restored", func(u *unstructured.Unstructured) error {
				return unstructured.SetNestedField(u.Object, "weekly", "spec", "restoreFrom", "backup")
			}, msg},
			{"remove it", "restored", func(u *unstructured.Unstructured) error {
				unstructured.RemoveNestedField(u.Object, "spec", "restoreFrom")
				return nil
			}, msg},
			{"change the path", "restored-elsewhere", func(u *unstructured.Unstructured) error {
				return unstructured.SetNestedField(u.Object, "prod/my-cluster/my-cluster-20261208030000", "spec", "restoreFrom", "path")
			}, msg},
			{"change the storage's bucket", "restored-elsewhere", func(u *unstructured.Unstructured) error {
				return unstructured.SetNestedField(u.Object, "other-bucket", "spec", "restoreFrom", "storage", "bucket")
			}, msg},
			{"add it", "fresh", func(u *unstructured.Unstructured) error {
				return unstructured.SetNestedField(u.Object, "nightly", "spec", "restoreFrom", "backup")
			}, msg},
			{"scale a restored cluster", "restored", func(u *unstructured.Unstructured) error {
				return unstructured.SetNestedField(u.Object, int64(4), "spec", "shards")
			}, ""},
			{"add a schedule", "restored", func(u *unstructured.Unstructured) error {
				return unstructured.SetNestedMap(u.Object, map[string]any{"schedule": "@daily", "storage": map[string]any{
					"endpoint": "http://10.0.0.5:8333", "bucket": "valkey-backups", "credentialsSecretRef": map[string]any{"name": "object-store"}}},
					"spec", "backup")
			}, ""},
			{"change the schedule and suspend it", "restored", func(u *unstructured.Unstructured) error {
				if err := unstructured.SetNestedField(u.Object, "0 */6 * * *", "spec", "backup", "schedule"); err != nil {
					return err
				}
				return unstructured.SetNestedField(u.Object, true, "spec", "backup", "suspend")
			}, ""},
			{"remove the schedule", "restored", func(u *unstructured.Unstructured) error {
				unstructured.RemoveNestedField(u.Object, "spec", "backup")
				return nil
			}, ""},
		} {
			t.Run(tc.name, func(t *testing.T) {
				got, err := clusters.Get(ctx, tc.cluster, metav1.GetOptions{})
				require.NoError(t, err)
				require.NoError(t, tc.edit(got))
				_, err = clusters.Update(ctx, got, metav1.UpdateOptions{})
				if tc.want == "" {
					assert.NoError(t, err)
					return
				}
				if assert.Error(t, err) {
					assert.Contains(t, err.Error(), tc.want)
				}
			})
		}
	})

	// Last: once the admission policy is installed only the operator may write ValkeyNodes.
	t.Run("deploy manifests apply and only the operator writes ValkeyNodes", func(t *testing.T) {
		out, err := kubectl(env, "", "apply", "-f", filepath.Join(crds.Dir(), "..", "deploy"))
		require.NoError(t, err, out)

		const operator = "system:serviceaccount:valkey-operator:valkey-operator"
		asUser := func(name string, groups ...string) dynamic.ResourceInterface {
			cfg := rest.CopyConfig(env.Config)
			cfg.Impersonate = rest.ImpersonationConfig{UserName: name, Groups: groups}
			dyn, err := dynamic.NewForConfig(cfg)
			require.NoError(t, err)
			return dyn.Resource(gvr(crds.KindNode, "valkeynodes")).Namespace("default")
		}
		node := func(name string) *unstructured.Unstructured {
			return object(t, crds.KindNode, "default", name, `{"cluster":"c","shard":0,"image":"valkey/valkey:8.0.1","specHash":"x"}`)
		}

		// The policy takes effect asynchronously once its binding is seen: poll until a user
		// with full RBAC rights is refused, then check the message.
		user := asUser("jane", "system:masters")
		var denied error
		require.NoError(t, poll.Until(ctx, 200*time.Millisecond, 30*time.Second, "admission policy refuses a user", func(ctx context.Context) (bool, string, error) {
			_, denied = user.Create(ctx, node("c-0000a"), metav1.CreateOptions{})
			if denied == nil {
				_ = user.Delete(ctx, "c-0000a", metav1.DeleteOptions{})
			}
			return denied != nil, "create allowed", nil
		}))
		assert.Contains(t, denied.Error(), "ValkeyNodes are managed by the Valkey operator and are read-only for users")
		_, err = user.List(ctx, metav1.ListOptions{})
		assert.NoError(t, err, "users may still read ValkeyNodes")

		// The operator's service account, with nothing but the shipped RBAC, may write them.
		op := asUser(operator, "system:serviceaccounts", "system:serviceaccounts:valkey-operator", "system:authenticated")
		created, err := op.Create(ctx, node("c-0000b"), metav1.CreateOptions{})
		require.NoError(t, err)
		require.NoError(t, unstructured.SetNestedField(created.Object, "Joining", "status", "lifecycle"))
		_, err = op.UpdateStatus(ctx, created, metav1.UpdateOptions{})
		assert.NoError(t, err)
		_, err = user.UpdateStatus(ctx, created, metav1.UpdateOptions{})
		assert.Error(t, err, "users may not write ValkeyNode status")
		assert.Error(t, user.Delete(ctx, "c-0000b", metav1.DeleteOptions{}), "users may not delete ValkeyNodes")
		assert.NoError(t, op.Delete(ctx, "c-0000b", metav1.DeleteOptions{}))
	})
}

// examplePlaceholders stand in for the values of .dev/object-store.env that the backup
// example's ${...} placeholders name (the example's header tells users to fill them with
// envsubst): each is a value the schema accepts, as the dev object store's are.
var examplePlaceholders = map[string]string{
	"ENDPOINT":   "http://172.18.0.1:8333",
	"BUCKET":     "valkey-backups",
	"ACCESS_KEY": "dev-access-key",
	"SECRET_KEY": "dev-secret-key",
}

// withPlaceholders reads an example and fills its ${NAME} placeholders from
// examplePlaceholders; a placeholder it does not know fails the test, so a new one cannot
// reach the API server unfilled.
func withPlaceholders(t *testing.T, path string) string {
	t.Helper()
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	return os.Expand(string(raw), func(name string) string {
		v, ok := examplePlaceholders[name]
		assert.True(t, ok, "%s: unknown placeholder ${%s}", filepath.Base(path), name)
		return v
	})
}

// explainPaths lists the kubectl explain paths (resource.field.field, arrays traversed
// transparently as kubectl does) of the resource itself and of every field that has fields of
// its own, directly or through its array items. kubectl explain of such a path prints the
// node's description and the description of each of its fields, so together they show every
// field's description.
func explainPaths(resource string, root *apiextensionsv1.JSONSchemaProps) []string {
	out := []string{resource}
	var walk func(path string, s *apiextensionsv1.JSONSchemaProps)
	walk = func(path string, s *apiextensionsv1.JSONSchemaProps) {
		for name, p := range s.Properties {
			for p.Items != nil && p.Items.Schema != nil && len(p.Properties) == 0 {
				p = *p.Items.Schema
			}
			if len(p.Properties) > 0 {
				out = append(out, path+"."+name)
				walk(path+"."+name, &p)
			}
		}
	}
	walk(resource, root)
	sort.Strings(out)
	return out
}

func established(crd *apiextensionsv1.CustomResourceDefinition) bool {
	for _, c := range crd.Status.Conditions {
		if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
			return true
		}
	}
	return false
}

func gvr(kind, resource string) schema.GroupVersionResource {
	return crds.GVK(kind).GroupVersion().WithResource(resource)
}

func object(t *testing.T, kind, namespace, name, specJSON string) *unstructured.Unstructured {
	t.Helper()
	var spec map[string]any
	require.NoError(t, yaml.Unmarshal([]byte(specJSON), &spec))
	o := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	o.SetGroupVersionKind(crds.GVK(kind))
	o.SetName(name)
	o.SetNamespace(namespace)
	return o
}

// expectation reads the "# expect: <message>" header of a negative fixture.
func expectation(t *testing.T, path string) string {
	t.Helper()
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "# expect: "); ok {
			return rest
		}
	}
	t.Fatalf("%s has no '# expect: ' line", path)
	return ""
}

func kubectl(env *testenv.Env, namespace string, args ...string) (string, error) {
	return kubectlcmd.Runner{Kubeconfig: env.Kubeconfig, Namespace: namespace, Timeout: time.Minute}.Run(context.Background(), args...)
}
