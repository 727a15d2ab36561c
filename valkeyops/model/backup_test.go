package model

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
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
