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

// A user can do exactly what its role allows, and a live ACL change (no restart) takes effect
// on every node (Valkey 8.0 and 9.1).
func TestACLLiveChange(t *testing.T) {
	t.Parallel()
	for _, image := range []string{harness.Image(), harness.Image9()} {
		t.Run(image, func(t *testing.T) {
			t.Parallel()
			const appPassword = "app-secret"
			readOnly := model.ACLUser{
				Name:           "app",
				PasswordHashes: []string{model.HashPassword(appPassword)},
				Permissions: []model.ACLPermission{{
					Categories: []model.ACLRule{{Name: "read", Allow: true}, {Name: "connection", Allow: true}},
					Commands:   []model.ACLRule{{Name: "cluster|slots", Allow: true}, {Name: "cluster|shards", Allow: true}, {Name: "cluster|nodes", Allow: true}},
					Keys:       []model.KeyPattern{{Pattern: "app:*", Access: "read"}},
				}},
			}
			f := newFixture(t, harness.Config{Image: image, ACL: aclSpec(readOnly)}, 3, 1, valkeyops.Options{})
			ctx := ctxT(t, 2*time.Minute)
			require.NoError(t, f.admin.Bootstrap(ctx, f.nodes, 3))
			waitHealthy(t, f, f.nodes, 3, 0, 30*time.Second)
			admin := dataClient(t, f.nodes)
			require.NoError(t, admin.Do(ctx, admin.B().Set().Key("app:1").Value("one").Build()).Error())
			require.NoError(t, admin.Do(ctx, admin.B().Set().Key("other:1").Value("x").Build()).Error())

			app := dataClient(t, f.nodes, func(o *valkey.ClientOption) { o.Username = "app"; o.Password = appPassword })
			get := func(k string) error { return app.Do(ctx, app.B().Get().Key(k).Build()).Error() }
			set := func(k string) error { return app.Do(ctx, app.B().Set().Key(k).Value("v").Build()).Error() }
			isNoPerm := func(err error) bool {
				ve, ok := valkey.IsValkeyErr(err)
				return ok && strings.HasPrefix(ve.Error(), "NOPERM")
			}

			require.NoError(t, get("app:1"), "read allowed on app:*")
			assert.True(t, isNoPerm(set("app:2")), "write denied by the read-only role")
			assert.True(t, isNoPerm(get("other:1")), "keys outside app:* denied")

			// Live change: read-write on app:*, plus a selector granting SET on tmp:*.
			readWrite := readOnly
			readWrite.Permissions = []model.ACLPermission{
				{
					Categories: []model.ACLRule{{Name: "read", Allow: true}, {Name: "write", Allow: true}, {Name: "connection", Allow: true}},
					Commands:   []model.ACLRule{{Name: "cluster|slots", Allow: true}, {Name: "cluster|shards", Allow: true}, {Name: "cluster|nodes", Allow: true}, {Name: "del", Allow: false}},
					Keys:       []model.KeyPattern{{Pattern: "app:*", Access: "readwrite"}},
				},
				{Commands: []model.ACLRule{{Name: "set", Allow: true}}, Keys: []model.KeyPattern{{Pattern: "tmp:*", Access: "write"}}},
			}
			require.NoError(t, f.admin.ApplyACL(ctx, f.nodes, aclSpec(readWrite)))
			require.NoError(t, set("app:2"), "write now allowed on app:*")
			require.NoError(t, get("app:2"))
			assert.True(t, isNoPerm(app.Do(ctx, app.B().Del().Key("app:2").Build()).Error()), "DEL denied explicitly")
			require.NoError(t, set("tmp:1"), "selector grants SET on tmp:*")
			assert.True(t, isNoPerm(get("tmp:1")), "selector grants no read")
			assert.True(t, isNoPerm(get("other:1")))

			// Removing the user from the spec deletes it live everywhere.
			require.NoError(t, f.admin.ApplyACL(ctx, f.nodes, aclSpec()))
			for _, n := range f.nodes {
				c, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{n.Addr}, Username: "app", Password: appPassword, ForceSingleClient: true, DisableCache: true})
				if err == nil {
					err = c.Do(context.Background(), c.B().Ping().Build()).Error()
					c.Close()
				}
				assert.Error(t, err, "app can no longer authenticate on %s", n.Name)
			}
			// The operator still works (it was never locked out).
			_, err := f.admin.Observe(ctx, f.nodes)
			require.NoError(t, err)
			waitHealthy(t, f, f.nodes, 3, 0, 10*time.Second)
		})
	}
}

// The embedded command tables are what the servers know, and CheckCommands refuses exactly
// the command rules the servers refuse (ACL SETUSER on a real server of each release).
func TestCommandTablesMatchServers(t *testing.T) {
	t.Parallel()
	for _, image := range []string{harness.Image(), harness.Image9()} {
		t.Run(image, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, harness.Config{Image: image}, 1, 1, valkeyops.Options{})
			ctx := ctxT(t, time.Minute)
			snap, err := f.admin.Observe(ctx, f.nodes)
			require.NoError(t, err)
			version := snap.Nodes[0].Version
			require.NotEmpty(t, version)
			live, err := f.admin.Commands(ctx, f.nodes[0])
			require.NoError(t, err)
			table, release := model.KnownCommands(version)
			require.True(t, strings.HasPrefix(version, release+"."), "a table for %s itself (run hack/valkey-commands.sh)", version)
			assert.Equal(t, live.Format(), table.Format(), "valkeyops/model/commands/valkey-%s.txt is out of date: run hack/valkey-commands.sh", release)

			for _, rule := range []string{"+get", "+nosuchcmd", "+config|get", "-config|set", "+config|nosuch", "+select|0", "-select|0", "+hsetex", "+CLIENT|LIST"} {
				spec := model.ACLSpec{Users: []model.ACLUser{{Name: "probe", Permissions: []model.ACLPermission{{
					Commands: []model.ACLRule{{Name: rule[1:], Allow: rule[0] == '+'}}}}}}}
				ours := model.CheckCommands(spec, []string{version})
				theirs := operatorDo(t, f.nodes[0], operatorPassword, "ACL", "SETUSER", "probe", rule).Error()
				assert.Equal(t, theirs == nil, ours == nil, "%s on %s: server says %v, CheckCommands says %v", rule, version, theirs, ours)
			}
		})
	}
}
