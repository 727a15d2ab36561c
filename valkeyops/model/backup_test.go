package model

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBackupLine: the backup user may run REPLCONF and SYNC and nothing else: no category,
// no key pattern, no channel (resetchannels and nothing after it), no PSYNC or PING; its
// password appears only as a hash.
func TestBackupLine(t *testing.T) {
	h := HashPassword("backup-pw")
	l := BackupLine(h)
	assert.Equal(t, BackupUser, l.User)
	assert.Equal(t, "on #"+h+" resetchannels -@all +replconf +sync", strings.Join(l.Rules, " "))
	for _, r := range l.Rules {
		assert.NotContains(t, r, "backup-pw")
		assert.False(t, strings.HasPrefix(r, "~") || strings.HasPrefix(r, "%") || strings.HasPrefix(r, "&"), "no key or channel pattern: %s", r)
	}
	assert.Equal(t, []string{"on", "#" + h, "#" + HashPassword("next"), "resetchannels", "-@all", "+replconf", "+sync"},
		BackupLine(h, HashPassword("next")).Rules, "a rotation's second hash follows the first")
}

// TestBackupUser: the backup user's password is derived from the operator password, is none
// of the operator's, the replication's or the exporter's, and rotates with it; every cluster's
// file holds the user with that password's hash and BackupLine's rules, which name only
// commands both releases know (an unknown one would stop a server at start-up); during a
// rotation it accepts both passwords, the login's first; no spec user can take its name.
func TestBackupUser(t *testing.T) {
	pw := BackupPassword("o")
	assert.Len(t, pw, 64)
	assert.NotContains(t, []string{"o", ReplicationPassword("o"), ExporterPassword("o")}, pw, "a label of its own")
	assert.Equal(t, pw, BackupPassword("o"), "derived, so the same for the same operator password")
	assert.NotEqual(t, pw, BackupPassword("o2"), "rotates with the operator password")

	for _, version := range []string{"8.0.1", "9.1.2"} {
		table, release := KnownCommands(version)
		for _, rule := range backupAccess().commands[1:] {
			assert.Empty(t, table.refuses(ACLRule{Name: rule[1:], Allow: true}), "%s on Valkey %s", rule, release)
		}
	}

	spec := ACLSpec{DefaultPassword: "d", OperatorPassword: "o"}
	require.NoError(t, ValidateACL(spec))
	assert.Contains(t, spec.Lines(), BackupLine(HashPassword(pw)), "every cluster's ACL holds the backup user with the derived password")
	got := spec.Expected()[BackupUser]
	assert.True(t, got.On)
	assert.Equal(t, []string{HashPassword(pw)}, got.Hashes)
	assert.Equal(t, []ACLSelector{{Commands: "-@all +replconf +sync"}}, got.Selectors, "no key, no channel, no selector")

	next := HashPassword(BackupPassword("o2"))
	spec.BackupExtraHashes = []string{next, strings.ToUpper(next), HashPassword(pw)}
	require.NoError(t, ValidateACL(spec))
	assert.Contains(t, spec.Lines(), BackupLine(HashPassword(pw), next), "rotating: the login's password first, the next one once")
	assert.ElementsMatch(t, []string{HashPassword(pw), next}, spec.Expected()[BackupUser].Hashes)

	spec.BackupExtraHashes = []string{"o2"}
	assert.ErrorIs(t, ValidateACL(spec), ErrInvalidSpec, "a hash must be a hash")
	spec.BackupExtraHashes = nil
	spec.Users = []ACLUser{{Name: BackupUser}}
	assert.ErrorIs(t, ValidateACL(spec), ErrInvalidSpec, "the name is reserved")
}
