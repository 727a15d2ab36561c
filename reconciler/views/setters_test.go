package views_test

import (
	"testing"

	"github.com/gomomento/valkey-operator/reconciler/views"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

var (
	fullPlacement = views.Placement{Zones: []string{"a", "b"}, ZoneSpread: views.ZoneSpreadRequired,
		NodeSelector: map[string]string{"pool": "valkey"}}
	storedPlacement = map[string]any{"zones": []any{"a", "b"}, "zoneSpread": "required",
		"nodeSelector": map[string]any{"pool": "valkey"}}

	fullACL = []views.ACLUser{{Username: "app", PasswordHashes: []string{"h1", "h2"}, Permissions: []views.ACLPermission{
		{RoleRef: "r1", Keys: []views.KeyPermission{{Pattern: "a:*", Access: "read"}}, Channels: []string{"c"}},
		{RoleRef: "r2"},
	}}}
	storedACL = []any{map[string]any{"username": "app", "passwordHashes": []any{"h1", "h2"}, "permissions": []any{
		map[string]any{"roleRef": "r1", "keys": []any{map[string]any{"pattern": "a:*", "access": "read"}}, "channels": []any{"c"}},
		map[string]any{"roleRef": "r2"},
	}}}

	fullStorage = views.BackupStorage{Endpoint: "https://s3.eu-west-1.amazonaws.com", Bucket: "backups", Prefix: "valkey/prod",
		Region: "eu-west-1", CredentialsSecret: views.SecretRef{Name: "s3"}, CASecret: views.SecretRef{Name: "ca"}}
	storedStorage = map[string]any{"endpoint": "https://s3.eu-west-1.amazonaws.com", "bucket": "backups", "prefix": "valkey/prod",
		"region": "eu-west-1", "credentialsSecretRef": map[string]any{"name": "s3"}, "caSecretRef": map[string]any{"name": "ca"}}
	keepTwo        = 2
	fullSchedule   = &views.BackupSchedule{Schedule: "0 3 * * *", Storage: fullStorage, Keep: &keepTwo, Suspend: true}
	storedSchedule = map[string]any{"schedule": "0 3 * * *", "storage": storedStorage, "keep": int64(2), "suspend": true}

	fullNodeSpec = views.NodeSpec{Cluster: "c", Shard: 2, Image: "r:t", Version: "9.0.0", Valkey: map[string]string{"a": "b"},
		Resources: views.Resources{CPU: "500m", Memory: "1Gi"}, Placement: fullPlacement, TLSSecretRef: "tls", SpecHash: "h"}
	storedNodeSpec = map[string]any{"cluster": "c", "shard": int64(2), "image": "r:t", "version": "9.0.0",
		"valkey": map[string]any{"a": "b"}, "resources": map[string]any{"cpu": "500m", "memory": "1Gi"},
		"placement": storedPlacement, "tls": map[string]any{"secretRef": "tls"}, "specHash": "h"}
)

// setterCase is one setter: what it stores under part, and what its reader returns after
// the object went through a deep copy and a JSON round trip.
type setterCase struct {
	name      string
	newObject func() *unstructured.Unstructured
	set       func(u *unstructured.Unstructured)
	part      string
	stored    any // the whole part after set on an empty object; nil: the part is absent
	read      func(u *unstructured.Unstructured) any
	want      any
}

func setterCases() []setterCase {
	cl := func(u *unstructured.Unstructured) views.Cluster { return views.Cluster{U: u} }
	nd := func(u *unstructured.Unstructured) views.Node { return views.Node{U: u} }
	cf := func(u *unstructured.Unstructured) views.Config { return views.Config{U: u} }
	im := func(u *unstructured.Unstructured) views.Image { return views.Image{U: u} }
	ro := func(u *unstructured.Unstructured) views.Role { return views.Role{U: u} }
	status := views.Status{State: views.StateCreating, Target: &views.TargetSpec{Shards: 3, ReplicasPerShard: 0}, Message: "m"}
	return []setterCase{
		{"cluster configRef", views.NewClusterObject, func(u *unstructured.Unstructured) { cl(u).SetConfigRef("std") }, "spec",
			map[string]any{"configRef": "std"}, func(u *unstructured.Unstructured) any { return cl(u).ConfigRef() }, "std"},
		{"cluster shards", views.NewClusterObject, func(u *unstructured.Unstructured) { cl(u).SetShards(3) }, "spec",
			map[string]any{"shards": int64(3)}, func(u *unstructured.Unstructured) any { return cl(u).Shards() }, 3},
		{"cluster replicas zero", views.NewClusterObject, func(u *unstructured.Unstructured) { cl(u).SetReplicasPerShard(0) }, "spec",
			map[string]any{"replicasPerShard": int64(0)}, func(u *unstructured.Unstructured) any { return cl(u).ReplicasPerShard() }, 0},
		{"cluster replicas", views.NewClusterObject, func(u *unstructured.Unstructured) { cl(u).SetReplicasPerShard(2) }, "spec",
			map[string]any{"replicasPerShard": int64(2)}, func(u *unstructured.Unstructured) any { return cl(u).ReplicasPerShard() }, 2},
		{"cluster tls", views.NewClusterObject, func(u *unstructured.Unstructured) { cl(u).SetTLSSecretRef("tls") }, "spec",
			map[string]any{"tls": map[string]any{"secretRef": "tls"}}, func(u *unstructured.Unstructured) any {
				return []any{cl(u).TLSEnabled(), cl(u).TLSSecretRef()}
			}, []any{true, "tls"}},
		{"cluster placement", views.NewClusterObject, func(u *unstructured.Unstructured) { cl(u).SetPlacement(fullPlacement) }, "spec",
			map[string]any{"placement": storedPlacement}, func(u *unstructured.Unstructured) any { return cl(u).Placement() }, fullPlacement},
		{"cluster podAnnotations", views.NewClusterObject, func(u *unstructured.Unstructured) { cl(u).SetPodAnnotations(map[string]string{"x": "y"}) }, "spec",
			map[string]any{"podAnnotations": map[string]any{"x": "y"}}, func(u *unstructured.Unstructured) any { return cl(u).PodAnnotations() },
			map[string]string{"x": "y"}},
		{"cluster externalAccess", views.NewClusterObject, func(u *unstructured.Unstructured) {
			cl(u).SetExternalAccess(&views.ExternalAccess{Type: views.ExternalLoadBalancer,
				ServiceAnnotations: map[string]string{"a": "b"}, LoadBalancerSourceRanges: []string{"203.0.113.0/24"}})
		}, "spec", map[string]any{"externalAccess": map[string]any{"type": "LoadBalancer",
			"serviceAnnotations": map[string]any{"a": "b"}, "loadBalancerSourceRanges": []any{"203.0.113.0/24"}}},
			func(u *unstructured.Unstructured) any { return cl(u).ExternalAccess() },
			&views.ExternalAccess{Type: views.ExternalLoadBalancer, ServiceAnnotations: map[string]string{"a": "b"},
				LoadBalancerSourceRanges: []string{"203.0.113.0/24"}}},
		{"cluster acl", views.NewClusterObject, func(u *unstructured.Unstructured) { cl(u).SetACL(fullACL) }, "spec",
			map[string]any{"acl": storedACL}, func(u *unstructured.Unstructured) any { return cl(u).ACL() }, fullACL},
		{"cluster backup", views.NewClusterObject, func(u *unstructured.Unstructured) { cl(u).SetBackup(fullSchedule) }, "spec",
			map[string]any{"backup": storedSchedule}, func(u *unstructured.Unstructured) any { return cl(u).Backup() }, fullSchedule},
		{"cluster backup, keep and suspend absent", views.NewClusterObject, func(u *unstructured.Unstructured) {
			cl(u).SetBackup(&views.BackupSchedule{Schedule: "@daily", Storage: views.BackupStorage{Endpoint: "http://h:1", Bucket: "b",
				CredentialsSecret: views.SecretRef{Name: "s"}}})
		}, "spec", map[string]any{"backup": map[string]any{"schedule": "@daily", "storage": map[string]any{"endpoint": "http://h:1", "bucket": "b",
			"credentialsSecretRef": map[string]any{"name": "s"}}}},
			func(u *unstructured.Unstructured) any { return cl(u).Backup().KeepOrDefault() }, views.DefaultBackupKeep},
		{"cluster restoreFrom a backup", views.NewClusterObject, func(u *unstructured.Unstructured) {
			cl(u).SetRestoreFrom(&views.RestoreSource{Backup: "nightly"})
		}, "spec", map[string]any{"restoreFrom": map[string]any{"backup": "nightly"}},
			func(u *unstructured.Unstructured) any { return cl(u).RestoreFrom() }, &views.RestoreSource{Backup: "nightly"}},
		{"cluster restoreFrom a location", views.NewClusterObject, func(u *unstructured.Unstructured) {
			cl(u).SetRestoreFrom(&views.RestoreSource{Storage: fullStorage, Path: "ns/c/c-20261207030000"})
		}, "spec", map[string]any{"restoreFrom": map[string]any{"storage": storedStorage, "path": "ns/c/c-20261207030000"}},
			func(u *unstructured.Unstructured) any { return cl(u).RestoreFrom() }, &views.RestoreSource{Storage: fullStorage, Path: "ns/c/c-20261207030000"}},
		{"cluster status", views.NewClusterObject, func(u *unstructured.Unstructured) { cl(u).SetStatus(status) }, "status",
			map[string]any{"state": "Creating", "targetSpec": map[string]any{"shards": int64(3), "replicasPerShard": int64(0)}, "message": "m"},
			func(u *unstructured.Unstructured) any { return cl(u).Status() }, status},
		{"node spec", views.NewNodeObject, func(u *unstructured.Unstructured) { nd(u).SetSpec(fullNodeSpec) }, "spec",
			storedNodeSpec, func(u *unstructured.Unstructured) any { return nd(u).Spec() }, fullNodeSpec},
		{"node spec shard zero", views.NewNodeObject, func(u *unstructured.Unstructured) { nd(u).SetSpec(views.NodeSpec{Cluster: "c"}) }, "spec",
			map[string]any{"cluster": "c", "shard": int64(0)}, func(u *unstructured.Unstructured) any { return nd(u).Spec() }, views.NodeSpec{Cluster: "c"}},
		{"node status", views.NewNodeObject, func(u *unstructured.Unstructured) {
			nd(u).SetStatus(views.NodeStatus{Lifecycle: "Active", PodIP: "10.0.0.1", NodeID: "id", Role: "primary"})
		}, "status", map[string]any{"lifecycle": "Active", "podIP": "10.0.0.1", "nodeID": "id", "role": "primary"},
			func(u *unstructured.Unstructured) any { return nd(u).Status() },
			views.NodeStatus{Lifecycle: "Active", PodIP: "10.0.0.1", NodeID: "id", Role: "primary"}},
		{"config imageRef", views.NewConfigObject, func(u *unstructured.Unstructured) { cf(u).SetImageRef("v9") }, "spec",
			map[string]any{"imageRef": "v9"}, func(u *unstructured.Unstructured) any { return cf(u).ImageRef() }, "v9"},
		{"config baseRef", views.NewConfigObject, func(u *unstructured.Unstructured) { cf(u).SetBaseRef("base") }, "spec",
			map[string]any{"baseRef": "base"}, func(u *unstructured.Unstructured) any { return cf(u).BaseRef() }, "base"},
		{"config resources", views.NewConfigObject, func(u *unstructured.Unstructured) { cf(u).SetResources(views.Resources{CPU: "2", Memory: "1Gi"}) }, "spec",
			map[string]any{"resources": map[string]any{"cpu": "2", "memory": "1Gi"}}, func(u *unstructured.Unstructured) any { return cf(u).Resources() },
			views.Resources{CPU: "2", Memory: "1Gi"}},
		{"config valkey", views.NewConfigObject, func(u *unstructured.Unstructured) { cf(u).SetValkey(map[string]string{"maxmemory": "1gb"}) }, "spec",
			map[string]any{"valkey": map[string]any{"maxmemory": "1gb"}}, func(u *unstructured.Unstructured) any { return cf(u).Valkey() },
			map[string]string{"maxmemory": "1gb"}},
		{"config exporter off", views.NewConfigObject, func(u *unstructured.Unstructured) { cf(u).SetExporterEnabled(false) }, "spec",
			map[string]any{"exporter": map[string]any{"enabled": false}}, func(u *unstructured.Unstructured) any { return pair(cf(u).ExporterEnabled()) },
			[2]bool{false, true}},
		{"config exporter on", views.NewConfigObject, func(u *unstructured.Unstructured) { cf(u).SetExporterEnabled(true) }, "spec",
			map[string]any{"exporter": map[string]any{"enabled": true}}, func(u *unstructured.Unstructured) any { return pair(cf(u).ExporterEnabled()) },
			[2]bool{true, true}},
		{"image repository", views.NewImageObject, func(u *unstructured.Unstructured) { im(u).SetRepository("valkey/valkey") }, "spec",
			map[string]any{"repository": "valkey/valkey"}, func(u *unstructured.Unstructured) any { return im(u).Repository() }, "valkey/valkey"},
		{"image tag", views.NewImageObject, func(u *unstructured.Unstructured) { im(u).SetTag("9.0.0") }, "spec",
			map[string]any{"tag": "9.0.0"}, func(u *unstructured.Unstructured) any { return im(u).Tag() }, "9.0.0"},
		{"image version", views.NewImageObject, func(u *unstructured.Unstructured) { im(u).SetVersion("9.0.1") }, "spec",
			map[string]any{"version": "9.0.1"}, func(u *unstructured.Unstructured) any { return im(u).Version() }, "9.0.1"},
		{"role categories", views.NewRoleObject, func(u *unstructured.Unstructured) {
			ro(u).SetCategories([]views.Rule{{Name: "read", Allow: true}, {Name: "dangerous"}})
		}, "spec", map[string]any{"categories": []any{map[string]any{"name": "read", "access": "allow"}, map[string]any{"name": "dangerous", "access": "deny"}}},
			func(u *unstructured.Unstructured) any { return ro(u).Categories() }, []views.Rule{{Name: "read", Allow: true}, {Name: "dangerous"}}},
		{"role commands", views.NewRoleObject, func(u *unstructured.Unstructured) { ro(u).SetCommands([]views.Rule{{Name: "flushall"}}) }, "spec",
			map[string]any{"commands": []any{map[string]any{"name": "flushall", "access": "deny"}}},
			func(u *unstructured.Unstructured) any { return ro(u).Commands() }, []views.Rule{{Name: "flushall"}}},
	}
}

// pair holds two results, so a two-valued getter can be compared.
func pair(a, b bool) [2]bool { return [2]bool{a, b} }

// TestSetterRoundTrip: every setter stores exactly the schema's field, in JSON-compatible
// types (a deep copy panics on anything else), and reads back what it was given after both
// a deep copy and a trip through JSON (which turns every integer into int64).
func TestSetterRoundTrip(t *testing.T) {
	for _, tc := range setterCases() {
		t.Run(tc.name, func(t *testing.T) {
			u := tc.newObject()
			tc.set(u)
			assert.Equal(t, tc.stored, u.Object[tc.part])

			var cp *unstructured.Unstructured
			require.NotPanics(t, func() { cp = u.DeepCopy() })
			assert.Equal(t, tc.want, tc.read(cp), "after deep copy")

			b, err := u.MarshalJSON()
			require.NoError(t, err)
			fromJSON := &unstructured.Unstructured{}
			require.NoError(t, fromJSON.UnmarshalJSON(b))
			assert.Equal(t, tc.want, tc.read(fromJSON), "after JSON")
		})
	}
}

// TestEmptyValuesOmitted: setting an empty value removes the field instead of storing "",
// {} or [], and an empty part disappears with it.
func TestEmptyValuesOmitted(t *testing.T) {
	for _, tc := range []struct {
		name      string
		newObject func() *unstructured.Unstructured
		set       func(u *unstructured.Unstructured)
	}{
		{"cluster configRef", views.NewClusterObject, func(u *unstructured.Unstructured) { views.Cluster{U: u}.SetConfigRef("") }},
		{"cluster shards", views.NewClusterObject, func(u *unstructured.Unstructured) { views.Cluster{U: u}.SetShards(0) }},
		{"cluster tls", views.NewClusterObject, func(u *unstructured.Unstructured) { views.Cluster{U: u}.SetTLSSecretRef("") }},
		{"cluster placement with empty lists", views.NewClusterObject, func(u *unstructured.Unstructured) {
			views.Cluster{U: u}.SetPlacement(views.Placement{Zones: []string{}, NodeSelector: map[string]string{}})
		}},
		{"cluster podAnnotations", views.NewClusterObject, func(u *unstructured.Unstructured) {
			views.Cluster{U: u}.SetPodAnnotations(map[string]string{})
		}},
		{"cluster acl", views.NewClusterObject, func(u *unstructured.Unstructured) { views.Cluster{U: u}.SetACL([]views.ACLUser{}) }},
		{"cluster status", views.NewClusterObject, func(u *unstructured.Unstructured) { views.Cluster{U: u}.SetStatus(views.Status{}) }},
		{"node status", views.NewNodeObject, func(u *unstructured.Unstructured) { views.Node{U: u}.SetStatus(views.NodeStatus{}) }},
		{"config resources", views.NewConfigObject, func(u *unstructured.Unstructured) { views.Config{U: u}.SetResources(views.Resources{}) }},
		{"config valkey", views.NewConfigObject, func(u *unstructured.Unstructured) { views.Config{U: u}.SetValkey(nil) }},
		{"image tag", views.NewImageObject, func(u *unstructured.Unstructured) { views.Image{U: u}.SetTag("") }},
		{"role commands", views.NewRoleObject, func(u *unstructured.Unstructured) { views.Role{U: u}.SetCommands(nil) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := tc.newObject()
			tc.set(u)
			assert.NotContains(t, u.Object, "spec")
			assert.NotContains(t, u.Object, "status")
		})
	}

	t.Run("node spec", func(t *testing.T) {
		n := views.Node{U: views.NewNodeObject()}
		n.SetSpec(views.NodeSpec{Cluster: "c", Shard: 1, Placement: views.Placement{Zones: []string{}}})
		assert.Equal(t, map[string]any{"cluster": "c", "shard": int64(1)}, n.U.Object["spec"])
	})
}

// TestSettersKeepOtherFields: a single-field setter changes that field only.
func TestSettersKeepOtherFields(t *testing.T) {
	c := views.Cluster{U: views.NewClusterObject()}
	c.SetConfigRef("std")
	c.SetShards(3)
	c.SetTLSSecretRef("tls")
	c.SetACL(fullACL)
	c.SetShards(5)
	c.SetTLSSecretRef("")
	assert.Equal(t, map[string]any{"configRef": "std", "shards": int64(5), "acl": storedACL}, c.U.Object["spec"])

	cfg := views.Config{U: views.NewConfigObject()}
	require.NoError(t, unstructured.SetNestedField(cfg.U.Object, int64(2), "spec", "resources", "cpu"))
	cfg.SetBaseRef("base")
	assert.Equal(t, views.Resources{CPU: "2"}, cfg.Resources(), "an integer quantity survives a rewrite")
	assert.Equal(t, "base", cfg.BaseRef())

	img := views.Image{U: views.NewImageObject()}
	img.SetRepository("valkey/valkey")
	img.SetTag("9.0.0")
	img.SetVersion("9.0.0")
	assert.Equal(t, "valkey/valkey:9.0.0", img.Reference())

	r := views.Role{U: views.NewRoleObject()}
	r.SetCategories([]views.Rule{{Name: "read", Allow: true}})
	r.SetCommands([]views.Rule{{Name: "flushall"}})
	assert.Equal(t, []views.Rule{{Name: "read", Allow: true}}, r.Categories())
}

// TestSetStatusKeepsNodes: status.nodes is not the operator's; writing the status around it
// leaves it as it was, whatever the operator's part becomes.
func TestSetStatusKeepsNodes(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  views.Status
	}{
		{"full", views.Status{State: views.StateCreating, Target: &views.TargetSpec{Shards: 1, ReplicasPerShard: 1}, Message: "m"}},
		{"target cleared", views.Status{State: views.StateActive}},
		{"empty", views.Status{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := views.Cluster{U: withPart(views.NewClusterObject, "status", map[string]any{
				"state": "Invalid", "message": "old", "nodes": []any{"p-0", "p-1"},
				"targetSpec": map[string]any{"shards": int64(9), "replicasPerShard": int64(9)},
			})}
			c.SetStatus(tc.set)
			assert.Equal(t, tc.set, c.Status())
			nodes, found, err := unstructured.NestedStringSlice(c.U.Object, "status", "nodes")
			require.NoError(t, err)
			assert.True(t, found)
			assert.Equal(t, []string{"p-0", "p-1"}, nodes)
		})
	}
}

// TestNodeSetSpecReplacesSpec: SetSpec writes the whole spec, so fields the new spec leaves
// empty are gone afterwards.
func TestNodeSetSpecReplacesSpec(t *testing.T) {
	n := views.Node{U: views.NewNodeObject()}
	n.SetSpec(fullNodeSpec)
	n.SetSpec(views.NodeSpec{Cluster: "c", Shard: 1, Image: "r:u"})
	assert.Equal(t, map[string]any{"cluster": "c", "shard": int64(1), "image": "r:u"}, n.U.Object["spec"])
	assert.Equal(t, views.NodeSpec{Cluster: "c", Shard: 1, Image: "r:u"}, n.Spec())
}
