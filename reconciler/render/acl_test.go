package render_test

import (
	"testing"

	"github.com/gomomento/valkey-operator/reconciler/render"
	"github.com/gomomento/valkey-operator/reconciler/views"
	"github.com/gomomento/valkey-operator/valkeyops/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// roles is a ValkeyRole lookup over a fixed set.
func roles(t *testing.T, defs map[string][2][]views.Rule) func(string) (views.Role, bool) {
	return func(name string) (views.Role, bool) {
		d, ok := defs[name]
		if !ok {
			return views.Role{}, false
		}
		r := views.Role{U: views.NewRoleObject()}
		r.U.SetName(name)
		r.SetCategories(d[0])
		r.SetCommands(d[1])
		return r, true
	}
}

// TestACLSpec renders spec.acl with its ValkeyRoles through model.RenderACL and checks
// the exact file lines: passwords only as hashes, the first permission as the user's root
// rules, each further one as a selector, and a missing role left out (fewer rights, never
// more) and reported.
func TestACLSpec(t *testing.T) {
	lookup := roles(t, map[string][2][]views.Rule{
		"reader": {{{Name: "read", Allow: true}}, {{Name: "keys", Allow: false}}},
		"writer": {{{Name: "write", Allow: true}}, nil},
	})
	appHash := model.HashPassword("app-pw")
	tests := []struct {
		name        string
		users       []views.ACLUser
		defaultOn   bool     // spec.defaultUser as the view resolves it
		wantUsers   []string // the lines after default, operator, replication and exporter
		wantMissing []string
	}{
		{name: "no users", defaultOn: true},
		{
			name:      "users with the default user kept (spec.defaultUser: Enabled)",
			defaultOn: true,
			users: []views.ACLUser{{Username: "app", PasswordHashes: []string{appHash}, Permissions: []views.ACLPermission{
				{RoleRef: "writer", Keys: []views.KeyPermission{{Pattern: "w:*", Access: "readwrite"}}},
			}}},
			wantUsers: []string{"user app on #" + appHash + " ~w:* resetchannels -@all +@write"},
		},
		{
			name: "root rules and a selector",
			users: []views.ACLUser{{Username: "app", PasswordHashes: []string{appHash}, Permissions: []views.ACLPermission{
				{RoleRef: "reader", Keys: []views.KeyPermission{{Pattern: "app:*", Access: "read"}}, Channels: []string{"news"}},
				{RoleRef: "writer", Keys: []views.KeyPermission{{Pattern: "w:*", Access: "readwrite"}, {Pattern: "log:*", Access: "write"}}},
			}}},
			wantUsers: []string{"user app on #" + appHash + " %R~app:* resetchannels &news -@all +@read -keys (~w:* %W~log:* resetchannels -@all +@write)"},
		},
		{
			name: "missing role is left out",
			users: []views.ACLUser{{Username: "app", PasswordHashes: []string{appHash, model.HashPassword("next")}, Permissions: []views.ACLPermission{
				{RoleRef: "gone", Keys: []views.KeyPermission{{Pattern: "*", Access: "readwrite"}}},
				{RoleRef: "reader", Keys: []views.KeyPermission{{Pattern: "app:*", Access: "read"}}},
			}}},
			wantUsers:   []string{"user app on #" + appHash + " #" + model.HashPassword("next") + " %R~app:* resetchannels -@all +@read -keys"},
			wantMissing: []string{"gone"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec, missing := render.ACLSpec(tt.users, tt.defaultOn, lookup, "d-pw", "o-pw")
			assert.Equal(t, tt.wantMissing, missing)
			require.NoError(t, model.ValidateACL(spec))
			state := map[bool]string{true: "on", false: "off"}[tt.defaultOn]
			// The applications' shared login never administers anything, and is off unless kept.
			want := "user default " + state + " #" + model.HashPassword("d-pw") + " ~* resetchannels &* +@all -@admin -@dangerous +info\n" +
				"user operator on #" + model.HashPassword("o-pw") + " ~* resetchannels &* +@all\n" +
				"user replication on #" + model.HashPassword(model.ReplicationPassword("o-pw")) + " resetchannels -@all +psync +sync +replconf +ping\n" +
				"user exporter on #" + model.HashPassword(model.ExporterPassword("o-pw")) + " resetchannels -@all +info +cluster|info +latency|latest +latency|histogram +slowlog|len +client|setname\n" +
				"user backup on #" + model.HashPassword(model.BackupPassword("o-pw")) + " resetchannels -@all +replconf +sync\n"
			for _, l := range tt.wantUsers {
				want += l + "\n"
			}
			assert.Equal(t, want, model.RenderACL(spec))
		})
	}
}
