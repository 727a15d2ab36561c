package hostvolumes

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRoundSize(t *testing.T) {
	assert.Equal(t, int64(minSize), roundSize(1))
	assert.Equal(t, int64(16*mib), roundSize(16*mib))
	assert.Equal(t, int64(33*mib), roundSize(32*mib+1))
	assert.Equal(t, int64(1<<30), roundSize(1<<30))
}

func TestUnescapeMountPath(t *testing.T) {
	assert.Equal(t, "/tmp/a b/mnt", unescapeMountPath(`/tmp/a\040b/mnt`))
	assert.Equal(t, `/tmp/a\b`, unescapeMountPath(`/tmp/a\134b`))
	assert.Equal(t, `/tmp/x\04`, unescapeMountPath(`/tmp/x\04`), "a cut-off escape stays")
}

// TestDiskLifecycle makes, fills, grows and removes a real image. It needs root and loop
// devices, as the dev cluster's nodes process has.
func TestDiskLifecycle(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("loop mounts need root")
	}
	d := disk{dir: filepath.Join(t.TempDir(), "pvc-test")}
	t.Cleanup(func() { _ = UnmountAll(filepath.Dir(d.dir)) })
	require.NoError(t, d.createImage(16*mib))
	mounted, err := isMountPoint(d.MountPath())
	require.NoError(t, err)
	require.True(t, mounted)
	require.NoError(t, d.createImage(16*mib), "idempotent")

	err = fill(filepath.Join(d.MountPath(), "big"), 20)
	assert.ErrorIs(t, err, syscall.ENOSPC, "20 MiB into 16 MiB")
	before := freeBytes(t, d.MountPath())

	// A second mount of the filesystem (as a container's bind mount is) blocks an offline
	// resize, and the volume stays mounted.
	holder := filepath.Join(t.TempDir(), "holder")
	require.NoError(t, os.Mkdir(holder, 0o755))
	_, err = run("mount", "--bind", d.MountPath(), holder)
	require.NoError(t, err)
	var inUse *InUseError
	assert.ErrorAs(t, d.growOffline(), &inUse)
	mounted, err = isMountPoint(d.MountPath())
	require.NoError(t, err)
	assert.True(t, mounted, "mounted again after the refusal")
	_, err = run("umount", holder)
	require.NoError(t, err)

	require.NoError(t, d.growImage(32*mib))
	if err := d.growFS(); err != nil {
		t.Logf("no online resize here (%v); growing offline", err)
		require.NoError(t, d.growOffline())
	}
	assert.Greater(t, freeBytes(t, d.MountPath()), before+12*mib, "grown")

	img := d.image()
	require.NoError(t, d.remove())
	mounted, err = isMountPoint(d.MountPath())
	require.NoError(t, err)
	assert.False(t, mounted)
	_, err = os.Stat(d.dir)
	assert.ErrorIs(t, err, os.ErrNotExist)
	out, err := exec.Command("losetup", "-a").CombinedOutput()
	require.NoError(t, err)
	assert.NotContains(t, string(out), img, "loop device detached")
}

func fill(path string, mib int) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	chunk := make([]byte, 1<<20)
	for range mib {
		if _, err := f.Write(chunk); err != nil {
			return errors.Join(err, f.Close())
		}
	}
	return errors.Join(f.Sync(), f.Close())
}

func freeBytes(t *testing.T, path string) int64 {
	var fs syscall.Statfs_t
	require.NoError(t, syscall.Statfs(path, &fs))
	return int64(fs.Bavail) * fs.Bsize
}
