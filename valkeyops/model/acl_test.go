package model

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRenderACL(t *testing.T) {
	h := HashPassword("pw")
	tests := []struct {
		name  string
		users []ACLUser
		want  []string // lines after default, operator, replication, exporter and backup
	}{
		{name: "no spec users"},
		{
			name: "categories, commands, key access, channels",
			users: []ACLUser{{Name: "app", PasswordHashes: []string{strings.ToUpper(h)}, Permissions: []ACLPermission{{
				Categories: []ACLRule{{Name: "read", Allow: true}, {Name: "@dangerous", Allow: false}},
				Commands:   []ACLRule{{Name: "SET", Allow: true}, {Name: "config|get", Allow: false}},
				Keys:       []KeyPattern{{Pattern: "r:*", Access: "read"}, {Pattern: "w:*", Access: "write"}, {Pattern: "rw:*", Access: "readwrite"}},
				Channels:   []string{"news.*"},
			}}}},
			want: []string{"user app on #" + h + " %R~r:* %W~w:* ~rw:* resetchannels &news.* -@all +@read -@dangerous +set -config|get"},
		},
		{
			name: "extra permissions become selectors",
			users: []ACLUser{{Name: "sel", PasswordHashes: []string{h}, Permissions: []ACLPermission{
				{Categories: []ACLRule{{Name: "read", Allow: true}}, Keys: []KeyPattern{{Pattern: "a:*", Access: "read"}}},
				{Commands: []ACLRule{{Name: "set", Allow: true}}, Keys: []KeyPattern{{Pattern: "b:*", Access: "write"}}},
			}}},
			want: []string{"user sel on #" + h + " %R~a:* resetchannels -@all +@read (%W~b:* resetchannels -@all +set)"},
		},
		{
			name:  "user without permissions gets nothing",
			users: []ACLUser{{Name: "none", PasswordHashes: []string{h}}},
			want:  []string{"user none on #" + h + " resetchannels -@all"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := ACLSpec{DefaultPassword: "d", OperatorPassword: "o", Users: tt.users}
			require.NoError(t, ValidateACL(spec))
			got := strings.Split(strings.TrimSuffix(RenderACL(spec), "\n"), "\n")
			require.GreaterOrEqual(t, len(got), 5)
			assert.Equal(t, "user default on #"+HashPassword("d")+" ~* resetchannels &* +@all -@admin -@dangerous +info", got[0], "the applications' login administers nothing")
			assert.Equal(t, "user operator on #"+HashPassword("o")+" ~* resetchannels &* +@all", got[1])
			assert.Equal(t, "user replication on #"+HashPassword(ReplicationPassword("o"))+" resetchannels -@all +psync +sync +replconf +ping", got[2],
				"replicas' login runs only replication")
			assert.Equal(t, "user exporter on #"+HashPassword(ExporterPassword("o"))+" resetchannels -@all +info +cluster|info +latency|latest +latency|histogram +slowlog|len +client|setname", got[3],
				"the exporter's login reads statistics only: no key, no channel, no CONFIG, no SLOWLOG GET")
			assert.Equal(t, "user backup on #"+HashPassword(BackupPassword("o"))+" resetchannels -@all +replconf +sync", got[4],
				"the backup login runs the snapshot stream only: no key, no channel")
			assert.Equal(t, "user "+BackupUser+" "+strings.Join(BackupLine(HashPassword(BackupPassword("o"))).Rules, " "), got[4],
				"the file's line is the one BackupLine gives ACL SETUSER")
			// Every line is asserted whole, so no plaintext password can hide in the file.
			assert.Equal(t, tt.want, nilIfEmpty(got[5:]))
		})
	}
}

// TestReplicationUser: the replication user's password is not the operator's and reveals
// nothing of it; it is granted CLUSTER SYNCSLOTS only when every release of the cluster
// knows it, and with it the write commands on every key (what an atomic migration's target
// runs as this user); extra hashes keep it through a rotation; no spec user can take its name.
func TestReplicationUser(t *testing.T) {
	pw := ReplicationPassword("o")
	assert.NotEqual(t, "o", pw)
	assert.NotContains(t, pw, "o-")
	assert.Len(t, pw, 64)
	assert.Equal(t, pw, ReplicationPassword("o"), "derived, so the same for the same operator password")
	assert.NotEqual(t, pw, ReplicationPassword("o2"), "rotates with the operator password")

	for _, tt := range []struct {
		versions []string
		want     bool
	}{
		{nil, false},
		{[]string{"8.0.1"}, false},
		{[]string{"9.1.2"}, true},
		{[]string{"9.1.2", "8.0.1"}, false},
	} {
		assert.Equal(t, tt.want, ReplicationSyncsSlots(tt.versions), "%v", tt.versions)
	}
	spec := ACLSpec{DefaultPassword: "d", OperatorPassword: "o", ReplicationSyncsSlots: true,
		ReplicationExtraHashes: []string{HashPassword(ReplicationPassword("o2"))}}
	require.NoError(t, ValidateACL(spec))
	got := spec.Expected()[ReplicationUser]
	assert.Equal(t, "-@all +@write -@dangerous +select +multi +exec +psync +sync +replconf +ping +cluster|syncslots", got.Selectors[0].Commands)
	assert.Equal(t, "~*", got.Selectors[0].Keys, "writes every key (a replayed INCR reads it too)")
	assert.Empty(t, got.Selectors[0].Channels)
	spec.ReplicationSyncsSlots = false
	got = spec.Expected()[ReplicationUser]
	assert.Equal(t, "-@all +psync +sync +replconf +ping", got.Selectors[0].Commands, "before Valkey 9: replication only")
	assert.Empty(t, got.Selectors[0].Keys, "before Valkey 9: no key")
	spec.ReplicationSyncsSlots = true
	assert.ElementsMatch(t, []string{HashPassword(pw), HashPassword(ReplicationPassword("o2"))}, got.Hashes)

	spec.ReplicationExtraHashes = []string{"o2"}
	assert.ErrorIs(t, ValidateACL(spec), ErrInvalidSpec, "a hash must be a hash")
	spec.ReplicationExtraHashes = nil
	spec.Users = []ACLUser{{Name: ReplicationUser}}
	assert.ErrorIs(t, ValidateACL(spec), ErrInvalidSpec, "the name is reserved")
}

func nilIfEmpty(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return s
}

func TestValidateACL(t *testing.T) {
	h := HashPassword("x")
	ok := ACLSpec{DefaultPassword: "d", OperatorPassword: "o"}
	tests := []struct {
		name string
		spec ACLSpec
		ok   bool
	}{
		{"minimal", ok, true},
		{"missing operator password", ACLSpec{DefaultPassword: "d"}, false},
		{"reserved name", withUser(ok, ACLUser{Name: "operator"}), false},
		{"reserved backup name", withUser(ok, ACLUser{Name: BackupUser}), false},
		{"backup hash not a hash", ACLSpec{DefaultPassword: "d", OperatorPassword: "o", BackupExtraHashes: []string{"pw"}}, false},
		{"backup hash", ACLSpec{DefaultPassword: "d", OperatorPassword: "o", BackupExtraHashes: []string{h}}, true},
		{"duplicate", withUser(withUser(ok, ACLUser{Name: "a"}), ACLUser{Name: "a"}), false},
		{"bad name", withUser(ok, ACLUser{Name: "a b"}), false},
		{"bad hash", withUser(ok, ACLUser{Name: "a", PasswordHashes: []string{"plain"}}), false},
		{"bad access", withUser(ok, ACLUser{Name: "a", PasswordHashes: []string{h}, Permissions: []ACLPermission{{Keys: []KeyPattern{{Pattern: "x", Access: "all"}}}}}), false},
		{"pattern with space", withUser(ok, ACLUser{Name: "a", Permissions: []ACLPermission{{Keys: []KeyPattern{{Pattern: "x y", Access: "read"}}}}}), false},
		{"selector injection", withUser(ok, ACLUser{Name: "a", Permissions: []ACLPermission{{Channels: []string{"x)"}}}}), false},
		{"pattern with a quote", withUser(ok, ACLUser{Name: "a", Permissions: []ACLPermission{{Keys: []KeyPattern{{Pattern: `x"`, Access: "read"}}}}}), false},
		{"channel with a newline", withUser(ok, ACLUser{Name: "a", Permissions: []ACLPermission{{Channels: []string{"x\nuser evil on nopass +@all"}}}}), false},
		{"channel with a control character", withUser(ok, ACLUser{Name: "a", Permissions: []ACLPermission{{Channels: []string{"x\x01"}}}}), false},
		{"glob patterns", withUser(ok, ACLUser{Name: "a", Permissions: []ACLPermission{{Keys: []KeyPattern{{Pattern: "app:[a-z]*?", Access: "read"}}, Channels: []string{"news.*"}}}}), true},
		{"bad command", withUser(ok, ACLUser{Name: "a", Permissions: []ACLPermission{{Commands: []ACLRule{{Name: "get ~*"}}}}}), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidateACL(tt.spec)
			if tt.ok {
				assert.NoError(t, err)
				return
			}
			assert.ErrorIs(t, err, ErrInvalidSpec)
		})
	}
}

func withUser(s ACLSpec, u ACLUser) ACLSpec {
	s.Users = append(append([]ACLUser(nil), s.Users...), u)
	return s
}
