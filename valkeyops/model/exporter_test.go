package model

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestExporterUser: the exporter user's password is derived from the operator password, is
// neither it nor the replication password, and rotates with it; its rules name only
// commands every release the cluster may run knows (an unknown one would stop a server at
// start-up); extra hashes keep it through a rotation; no spec user can take its name.
func TestExporterUser(t *testing.T) {
	pw := ExporterPassword("o")
	assert.Len(t, pw, 64)
	assert.NotEqual(t, "o", pw)
	assert.NotEqual(t, ReplicationPassword("o"), pw, "a label of its own")
	assert.Equal(t, pw, ExporterPassword("o"), "derived, so the same for the same operator password")
	assert.NotEqual(t, pw, ExporterPassword("o2"), "rotates with the operator password")

	for _, version := range []string{"8.0.1", "9.1.2"} {
		table, release := KnownCommands(version)
		for _, rule := range exporterAccess().commands[1:] {
			assert.Empty(t, table.refuses(ACLRule{Name: rule[1:], Allow: true}), "%s on Valkey %s", rule, release)
		}
	}

	spec := ACLSpec{DefaultPassword: "d", OperatorPassword: "o", ExporterExtraHashes: []string{HashPassword(ExporterPassword("o2"))}}
	require.NoError(t, ValidateACL(spec))
	got := spec.Expected()[ExporterUser]
	assert.True(t, got.On)
	assert.ElementsMatch(t, []string{HashPassword(pw), HashPassword(ExporterPassword("o2"))}, got.Hashes)
	assert.Equal(t, []ACLSelector{{Commands: "-@all +info +cluster|info +latency|latest +latency|histogram +slowlog|len +client|setname"}}, got.Selectors,
		"no key, no channel, no selector")

	spec.ExporterExtraHashes = []string{"o2"}
	assert.ErrorIs(t, ValidateACL(spec), ErrInvalidSpec, "a hash must be a hash")
	spec.ExporterExtraHashes = nil
	spec.Users = []ACLUser{{Name: ExporterUser}}
	assert.ErrorIs(t, ValidateACL(spec), ErrInvalidSpec, "the name is reserved")
}
