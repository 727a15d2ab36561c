package views_test

import (
	"testing"

	"github.com/gomomento/valkey-operator/reconciler/views"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// withPart returns a fresh object from newObject with part ("spec" or "status") set to v,
// exactly as given: the values are whatever a decoder or a hand-built test would store.
func withPart(newObject func() *unstructured.Unstructured, part string, v any) *unstructured.Unstructured {
	u := newObject()
	u.Object[part] = v
	return u
}

// TestDecodeIntegers: the API server's JSON decoder stores integers as int64, but JSON
// decoded elsewhere (and YAML turned into JSON) yields float64, and a test may store a Go int.
func TestDecodeIntegers(t *testing.T) {
	for _, tc := range []struct {
		name string
		n    any
	}{
		{"int64", int64(3)},
		{"float64", float64(3)},
		{"go int", 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := views.Cluster{U: withPart(views.NewClusterObject, "spec", map[string]any{"shards": tc.n, "replicasPerShard": tc.n})}
			assert.Equal(t, 3, c.Shards())
			assert.Equal(t, 3, c.ReplicasPerShard())

			c.U.Object["status"] = map[string]any{"targetSpec": map[string]any{"shards": tc.n, "replicasPerShard": tc.n}}
			assert.Equal(t, &views.TargetSpec{Shards: 3, ReplicasPerShard: 3}, c.Status().Target)

			n := views.Node{U: withPart(views.NewNodeObject, "spec", map[string]any{"shard": tc.n})}
			assert.Equal(t, 3, n.Shard())
			assert.Equal(t, 3, n.Spec().Shard)
		})
	}
}

// TestDecodeQuantities: resources.cpu/memory are int-or-string and read as the text stored,
// never canonicalized (the text feeds the nodes' spec hash).
func TestDecodeQuantities(t *testing.T) {
	for _, tc := range []struct {
		name   string
		stored any // nil: field absent
		want   string
	}{
		{"absent", nil, ""},
		{"int64", int64(2), "2"},
		{"float64 whole", float64(2), "2"},
		{"float64 fraction", 0.5, "0.5"},
		{"go int", 4, "4"},
		{"int64 beyond int32", int64(4294967296), "4294967296"},
		{"milli string", "500m", "500m"},
		{"binary string", "1024Mi", "1024Mi"},
		{"decimal string", "0.5", "0.5"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := map[string]any{}
			if tc.stored != nil {
				res["cpu"], res["memory"] = tc.stored, tc.stored
			}
			want := views.Resources{CPU: tc.want, Memory: tc.want}

			c := views.Config{U: withPart(views.NewConfigObject, "spec", map[string]any{"imageRef": "i", "resources": res})}
			assert.Equal(t, want, c.Resources())
			assert.Equal(t, "i", c.ImageRef(), "the other fields still read")

			n := views.Node{U: withPart(views.NewNodeObject, "spec", map[string]any{"shard": int64(1), "resources": res})}
			assert.Equal(t, want, n.Spec().Resources)
			assert.Equal(t, 1, n.Shard())
		})
	}
}

// TestMissingFields: an object with no spec or status reads as zero values and the
// schema defaults, for every kind.
func TestMissingFields(t *testing.T) {
	c := views.Cluster{U: views.NewClusterObject()}
	assert.Equal(t, "", c.ConfigRef())
	assert.Equal(t, 0, c.Shards())
	assert.Equal(t, 1, c.ReplicasPerShard(), "schema default")
	assert.False(t, c.TLSEnabled())
	assert.Equal(t, "", c.TLSSecretRef())
	assert.Equal(t, views.Placement{}, c.Placement())
	assert.Nil(t, c.PodAnnotations())
	assert.Nil(t, c.ACL())
	assert.Nil(t, c.RoleRefs())
	assert.Equal(t, views.Status{}, c.Status())
	assert.Equal(t, views.StateCreating, c.EffectiveState())

	n := views.Node{U: views.NewNodeObject()}
	assert.Equal(t, views.NodeSpec{}, n.Spec())
	assert.Equal(t, 0, n.Shard())
	assert.Equal(t, views.NodeStatus{Lifecycle: views.LifecycleJoining}, n.Status(), "a node whose status was never written is Joining")

	cfg := views.Config{U: views.NewConfigObject()}
	assert.Equal(t, "", cfg.ImageRef())
	assert.Equal(t, "", cfg.BaseRef())
	assert.Equal(t, views.Resources{}, cfg.Resources())
	assert.Nil(t, cfg.Valkey())

	img := views.Image{U: views.NewImageObject()}
	assert.Equal(t, "", img.Repository())
	assert.Equal(t, ":", img.Reference())

	r := views.Role{U: views.NewRoleObject()}
	assert.Nil(t, r.Categories())
	assert.Nil(t, r.Commands())
}

// TestDefaults: the defaults the views apply to fields that are present but partial.
func TestDefaults(t *testing.T) {
	for _, tc := range []struct {
		name   string
		stored any
		want   int
	}{
		{"replicasPerShard absent", nil, 1},
		{"replicasPerShard zero", int64(0), 0},
		{"replicasPerShard set", int64(4), 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := map[string]any{"shards": int64(2)}
			if tc.stored != nil {
				spec["replicasPerShard"] = tc.stored
			}
			c := views.Cluster{U: withPart(views.NewClusterObject, "spec", spec)}
			assert.Equal(t, tc.want, c.ReplicasPerShard())
		})
	}

	t.Run("acl key access", func(t *testing.T) {
		c := views.Cluster{U: withPart(views.NewClusterObject, "spec", map[string]any{"acl": []any{map[string]any{
			"username": "app", "passwordHashes": []any{"h"},
			"permissions": []any{map[string]any{"roleRef": "r", "keys": []any{
				map[string]any{"pattern": "a:*"},
				map[string]any{"pattern": "b:*", "access": "read"},
			}}},
		}}})}
		require.Len(t, c.ACL(), 1)
		require.Len(t, c.ACL()[0].Permissions, 1)
		assert.Equal(t, []views.KeyPermission{{Pattern: "a:*", Access: "readwrite"}, {Pattern: "b:*", Access: "read"}},
			c.ACL()[0].Permissions[0].Keys)
	})
}

// TestRoleDecode: a stored access word reads as Allow only when it is "allow".
func TestRoleDecode(t *testing.T) {
	r := views.Role{U: withPart(views.NewRoleObject, "spec", map[string]any{
		"categories": []any{map[string]any{"name": "read", "access": "allow"}, map[string]any{"name": "dangerous", "access": "deny"}},
		"commands":   []any{map[string]any{"name": "config|get", "access": "allow"}},
	})}
	assert.Equal(t, []views.Rule{{Name: "read", Allow: true}, {Name: "dangerous"}}, r.Categories())
	assert.Equal(t, []views.Rule{{Name: "config|get", Allow: true}}, r.Commands())
}

// TestMistypedFields: a part that does not match the schema reads as zero values (and the
// schema defaults) rather than panicking. Only objects that bypassed the API server hold one.
func TestMistypedFields(t *testing.T) {
	for _, tc := range []struct {
		name string
		part string
		val  any
	}{
		{"spec not an object", "spec", "x"},
		{"status not an object", "status", []any{"x"}},
		{"shards a word", "spec", map[string]any{"shards": "three"}},
		{"shards a fraction", "spec", map[string]any{"shards": 2.5}},
		{"acl not a list", "spec", map[string]any{"acl": "x"}},
		{"acl entry not an object", "spec", map[string]any{"acl": []any{"x"}}},
		{"annotations not strings", "spec", map[string]any{"podAnnotations": map[string]any{"a": int64(1)}}},
		{"tls not an object", "spec", map[string]any{"tls": "x"}},
		{"resources a list", "spec", map[string]any{"resources": []any{"1"}}},
		{"cpu a bool", "spec", map[string]any{"resources": map[string]any{"cpu": true}}},
		{"state a number", "status", map[string]any{"state": int64(1)}},
		{"nodes not a list", "status", map[string]any{"nodes": "x"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, newObject := range []func() *unstructured.Unstructured{views.NewClusterObject, views.NewNodeObject,
				views.NewConfigObject, views.NewImageObject, views.NewRoleObject} {
				obj := withPart(newObject, tc.part, tc.val)
				assert.NotPanics(t, func() {
					c := views.Cluster{U: obj}
					_, _, _, _, _ = c.ConfigRef(), c.Shards(), c.TLSEnabled(), c.Placement(), c.PodAnnotations()
					_, _, _ = c.ACL(), c.Status(), c.EffectiveState()
					n := views.Node{U: obj}
					_, _ = n.Spec(), n.Status()
					cfg := views.Config{U: obj}
					_, _ = cfg.Resources(), cfg.Valkey()
					_ = views.Image{U: obj}.Reference()
					_ = views.Role{U: obj}.Categories()
				})
			}
			c := views.Cluster{U: withPart(views.NewClusterObject, tc.part, tc.val)}
			assert.Equal(t, 0, c.Shards())
			assert.Equal(t, 1, c.ReplicasPerShard())
			assert.Nil(t, c.ACL())
			assert.Equal(t, views.StateCreating, c.EffectiveState())
		})
	}
}
