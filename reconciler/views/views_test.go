package views_test

import (
	"testing"

	"github.com/gomomento/valkey-operator/reconciler/views"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestClusterRoundTrip: every setter stores values that survive a deep copy (the operation
// that panics on Go int or []string) and read back identically.
func TestClusterRoundTrip(t *testing.T) {
	c := views.Cluster{U: views.NewClusterObject()}
	c.SetConfigRef("std")
	c.SetShards(3)
	c.SetReplicasPerShard(2)
	c.SetTLSSecretRef("tls")
	c.SetPlacement(views.Placement{Zones: []string{"a"}, ZoneSpread: "required", NodeSelector: map[string]string{"k": "v"}})
	c.SetPodAnnotations(map[string]string{"x": "y"})
	acl := []views.ACLUser{{Username: "app", PasswordHashes: []string{"h"}, Permissions: []views.ACLPermission{
		{RoleRef: "r", Keys: []views.KeyPermission{{Pattern: "a:*", Access: "read"}}, Channels: []string{"c"}}}}}
	c.SetACL(acl)
	c.SetStatus(views.Status{State: views.StateCreating, Target: &views.TargetSpec{Shards: 3, ReplicasPerShard: 2}})

	cp := views.Cluster{U: c.U.DeepCopy()}
	assert.Equal(t, "std", cp.ConfigRef())
	assert.Equal(t, 3, cp.Shards())
	assert.Equal(t, 2, cp.ReplicasPerShard())
	assert.True(t, cp.TLSEnabled())
	assert.Equal(t, "tls", cp.TLSSecretRef())
	assert.Equal(t, "required", cp.Placement().ZoneSpread)
	assert.Equal(t, acl, cp.ACL())
	assert.Equal(t, []string{"r"}, cp.RoleRefs())
	assert.True(t, cp.Status().Equal(views.Status{State: views.StateCreating, Target: &views.TargetSpec{Shards: 3, ReplicasPerShard: 2}}))

	cp.SetStatus(views.Status{State: views.StateActive})
	assert.Nil(t, cp.Status().Target, "targetSpec removed")
	assert.Equal(t, "", cp.Status().Message)
}

func TestEffectiveState(t *testing.T) {
	for stored, want := range map[string]string{"": "Creating", "Updating": "Active", "Invalid": "Invalid", "Active": "Active"} {
		c := views.Cluster{U: views.NewClusterObject()}
		if stored != "" {
			require.NoError(t, unstructured.SetNestedField(c.U.Object, stored, "status", "state"))
		}
		assert.Equal(t, want, c.EffectiveState(), "stored %q", stored)
	}
	c := views.Cluster{U: views.NewClusterObject()}
	assert.Equal(t, 1, c.ReplicasPerShard(), "schema default")
}

func TestNodeRoundTrip(t *testing.T) {
	n := views.Node{U: views.NewNodeObject()}
	spec := views.NodeSpec{Cluster: "c", Shard: 2, Image: "r:t", Version: "9.0.0", Valkey: map[string]string{"a": "b"},
		Resources: views.Resources{CPU: "1", Memory: "1Gi"}, Placement: views.Placement{Zones: []string{"z"}, ZoneSpread: "bestEffort"},
		TLSSecretRef: "tls", Exporter: true, SpecHash: "h"}
	n.SetSpec(spec)
	assert.Equal(t, true, n.U.Object["spec"].(map[string]any)["exporter"], "stored as spec.exporter")
	n.SetStatus(views.NodeStatus{Lifecycle: "Joining", PodIP: "10.0.0.1"})
	cp := views.Node{U: n.U.DeepCopy()}
	assert.Equal(t, spec, cp.Spec())
	assert.Equal(t, views.NodeStatus{Lifecycle: "Joining", PodIP: "10.0.0.1"}, cp.Status())
	// int-or-string quantities stored as integers by users still read.
	require.NoError(t, unstructured.SetNestedField(cp.U.Object, int64(2), "spec", "resources", "cpu"))
	assert.Equal(t, "2", cp.Spec().Resources.CPU)
}

// TestClusterBackupFields: spec.backup and spec.restoreFrom as the API server stores them
// (integers as int64, defaults applied) read into the view; absent fields read as nil, and
// keep falls back to the schema default when an object was built without defaulting.
func TestClusterBackupFields(t *testing.T) {
	storage := map[string]any{"endpoint": "http://10.0.0.5:8333", "bucket": "valkey-backups", "prefix": "dev",
		"credentialsSecretRef": map[string]any{"name": "object-store"}}
	want := views.BackupStorage{Endpoint: "http://10.0.0.5:8333", Bucket: "valkey-backups", Prefix: "dev",
		CredentialsSecret: views.SecretRef{Name: "object-store"}}

	c := views.Cluster{U: views.NewClusterObject()}
	assert.Nil(t, c.Backup(), "no spec.backup")
	assert.Nil(t, c.RestoreFrom(), "no spec.restoreFrom")

	c = views.Cluster{U: withPart(views.NewClusterObject, "spec", map[string]any{"shards": int64(3),
		"backup":      map[string]any{"schedule": "@every 6h", "storage": storage, "keep": int64(2), "suspend": true},
		"restoreFrom": map[string]any{"backup": "my-cluster-20261207030000"}})}
	b := c.Backup()
	require.NotNil(t, b)
	assert.Equal(t, "@every 6h", b.Schedule)
	assert.Equal(t, want, b.Storage)
	assert.Equal(t, 2, b.KeepOrDefault())
	assert.True(t, b.Suspend)
	r := c.RestoreFrom()
	require.NotNil(t, r)
	assert.True(t, r.FromBackup())
	assert.Equal(t, "my-cluster-20261207030000", r.Backup)
	assert.Equal(t, views.BackupStorage{}, r.Storage)
	assert.Equal(t, 3, c.Shards(), "the other fields still read")

	c = views.Cluster{U: withPart(views.NewClusterObject, "spec", map[string]any{
		"backup":      map[string]any{"schedule": "0 3 * * *", "storage": storage},
		"restoreFrom": map[string]any{"storage": storage, "path": "prod/my-cluster/my-cluster-20261207030000"}})}
	assert.Equal(t, views.DefaultBackupKeep, c.Backup().KeepOrDefault(), "keep absent: the schema default")
	assert.False(t, c.Backup().Suspend)
	r = c.RestoreFrom()
	require.NotNil(t, r)
	assert.False(t, r.FromBackup())
	assert.Equal(t, want, r.Storage)
	assert.Equal(t, "prod/my-cluster/my-cluster-20261207030000", r.Path)
}
