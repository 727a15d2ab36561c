//go:build envtest

package reconciler_test

import (
	"context"
	"testing"

	"github.com/gomomento/valkey-operator/reconciler/views"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
)

// TestPersistenceTheSchemaCannotSee: what a ValkeyConfig's schema cannot check across a
// baseRef chain is named in a Warning Event and the cluster waits in Creating, with no node
// made: a persistence directive in a base's spec.valkey under its child's persistence mode;
// and, until nodes get volumes, any persistence mode other than None.
func TestPersistenceTheSchemaCannotSee(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	base := menu(t, ns, map[string]string{"appendonly": "yes"})
	withMode := func(name, baseRef string, p views.Persistence) string {
		c := views.Config{U: views.NewConfigObject()}
		c.U.SetName(name)
		c.SetBaseRef(baseRef)
		c.SetPersistence(p)
		require.NoError(t, k8s.Create(context.Background(), c.U))
		return name
	}
	conflict := withMode(ns+"-aof-over-appendonly", base, views.Persistence{Mode: views.PersistenceAOF, Size: "1Gi"})
	clean := withMode(ns+"-aof", ns+"-clean", views.Persistence{Mode: views.PersistenceAOF, Size: "1Gi"})
	createConfig(t, ns+"-clean", ns+"-img", "", nil)

	for _, tc := range []struct {
		name, config, message string
	}{
		{"a base's appendonly under its child's mode", conflict,
			`ValkeyConfig "` + base + `" sets appendonly in spec.valkey, but persistence mode AOF (from ValkeyConfig "` + conflict + `") sets it for the operator`},
		{"a mode that needs volumes", clean,
			`persistence mode AOF (from ValkeyConfig "` + clean + `") needs a volume per node, which this operator version does not create yet`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			key := createCluster(t, ns, tc.config[len(ns)+1:], tc.config, clusterOpts{shards: 1})
			waitEvent(t, key, corev1.EventTypeWarning, "ConfigUnresolved", tc.message)
			assert.Equal(t, views.StateCreating, getCluster(t, key).Status().State)
			assert.Empty(t, listNodes(t, key), "no node is made")
		})
	}
}
