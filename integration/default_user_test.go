//go:build integration

package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valkey-io/valkey-go"

	"github.com/gomomento/valkey-operator/integration/harness"
	"github.com/gomomento/valkey-operator/valkeyops"
	"github.com/gomomento/valkey-operator/valkeyops/model"
)

// TestDefaultUserAdministersNothing: on real servers (8.0 and 9.1), whoever holds the default
// user's password can use the data but cannot lock the operator out, read the replication
// password, reshape the cluster, stop or debug a server, wipe or scan the keyspace; and a
// spec that turns the default user off refuses its login.
func TestDefaultUserAdministersNothing(t *testing.T) {
	for _, image := range []string{harness.Image(), harness.Image9()} {
		t.Run(image, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, harness.Config{Image: image}, 3, 1, valkeyops.Options{})
			ctx := ctxT(t, 2*time.Minute)
			require.NoError(t, f.admin.Bootstrap(ctx, f.nodes, 3))
			waitHealthy(t, f, f.nodes, 3, 0, 30*time.Second)
			node := f.nodes[0]
			other, err := f.admin.Observe(ctx, f.nodes[1:2])
			require.NoError(t, err)
			otherID := other.Nodes[0].ID
			require.NotEmpty(t, otherID)

			app := dataClient(t, f.nodes[:1], func(o *valkey.ClientOption) { o.ForceSingleClient = true })
			do := func(args ...string) error {
				return app.Do(ctx, app.B().Arbitrary(args...).Build()).Error()
			}
			for _, cmd := range [][]string{
				{"ACL", "SETUSER", model.OperatorUser, "off"},
				{"ACL", "LIST"},
				{"CONFIG", "GET", "masterauth"},
				{"CONFIG", "SET", "port", "7000"},
				{"CLUSTER", "RESET"},
				{"CLUSTER", "FORGET", otherID},
				{"CLUSTER", "FAILOVER"},
				{"CLUSTER", "SETSLOT", "0", "STABLE"},
				{"REPLICAOF", "127.0.0.1", "1"},
				{"SHUTDOWN", "NOSAVE"},
				{"FLUSHALL"},
				{"KEYS", "*"},
				{"MIGRATE", "127.0.0.1", "1", "k", "0", "1"},
				{"CLIENT", "KILL", "ID", "1"},
				{"MODULE", "LIST"},
			} {
				err := do(cmd...)
				if assert.Error(t, err, "%v", cmd) {
					assert.True(t, strings.HasPrefix(err.Error(), "NOPERM"), "%v: %v", cmd, err)
				}
			}
			// DEBUG is refused anyway (enable-debug-command is off), so it proves nothing here.
			// What applications and cluster clients need still works.
			data := dataClient(t, f.nodes)
			require.NoError(t, data.Do(ctx, data.B().Set().Key("k").Value("v").Build()).Error())
			assert.NoError(t, data.Do(ctx, data.B().Get().Key("k").Build()).Error())
			for _, cmd := range [][]string{
				{"DBSIZE"}, {"INFO", "server"},
				{"CLUSTER", "SHARDS"}, {"CLUSTER", "SLOTS"}, {"CLUSTER", "NODES"}, {"CLUSTER", "INFO"}, {"SCAN", "0"},
			} {
				assert.NoError(t, do(cmd...), "%v", cmd)
			}
			assert.NoError(t, operatorDo(t, node, operatorPassword, "CONFIG", "GET", "masterauth").Error(), "the operator keeps its rights")

			// The spec turns the default user off: its password no longer logs in.
			off := aclSpec()
			off.DefaultUserOff = true
			require.NoError(t, f.admin.ApplyACL(ctx, f.nodes, off))
			c, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{node.Addr}, Password: defaultPassword, ForceSingleClient: true, DisableCache: true})
			if err == nil {
				defer c.Close()
				err = c.Do(context.Background(), c.B().Ping().Build()).Error()
			}
			require.Error(t, err, "the default user is off")
			assert.Contains(t, err.Error(), "WRONGPASS")
		})
	}
}
