package crds_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"github.com/gomomento/valkey-operator/crds"
)

// TestDefinitionsParse checks the embedded YAML without an API server: five kinds, one group,
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
	assert.Len(t, kinds, 5)
	for kind, scope := range map[string]apiextensionsv1.ResourceScope{
		crds.KindImage: apiextensionsv1.ClusterScoped, crds.KindConfig: apiextensionsv1.ClusterScoped,
		crds.KindRole: apiextensionsv1.ClusterScoped, crds.KindCluster: apiextensionsv1.NamespaceScoped,
		crds.KindNode: apiextensionsv1.NamespaceScoped,
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

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
