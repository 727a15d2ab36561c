//go:build integration

package integration

import (
	"context"
	"fmt"
	"net"
	osexec "os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gomomento/valkey-operator/integration/harness"
	"github.com/gomomento/valkey-operator/internal/poll"
	"github.com/gomomento/valkey-operator/internal/promscrape"
	"github.com/gomomento/valkey-operator/reconciler/render"
	"github.com/gomomento/valkey-operator/valkeyops"
)

// TestExporterSupervisor: the exporter sidecar's command line (render.ExporterCommand), run
// from each local image beside a server, keeps its container running when the exporter is
// killed, starts the exporter again (a new process serving redis_up 1 again), says so in its
// output, and ends at once on SIGTERM: `docker stop` finds it exited 0, not killed after its
// grace period. A pod's readiness counts every container, and pods never restart one, so this
// loop is what keeps a crashed exporter from making a healthy server's pod unready.
func TestExporterSupervisor(t *testing.T) {
	for _, img := range rotationImages {
		t.Run(img.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, harness.Config{Image: img.image}, 1, 1, valkeyops.Options{})
			ctx := ctxT(t, 2*time.Minute)
			n := f.nodes[0]
			c, err := f.env.StartSidecar(ctx, n.Name, render.ExporterCommand(false),
				map[string][]byte{render.ExporterPasswordFile: render.ExporterPasswords(operatorPassword)},
				"Providing metrics at")
			require.NoError(t, err)
			id := c.GetContainerID()
			host, _, err := net.SplitHostPort(n.Addr)
			require.NoError(t, err)
			url := fmt.Sprintf("http://%s:%d/metrics", host, render.ExporterPort)
			waitUp := func(what string) {
				require.NoError(t, poll.Until(ctx, 200*time.Millisecond, 30*time.Second, what, func(ctx context.Context) (bool, string, error) {
					m, err := promscrape.Get(ctx, url)
					if err != nil {
						return false, err.Error(), nil
					}
					up, _ := m.Value("redis_up", nil)
					return up == 1, fmt.Sprintf("redis_up %v", up), nil
				}))
			}
			waitUp("the exporter serves redis_up 1")

			first := exporterPID(t, ctx, id)
			assert.NotEqual(t, "1", first, "the exporter runs under the supervisor, not as PID 1")
			docker(t, ctx, "exec", id, "sh", "-c", "kill -KILL "+first)

			var second string
			require.NoError(t, poll.Until(ctx, 200*time.Millisecond, 30*time.Second, "a new exporter process", func(ctx context.Context) (bool, string, error) {
				out, err := osexec.CommandContext(ctx, "docker", "exec", id, "busybox", "pidof", "prometheus-redis-exporter").Output()
				second = strings.TrimSpace(string(out))
				return err == nil && second != "" && second != first, "pid " + second, nil
			}))
			waitUp("the restarted exporter serves redis_up 1")
			assert.Equal(t, "true", docker(t, ctx, "inspect", "--format", "{{.State.Running}}", id), "the container outlived its exporter")
			logs, err := osexec.CommandContext(ctx, "docker", "logs", id).CombinedOutput()
			require.NoError(t, err)
			assert.Contains(t, string(logs), "the exporter exited with status 137; starting it again in 1s")

			docker(t, ctx, "stop", "--time", "60", id)
			assert.Equal(t, "0", docker(t, ctx, "inspect", "--format", "{{.State.ExitCode}}", id),
				"SIGTERM ended the loop (a shell ignoring it would have been killed after 60 s: 137)")
		})
	}
}

// exporterPID is the PID, inside container id, of the exporter process.
func exporterPID(t *testing.T, ctx context.Context, id string) string {
	t.Helper()
	pid := docker(t, ctx, "exec", id, "busybox", "pidof", "prometheus-redis-exporter")
	require.NotEmpty(t, pid)
	require.NotContains(t, pid, " ", "one exporter process")
	return pid
}

// docker runs the docker CLI and returns its trimmed output.
func docker(t *testing.T, ctx context.Context, args ...string) string {
	t.Helper()
	out, err := osexec.CommandContext(ctx, "docker", args...).CombinedOutput()
	require.NoError(t, err, "docker %v: %s", args, out)
	return strings.TrimSpace(string(out))
}
