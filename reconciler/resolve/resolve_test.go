package resolve_test

import (
	"context"
	"errors"
	"testing"

	"github.com/gomomento/valkey-operator/reconciler/resolve"
	"github.com/gomomento/valkey-operator/reconciler/views"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type menu struct {
	configs map[string]views.Config
	images  map[string]views.Image
}

func (m menu) Config(_ context.Context, n string) (views.Config, bool, error) {
	c, ok := m.configs[n]
	return c, ok, nil
}
func (m menu) Image(_ context.Context, n string) (views.Image, bool, error) {
	i, ok := m.images[n]
	return i, ok, nil
}

func config(name, image, base string, res views.Resources, valkey map[string]string) views.Config {
	c := views.Config{U: views.NewConfigObject()}
	c.U.SetName(name)
	c.SetImageRef(image)
	c.SetBaseRef(base)
	c.SetResources(res)
	c.SetValkey(valkey)
	return c
}

func image(name, repo, tag, version string) views.Image {
	i := views.Image{U: views.NewImageObject()}
	i.U.SetName(name)
	i.SetRepository(repo)
	i.SetTag(tag)
	i.SetVersion(version)
	return i
}

// noPersistence is what a chain that sets no persistence resolves to.
var noPersistence = views.Persistence{Mode: views.PersistenceNone, Reclaim: views.ReclaimDelete}

func TestResolve(t *testing.T) {
	m := menu{
		configs: map[string]views.Config{
			"base":  config("base", "v8", "", views.Resources{CPU: "1", Memory: "1Gi"}, map[string]string{"maxmemory": "512mb", "maxmemory-policy": "noeviction"}),
			"child": config("child", "", "base", views.Resources{Memory: "2Gi"}, map[string]string{"maxmemory": "1gb"}),
			"img9":  config("img9", "v9", "child", views.Resources{}, nil),
			"loopa": config("loopa", "", "loopb", views.Resources{}, nil),
			"loopb": config("loopb", "", "loopa", views.Resources{}, nil),
			"orph":  config("orph", "", "gone", views.Resources{}, nil),
			"noimg": config("noimg", "missing", "", views.Resources{}, nil),
		},
		images: map[string]views.Image{
			"v8": image("v8", "valkey/valkey", "8.0.1", "8.0.1"),
			"v9": image("v9", "valkey/valkey", "9.0.0", "9.0.0"),
		},
	}
	tests := []struct {
		name    string
		ref     string
		want    resolve.Resolved
		wantErr any
	}{
		{name: "child merges over base", ref: "child", want: resolve.Resolved{
			Chain: []string{"child", "base"}, ImageName: "v8", Image: "valkey/valkey:8.0.1", Version: "8.0.1",
			Valkey:    map[string]string{"maxmemory": "1gb", "maxmemory-policy": "noeviction"},
			Resources: views.Resources{CPU: "1", Memory: "2Gi"}, Persistence: noPersistence}},
		{name: "child imageRef wins", ref: "img9", want: resolve.Resolved{
			Chain: []string{"img9", "child", "base"}, ImageName: "v9", Image: "valkey/valkey:9.0.0", Version: "9.0.0",
			Valkey:    map[string]string{"maxmemory": "1gb", "maxmemory-policy": "noeviction"},
			Resources: views.Resources{CPU: "1", Memory: "2Gi"}, Persistence: noPersistence}},
		{name: "missing config", ref: "nope", wantErr: new(*resolve.MissingConfigError)},
		{name: "missing base", ref: "orph", wantErr: new(*resolve.MissingConfigError)},
		{name: "cycle", ref: "loopa", wantErr: new(*resolve.CycleError)},
		{name: "missing image", ref: "noimg", wantErr: new(*resolve.MissingImageError)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := resolve.Resolve(context.Background(), m, tc.ref)
			if tc.wantErr != nil {
				require.Error(t, err)
				assert.True(t, errors.As(err, tc.wantErr), "error %T %v", err, err)
				assert.NotEmpty(t, got.Chain, "partial chain is reported")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

// TestResolveExporter: spec.exporter.enabled is inherited through baseRef, a child's value
// (true or false) wins, and a chain that never sets it runs no exporter.
func TestResolveExporter(t *testing.T) {
	withExporter := func(c views.Config, on bool) views.Config {
		c.SetExporterEnabled(on)
		return c
	}
	m := menu{
		configs: map[string]views.Config{
			"plain":    config("plain", "v8", "", views.Resources{}, nil),
			"on":       withExporter(config("on", "v8", "", views.Resources{}, nil), true),
			"inherit":  config("inherit", "", "on", views.Resources{}, nil),
			"off":      withExporter(config("off", "", "on", views.Resources{}, nil), false),
			"on-again": withExporter(config("on-again", "", "off", views.Resources{}, nil), true),
		},
		images: map[string]views.Image{"v8": image("v8", "valkey/valkey", "8.0.1", "8.0.1")},
	}
	for _, tc := range []struct {
		ref  string
		want bool
	}{
		{"plain", false}, {"on", true}, {"inherit", true}, {"off", false}, {"on-again", true},
	} {
		t.Run(tc.ref, func(t *testing.T) {
			got, err := resolve.Resolve(context.Background(), m, tc.ref)
			require.NoError(t, err)
			assert.Equal(t, tc.want, got.Exporter)
		})
	}
}

// TestResolvePersistence: spec.persistence is inherited through baseRef field by field, the
// child's fields winning, with mode None and reclaim Delete by default; a persistence
// directive in any config's spec.valkey under a mode other than None is refused, naming both
// configs.
func TestResolvePersistence(t *testing.T) {
	withPersistence := func(c views.Config, p views.Persistence) views.Config {
		c.SetPersistence(p)
		return c
	}
	m := menu{
		configs: map[string]views.Config{
			"aof":       withPersistence(config("aof", "v8", "", views.Resources{}, nil), views.Persistence{Mode: views.PersistenceAOF, Size: "1Gi", StorageClassName: "local"}),
			"bigger":    withPersistence(config("bigger", "", "aof", views.Resources{}, nil), views.Persistence{Size: "2Gi", Reclaim: views.ReclaimRetain}),
			"none":      withPersistence(config("none", "", "aof", views.Resources{}, nil), views.Persistence{Mode: views.PersistenceNone}),
			"saves":     config("saves", "", "aof", views.Resources{}, map[string]string{"save": "60 1"}),
			"base-save": config("base-save", "v8", "", views.Resources{}, map[string]string{"appendonly": "yes"}),
			"rdb-child": withPersistence(config("rdb-child", "", "base-save", views.Resources{}, nil), views.Persistence{Mode: views.PersistenceRDB, Size: "1Gi"}),
			"own-save":  withPersistence(config("own-save", "", "none", views.Resources{}, map[string]string{"save": "60 1"}), views.Persistence{}),
		},
		images: map[string]views.Image{"v8": image("v8", "valkey/valkey", "8.0.1", "8.0.1")},
	}
	tests := []struct {
		name     string
		ref      string
		want     views.Persistence
		conflict *resolve.PersistenceConflictError
	}{
		{name: "set in one config", ref: "aof", want: views.Persistence{Mode: views.PersistenceAOF, Size: "1Gi", StorageClassName: "local", Reclaim: views.ReclaimDelete}},
		{name: "a child's fields win, the rest is inherited", ref: "bigger", want: views.Persistence{Mode: views.PersistenceAOF, Size: "2Gi", StorageClassName: "local", Reclaim: views.ReclaimRetain}},
		{name: "a child turns it off", ref: "none", want: views.Persistence{Mode: views.PersistenceNone, Size: "1Gi", StorageClassName: "local", Reclaim: views.ReclaimDelete}},
		{name: "with mode None spec.valkey may set save", ref: "own-save", want: views.Persistence{Mode: views.PersistenceNone, Size: "1Gi", StorageClassName: "local", Reclaim: views.ReclaimDelete}},
		{name: "a child's save under its base's mode", ref: "saves",
			conflict: &resolve.PersistenceConflictError{Directive: "save", SetBy: "saves", Mode: views.PersistenceAOF, ModeBy: "aof"}},
		{name: "a base's appendonly under its child's mode", ref: "rdb-child",
			conflict: &resolve.PersistenceConflictError{Directive: "appendonly", SetBy: "base-save", Mode: views.PersistenceRDB, ModeBy: "rdb-child"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := resolve.Resolve(context.Background(), m, tc.ref)
			if tc.conflict != nil {
				var conflict *resolve.PersistenceConflictError
				require.ErrorAs(t, err, &conflict)
				assert.Equal(t, tc.conflict, conflict)
				assert.Contains(t, err.Error(), "remove it from spec.valkey")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got.Persistence)
		})
	}
}
