package atomicdir

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestWriteAndUpdate(t *testing.T) {
	dir := t.TempDir()
	changed, err := Write(dir, []File{{Path: "users.acl", Data: []byte("v1")}, {Path: "sub/a", Data: []byte("A"), Mode: 0o600}}, NoOwner)
	require.NoError(t, err)
	assert.True(t, changed)
	b, err := os.ReadFile(filepath.Join(dir, "users.acl"))
	require.NoError(t, err)
	assert.Equal(t, "v1", string(b))
	st, err := os.Stat(filepath.Join(dir, "sub", "a"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), st.Mode().Perm())

	changed, err = Write(dir, []File{{Path: "users.acl", Data: []byte("v1")}, {Path: "sub/a", Data: []byte("A"), Mode: 0o600}}, NoOwner)
	require.NoError(t, err)
	assert.False(t, changed, "identical payload must not rewrite")

	changed, err = Write(dir, []File{{Path: "users.acl", Data: []byte("v2")}}, NoOwner)
	require.NoError(t, err)
	assert.True(t, changed)
	b, err = os.ReadFile(filepath.Join(dir, "users.acl"))
	require.NoError(t, err)
	assert.Equal(t, "v2", string(b))
	_, err = os.Lstat(filepath.Join(dir, "sub"))
	assert.True(t, os.IsNotExist(err), "removed key must disappear")
	paths, err := Paths(dir)
	require.NoError(t, err)
	assert.Equal(t, []string{"users.acl"}, paths)

	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	hidden := 0
	for _, e := range entries {
		if e.IsDir() && e.Name() != "..data" && e.Name()[:2] == ".." {
			hidden++
		}
	}
	assert.Equal(t, 1, hidden, "old payload directories are removed")
}

func TestWriteRejectsBadPaths(t *testing.T) {
	for _, p := range []string{"", "/abs", "../up", "a/../../b", "a//b"} {
		_, err := Write(t.TempDir(), []File{{Path: p, Data: []byte("x")}}, NoOwner)
		assert.Error(t, err, p)
	}
}
