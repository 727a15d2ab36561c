//go:build integration

package integration

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/testcontainers/testcontainers-go"
	tcexec "github.com/testcontainers/testcontainers-go/exec"
	"github.com/testcontainers/testcontainers-go/wait"

	"github.com/gomomento/valkey-operator/integration/harness"
	"github.com/gomomento/valkey-operator/reconciler/render"
	"github.com/gomomento/valkey-operator/reconciler/views"
	"github.com/gomomento/valkey-operator/valkeyops/model"
)

// TestConfigFileOnRealValkey proves, on Valkey 8.0 and 9.1, the two things the operator's
// config file (render.ConfigFile) relies on: a quoted multi-word value is read as that
// directive's arguments (save's schedule), and a value carrying a second directive is refused
// as a whole instead of opening a port; and that ParseConfigRejection reads what Valkey prints
// when it refuses a setting.
func TestConfigFileOnRealValkey(t *testing.T) {
	requireDocker(t)
	for _, image := range []string{harness.Image(), harness.Image9()} {
		t.Run(image, func(t *testing.T) {
			t.Parallel()
			t.Run("multi-word values are one directive's arguments", func(t *testing.T) {
				t.Parallel()
				c := startWithConfig(t, image, map[string]string{"save": "900 1 300 10", "maxmemory-policy": "allkeys-lru"}, wait.ForLog("Ready to accept connections"))
				assert.Equal(t, "save\n900 1 300 10\n", exec(t, c, "CONFIG", "GET", "save"))
				assert.Equal(t, "maxmemory-policy\nallkeys-lru\n", exec(t, c, "CONFIG", "GET", "maxmemory-policy"))
			})
			for _, tc := range []struct {
				name, value, reason string
			}{
				{"an injected directive is refused, not run", "noeviction --port 6380 --enable-debug-command yes", "wrong number of arguments"},
				{"an unknown value is refused", "bogus", "argument(s) must be one of the following"},
			} {
				t.Run(tc.name, func(t *testing.T) {
					t.Parallel()
					c := startWithConfig(t, image, map[string]string{"maxmemory-policy": tc.value}, wait.ForExit())
					state, err := c.State(context.Background())
					require.NoError(t, err)
					assert.NotZero(t, state.ExitCode, "valkey-server refused its configuration")
					rej, ok := model.ParseConfigRejection(logs(t, c))
					require.True(t, ok, "the refusal is recognised")
					assert.Equal(t, "maxmemory-policy", rej.Directive)
					assert.Contains(t, rej.Reason, tc.reason)
				})
			}
		})
	}
}

// TestPersistenceModesOnRealValkey: the persistence directives of each mode are what a real
// server runs with (mode None writes nothing to disk, AOF fsyncs every second), and with mode
// None a user's own save schedule still wins.
func TestPersistenceModesOnRealValkey(t *testing.T) {
	requireDocker(t)
	for _, image := range []string{harness.Image(), harness.Image9()} {
		t.Run(image, func(t *testing.T) {
			t.Parallel()
			for _, tc := range []struct {
				mode                          string
				valkey                        map[string]string
				save, appendonly, appendfsync string
			}{
				{views.PersistenceNone, nil, "", "no", "everysec"},
				{views.PersistenceNone, map[string]string{"save": "900 1"}, "900 1", "no", "everysec"},
				{views.PersistenceRDB, nil, "3600 1 300 100 60 10000", "no", "everysec"},
				{views.PersistenceAOF, nil, "", "yes", "everysec"},
				{views.PersistenceRDBAndAOF, nil, "3600 1 300 100 60 10000", "yes", "everysec"},
			} {
				t.Run(tc.mode+" "+tc.valkey["save"], func(t *testing.T) {
					spec := views.NodeSpec{Valkey: tc.valkey, Persistence: views.Persistence{Mode: tc.mode, Size: "1Gi"}}
					c := startWithSpec(t, image, spec, wait.ForLog("Ready to accept connections"))
					assert.Equal(t, "save\n"+tc.save+"\n", exec(t, c, "CONFIG", "GET", "save"))
					assert.Equal(t, "appendonly\n"+tc.appendonly+"\n", exec(t, c, "CONFIG", "GET", "appendonly"))
					assert.Equal(t, "appendfsync\n"+tc.appendfsync+"\n", exec(t, c, "CONFIG", "GET", "appendfsync"))
				})
			}
		})
	}
}

// startWithConfig runs valkey-server on the config file render.ConfigFile makes of settings
// (its include pointing at an empty replication fragment).
func startWithConfig(t *testing.T, image string, settings map[string]string, until wait.Strategy) testcontainers.Container {
	t.Helper()
	return startWithSpec(t, image, views.NodeSpec{Valkey: settings}, until)
}

// startWithSpec runs valkey-server on the config file render.ConfigFile makes of spec, in a
// writable data directory.
func startWithSpec(t *testing.T, image string, spec views.NodeSpec, until wait.Strategy) testcontainers.Container {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := testcontainers.GenericContainer(ctx, testcontainers.GenericContainerRequest{
		ContainerRequest: testcontainers.ContainerRequest{
			Image: image,
			Cmd:   []string{"valkey-server", render.ConfFile, "--port", "6379", "--dir", "/tmp"},
			Files: []testcontainers.ContainerFile{
				{Reader: strings.NewReader(render.ConfigFile(spec)), ContainerFilePath: render.ConfFile, FileMode: 0o444},
				{Reader: strings.NewReader("\n"), ContainerFilePath: render.ReplicationConfFile, FileMode: 0o444},
			},
			WaitingFor: until,
		},
		Started: true,
	})
	if c != nil {
		t.Cleanup(func() { _ = c.Terminate(context.Background()) })
	}
	require.NoError(t, err)
	return c
}

func exec(t *testing.T, c testcontainers.Container, args ...string) string {
	t.Helper()
	code, out, err := c.Exec(context.Background(), append([]string{"valkey-cli"}, args...), tcexec.Multiplexed())
	require.NoError(t, err)
	b, err := io.ReadAll(out)
	require.NoError(t, err)
	require.Zero(t, code, string(b))
	return string(b)
}

func logs(t *testing.T, c testcontainers.Container) string {
	t.Helper()
	r, err := c.Logs(context.Background())
	require.NoError(t, err)
	defer r.Close()
	b, err := io.ReadAll(r)
	require.NoError(t, err)
	return string(b)
}
