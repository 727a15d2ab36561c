package crds_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"github.com/gomomento/valkey-operator/crds"
)

// TestDefinitionsParse checks the embedded YAML without an API server: six kinds, one group,
// categories [valkey] on each, and the status schema the user's status document fixes.
func TestDefinitionsParse(t *testing.T) {
	defs, err := crds.Definitions()
	require.NoError(t, err)
	kinds := map[string]*apiextensionsv1.CustomResourceDefinition{}
	for _, d := range defs {
		kinds[d.Spec.Names.Kind] = d
		assert.Equal(t, crds.Group, d.Spec.Group)
		assert.Equal(t, []string{"valkey"}, d.Spec.Names.Categories, d.Name)
		require.Len(t, d.Spec.Versions, 1)
		assert.Equal(t, crds.Version, d.Spec.Versions[0].Name)
	}
	assert.Len(t, kinds, 6)
	for kind, scope := range map[string]apiextensionsv1.ResourceScope{
		crds.KindImage: apiextensionsv1.ClusterScoped, crds.KindConfig: apiextensionsv1.ClusterScoped,
		crds.KindRole: apiextensionsv1.ClusterScoped, crds.KindCluster: apiextensionsv1.NamespaceScoped,
		crds.KindNode: apiextensionsv1.NamespaceScoped, crds.KindBackup: apiextensionsv1.NamespaceScoped,
	} {
		require.Contains(t, kinds, kind)
		assert.Equal(t, scope, kinds[kind].Spec.Scope, kind)
	}

	status := kinds[crds.KindCluster].Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["status"]
	assert.ElementsMatch(t, []string{"state", "targetSpec", "nodes", "message"}, keys(status.Properties))
	state := status.Properties["state"]
	var enum []string
	for _, v := range state.Enum {
		enum = append(enum, strings.Trim(string(v.Raw), `"`))
	}
	assert.Equal(t, []string{"Creating", "Active", "Updating", "Invalid"}, enum)
	assert.JSONEq(t, `"Creating"`, string(state.Default.Raw))
	assert.ElementsMatch(t, []string{"shards", "replicasPerShard"}, keys(status.Properties["targetSpec"].Properties))
}

// TestBackupDefinition: the names scripts rely on (issue #25), the status fields the backup
// controller and the manifest share, and a phase enum whose absent value means Pending.
func TestBackupDefinition(t *testing.T) {
	backup := definition(t, crds.KindBackup)
	assert.Equal(t, "valkeybackups", backup.Spec.Names.Plural)
	assert.Equal(t, []string{"vkb"}, backup.Spec.Names.ShortNames)
	v := backup.Spec.Versions[0]
	require.NotNil(t, v.Subresources)
	assert.NotNil(t, v.Subresources.Status, "status is a subresource, written by the operator only")

	root := v.Schema.OpenAPIV3Schema
	spec := root.Properties["spec"]
	assert.ElementsMatch(t, []string{"cluster", "storage"}, spec.Required)
	assert.ElementsMatch(t, []string{"endpoint", "bucket", "prefix", "region", "credentialsSecretRef", "caSecretRef"},
		keys(spec.Properties["storage"].Properties))

	status := root.Properties["status"]
	assert.ElementsMatch(t, []string{"phase", "startedAt", "completedAt", "message", "path", "bytes", "shards"}, keys(status.Properties))
	assert.Equal(t, []string{"Pending", "Running", "Completed", "Failed"}, enum(status.Properties["phase"]))
	assert.JSONEq(t, `"Pending"`, string(status.Properties["phase"].Default.Raw))
	shard := status.Properties["shards"].Items.Schema
	assert.ElementsMatch(t, []string{"index", "object", "bytes", "sha256", "keys", "slots", "rdbVersion", "valkeyVersion", "node"},
		keys(shard.Properties))

	var columns []string
	for _, c := range v.AdditionalPrinterColumns {
		columns = append(columns, c.Name+"="+c.JSONPath)
	}
	assert.Equal(t, []string{"CLUSTER=.spec.cluster", "PHASE=.status.phase", "SIZE=.status.bytes", "AGE=.metadata.creationTimestamp"}, columns)
}

// TestStorageSchemaIsOneDefinition: the S3 location is spelled three times in the YAML
// (ValkeyBackup spec.storage, ValkeyCluster spec.backup.storage and spec.restoreFrom.storage)
// because a CRD cannot reference another's schema. A backup written through one must be
// readable through the others, so the three copies must not drift: any difference in a
// field, a rule, a message or a description fails here.
func TestStorageSchemaIsOneDefinition(t *testing.T) {
	want := definition(t, crds.KindBackup).Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties["storage"]
	require.NotEmpty(t, want.Properties, "ValkeyBackup spec.storage")
	cluster := definition(t, crds.KindCluster).Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
	for _, path := range [][]string{{"backup", "storage"}, {"restoreFrom", "storage"}} {
		got := cluster
		for _, p := range path {
			require.Contains(t, got.Properties, p, "ValkeyCluster spec.%s", strings.Join(path, "."))
			got = got.Properties[p]
		}
		assert.Equal(t, want, got, "ValkeyCluster spec.%s differs from ValkeyBackup spec.storage", strings.Join(path, "."))
	}
}

// TestClusterBackupFields: spec.backup and spec.restoreFrom as the issue names them, keep's
// default and bounds, and the transition rule that fixes restoreFrom at creation.
func TestClusterBackupFields(t *testing.T) {
	spec := definition(t, crds.KindCluster).Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
	backup := spec.Properties["backup"]
	assert.ElementsMatch(t, []string{"schedule", "storage", "keep", "suspend"}, keys(backup.Properties))
	assert.ElementsMatch(t, []string{"schedule", "storage"}, backup.Required)
	keep := backup.Properties["keep"]
	assert.JSONEq(t, `7`, string(keep.Default.Raw))
	require.NotNil(t, keep.Minimum)
	assert.Equal(t, float64(1), *keep.Minimum)
	assert.ElementsMatch(t, []string{"backup", "storage", "path"}, keys(spec.Properties["restoreFrom"].Properties))

	var rules []string
	for _, r := range spec.XValidations {
		rules = append(rules, r.Rule)
	}
	assert.Contains(t, rules, "has(self.restoreFrom) == has(oldSelf.restoreFrom) && (!has(self.restoreFrom) || self.restoreFrom == oldSelf.restoreFrom)")
}

func definition(t *testing.T, kind string) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	defs, err := crds.Definitions()
	require.NoError(t, err)
	for _, d := range defs {
		if d.Spec.Names.Kind == kind {
			return d
		}
	}
	t.Fatalf("no CRD for %s", kind)
	return nil
}

func enum(s apiextensionsv1.JSONSchemaProps) []string {
	var out []string
	for _, v := range s.Enum {
		out = append(out, strings.Trim(string(v.Raw), `"`))
	}
	return out
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
