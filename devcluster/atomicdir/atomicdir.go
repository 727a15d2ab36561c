// Package atomicdir publishes a set of files into a directory so that a reader
// sees either the whole old set or the whole new set, never a mix: the scheme a
// kubelet uses for ConfigMap and Secret volumes.
//
// Layout: the payload lives in a hidden timestamped directory; "..data" is a
// symlink to it; each visible top-level name is a symlink through "..data".
// An update writes a new hidden directory and renames a fresh symlink over
// "..data", which is atomic. The directory can therefore be bind-mounted into a
// container once and still follow later updates.
package atomicdir

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

const dataLink = "..data"

// File is one file of the payload. Path is relative and may contain "/".
type File struct {
	Path string
	Data []byte
	Mode os.FileMode
}

// Owner sets the owner of written files; -1 leaves it unchanged.
type Owner struct{ UID, GID int }

// NoOwner keeps files owned by the writing process.
var NoOwner = Owner{UID: -1, GID: -1}

// Write publishes files into dir. It reports whether anything changed; an
// identical payload leaves the directory untouched.
func Write(dir string, files []File, owner Owner) (bool, error) {
	for _, f := range files {
		if err := checkPath(f.Path); err != nil {
			return false, err
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return false, err
	}
	oldTarget, _ := os.Readlink(filepath.Join(dir, dataLink))
	if oldTarget != "" && same(filepath.Join(dir, oldTarget), files) {
		return false, nil
	}

	tsDir, err := newHiddenDir(dir)
	if err != nil {
		return false, err
	}
	for _, f := range files {
		p := filepath.Join(dir, tsDir, f.Path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return false, err
		}
		mode := f.Mode
		if mode == 0 {
			mode = 0o644
		}
		if err := os.WriteFile(p, f.Data, mode); err != nil {
			return false, err
		}
		if err := os.Chmod(p, mode); err != nil { // WriteFile's mode is masked by umask
			return false, err
		}
	}
	if owner.UID >= 0 || owner.GID >= 0 {
		if err := chownTree(filepath.Join(dir, tsDir), owner); err != nil {
			return false, err
		}
	}

	tmpLink := filepath.Join(dir, "..data_tmp")
	_ = os.Remove(tmpLink)
	if err := os.Symlink(tsDir, tmpLink); err != nil {
		return false, err
	}
	if err := os.Rename(tmpLink, filepath.Join(dir, dataLink)); err != nil {
		return false, err
	}

	want := map[string]bool{}
	for _, f := range files {
		want[strings.SplitN(f.Path, "/", 2)[0]] = true
	}
	for name := range want {
		link := filepath.Join(dir, name)
		if target, err := os.Readlink(link); err == nil && target == filepath.Join(dataLink, name) {
			continue
		}
		_ = os.RemoveAll(link)
		if err := os.Symlink(filepath.Join(dataLink, name), link); err != nil {
			return false, err
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false, err
	}
	for _, e := range entries {
		name := e.Name()
		switch {
		case name == dataLink || name == tsDir:
		case strings.HasPrefix(name, ".."):
			_ = os.RemoveAll(filepath.Join(dir, name)) // older payload directories
		case !want[name]:
			_ = os.Remove(filepath.Join(dir, name))
		}
	}
	return true, nil
}

// same reports whether dir holds exactly files.
func same(dir string, files []File) bool {
	count := 0
	err := filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			count++
		}
		return err
	})
	if err != nil || count != len(files) {
		return false
	}
	for _, f := range files {
		p := filepath.Join(dir, f.Path)
		data, err := os.ReadFile(p)
		if err != nil || !bytes.Equal(data, f.Data) {
			return false
		}
		st, err := os.Stat(p)
		mode := f.Mode
		if mode == 0 {
			mode = 0o644
		}
		if err != nil || st.Mode().Perm() != mode.Perm() {
			return false
		}
	}
	return true
}

func newHiddenDir(dir string) (string, error) {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	name := ".." + time.Now().UTC().Format("2006_01_02_15_04_05") + "." + hex.EncodeToString(b)
	return name, os.Mkdir(filepath.Join(dir, name), 0o755)
}

func chownTree(root string, owner Owner) error {
	return filepath.WalkDir(root, func(p string, _ os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, owner.UID, owner.GID)
	})
}

func checkPath(p string) error {
	if p == "" || filepath.IsAbs(p) || strings.HasPrefix(p, "..") || strings.Contains(p, "/../") || filepath.Clean(p) != p {
		return fmt.Errorf("invalid volume file path %q", p)
	}
	return nil
}

// Paths lists the payload paths currently published in dir, sorted.
func Paths(dir string) ([]string, error) {
	target, err := os.Readlink(filepath.Join(dir, dataLink))
	if err != nil {
		return nil, err
	}
	root := filepath.Join(dir, target)
	var out []string
	err = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			rel, _ := filepath.Rel(root, p)
			out = append(out, rel)
		}
		return nil
	})
	sort.Strings(out)
	return out, err
}
