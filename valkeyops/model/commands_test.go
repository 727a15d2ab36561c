package model

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCheckCommands(t *testing.T) {
	rule := func(name string, allow bool) ACLSpec {
		return ACLSpec{Users: []ACLUser{{Name: "app", Permissions: []ACLPermission{{Commands: []ACLRule{{Name: name, Allow: allow}}}}}}}
	}
	tests := []struct {
		name     string
		rule     string
		allow    bool
		versions []string
		refused  string // "" = accepted
	}{
		{name: "a command every release knows", rule: "get", allow: true},
		{name: "names are case-insensitive", rule: "CONFIG|GET", allow: true},
		{name: "a subcommand may be denied", rule: "config|set", allow: false, versions: []string{"8.0.1"}},
		{name: "an unknown command", rule: "nosuchcmd", allow: true, versions: []string{"9.1.2"}, refused: `user "app": +nosuchcmd: no such command (Valkey 9.1)`},
		{name: "an unknown subcommand", rule: "config|nosuch", allow: true, versions: []string{"8.0.1"}, refused: "no such subcommand (Valkey 8.0)"},
		{name: "a first argument may be allowed", rule: "select|0", allow: true, versions: []string{"8.0.1"}},
		{name: "a first argument cannot be denied", rule: "select|0", allow: false, versions: []string{"8.0.1"}, refused: "a first argument can only be allowed"},
		{name: "a 9.1 command on a 9.1 cluster", rule: "hsetex", allow: true, versions: []string{"9.1.2"}},
		{name: "a 9.1 command while 8.0 nodes still run", rule: "hsetex", allow: true, versions: []string{"9.1.2", "8.0.1"}, refused: "no such command (Valkey 8.0)"},
		{name: "a 9.1 command with no version known", rule: "hsetex", allow: true, refused: "(Valkey 8.0)"},
		{name: "a release between tables uses the older one", rule: "hsetex", allow: true, versions: []string{"8.1.3"}, refused: "(Valkey 8.0)"},
		{name: "a newer release than any table uses the newest", rule: "hsetex", allow: true, versions: []string{"10.0.0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckCommands(rule(tt.rule, tt.allow), tt.versions)
			if tt.refused == "" {
				assert.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrInvalidSpec)
			assert.Contains(t, err.Error(), tt.refused)
		})
	}
}

func TestCommandTablesEmbedded(t *testing.T) {
	rels := releases()
	require.GreaterOrEqual(t, len(rels), 2)
	for _, r := range rels {
		assert.Greater(t, len(r.table), 200, "release %s", r)
		assert.Contains(t, r.table["config"], "get", "release %s", r)
		assert.Empty(t, r.table["get"], "release %s", r)
	}
}
