package hostvolumes

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// A volume's backing lives in <dir>/<pv name>/: disk.img, an ext4 image of the claimed size,
// loop-mounted at mnt/. The image is what makes the size real: writing past it fails with
// ENOSPC, as on a cloud disk. Without root or loop devices, mnt/ is a plain directory instead
// and the size is not enforced.

const (
	imageName = "disk.img"
	mountName = "mnt"
)

// disk is the backing of one volume.
type disk struct{ dir string }

func (d disk) image() string { return filepath.Join(d.dir, imageName) }

// MountPath is the directory pods bind-mount: the PV's spec.local.path.
func (d disk) MountPath() string { return filepath.Join(d.dir, mountName) }

// CmdError is a failed host command, with its output.
type CmdError struct {
	Cmd    string
	Err    error
	Output string
}

func (e *CmdError) Error() string {
	return fmt.Sprintf("%s: %v: %s", e.Cmd, e.Err, strings.TrimSpace(e.Output))
}

func (e *CmdError) Unwrap() error { return e.Err }

func run(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return string(out), &CmdError{Cmd: name + " " + strings.Join(args, " "), Err: err, Output: string(out)}
	}
	return string(out), nil
}

// createImage makes a fresh ext4 image of size bytes and mounts it. A leftover image of an
// interrupted attempt is mounted as it is (formatting twice would be harmless, but a
// mounted image cannot be reformatted).
func (d disk) createImage(size int64) error {
	if err := os.MkdirAll(d.MountPath(), 0o755); err != nil {
		return err
	}
	if _, err := os.Stat(d.image()); errors.Is(err, os.ErrNotExist) {
		if _, err := run("truncate", "-s", strconv.FormatInt(size, 10), d.image()+".tmp"); err != nil {
			return err
		}
		// -m 0: no blocks reserved for root, so the whole size is the pod's.
		if _, err := run("mkfs.ext4", "-q", "-F", "-m", "0", d.image()+".tmp"); err != nil {
			return err
		}
		if err := os.Rename(d.image()+".tmp", d.image()); err != nil {
			return err
		}
	}
	return d.mount()
}

// mount loop-mounts the image unless it is mounted already. A loop device still attached
// to the image (a container keeps the filesystem alive after the host unmounted it) is
// mounted again rather than a second one attached: two loop devices on one image would be
// two filesystems writing the same blocks.
func (d disk) mount() error {
	if mounted, err := isMountPoint(d.MountPath()); err != nil || mounted {
		return err
	}
	if err := os.MkdirAll(d.MountPath(), 0o755); err != nil {
		return err
	}
	if dev, err := loopDevice(d.image()); err == nil {
		_, err = run("mount", dev, d.MountPath())
		return err
	}
	_, err := run("mount", "-o", "loop", d.image(), d.MountPath())
	return err
}

// hasImage reports whether the volume is image-backed (not the plain-directory fallback).
func (d disk) hasImage() bool {
	_, err := os.Stat(d.image())
	return err == nil
}

// makePlainDir is the fallback backing: a directory, with no size limit. An image that could
// not be mounted is dropped, so the volume counts as a plain directory from now on (Remount
// and grow look for the image).
func (d disk) makePlainDir() error {
	for _, f := range []string{d.image(), d.image() + ".tmp"} {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return os.MkdirAll(d.MountPath(), 0o755)
}

// growImage enlarges the image to size bytes and tells its loop device. The filesystem in it
// keeps its size until growFS or growOffline.
func (d disk) growImage(size int64) error {
	if _, err := run("truncate", "-s", strconv.FormatInt(size, 10), d.image()); err != nil {
		return err
	}
	if dev, err := loopDevice(d.image()); err == nil {
		_, err = run("losetup", "-c", dev)
		return err
	}
	return nil
}

// growFS grows the mounted filesystem to fill its image, online. The kernel allows that only
// with CAP_SYS_RESOURCE, which some hosts (this project's CI machines among them) withhold
// even from root; growOffline is the other way.
func (d disk) growFS() error {
	dev, err := loopDevice(d.image())
	if err != nil {
		return err
	}
	_, err = run("resize2fs", dev)
	return err
}

// InUseError says a volume's filesystem is still mounted by a container, so it cannot be
// resized offline.
type InUseError struct{ Image string }

func (e *InUseError) Error() string {
	return fmt.Sprintf("%s is still in use by a container", e.Image)
}

// growOffline grows the filesystem while nothing uses it: unmount, check, resize, mount. It
// refuses (InUseError) when the loop device outlives the host's unmount, which means a
// container still has the filesystem mounted.
func (d disk) growOffline() error {
	if mounted, err := isMountPoint(d.MountPath()); err != nil {
		return err
	} else if mounted {
		if _, err := run("umount", d.MountPath()); err != nil {
			return err
		}
	}
	// mount -o loop set autoclear: the device goes once the last mount of it is gone.
	detached := false
	for deadline := time.Now().Add(2 * time.Second); !detached && time.Now().Before(deadline); {
		if _, err := loopDevice(d.image()); err != nil {
			detached = true
		} else {
			time.Sleep(50 * time.Millisecond)
		}
	}
	if !detached {
		return errors.Join(&InUseError{Image: d.image()}, d.mount())
	}
	// resize2fs wants a freshly checked filesystem; e2fsck exits 1 when it fixed something.
	if _, err := run("e2fsck", "-f", "-p", d.image()); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 {
			return errors.Join(err, d.mount())
		}
	}
	if _, err := run("resize2fs", d.image()); err != nil {
		return errors.Join(err, d.mount())
	}
	return d.mount()
}

// remove unmounts the volume, detaches its loop device and deletes its directory.
func (d disk) remove() error {
	if err := unmountUnder(d.dir); err != nil {
		return err
	}
	return os.RemoveAll(d.dir)
}

// loopDevice is the loop device attached to image.
func loopDevice(image string) (string, error) {
	out, err := run("losetup", "-j", image)
	if err != nil {
		return "", err
	}
	dev, _, ok := strings.Cut(strings.TrimSpace(out), ":")
	if !ok || dev == "" {
		return "", fmt.Errorf("no loop device attached to %s", image)
	}
	return dev, nil
}

// UnmountAll unmounts every volume under dir and detaches its loop device, so dir can be
// removed. A missing dir is not an error.
func UnmountAll(dir string) error {
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return unmountUnder(dir)
}

// unmountUnder unmounts every mount point at or below dir, then detaches loop devices still
// attached to images below dir (mount -o loop sets autoclear, so normally there are none).
func unmountUnder(dir string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	points, err := mountPoints()
	if err != nil {
		return err
	}
	var errs []error
	// Deepest first, so nested mounts go before their parents.
	for i := len(points) - 1; i >= 0; i-- {
		p := points[i]
		if p == abs || strings.HasPrefix(p, abs+"/") {
			if _, err := run("umount", p); err != nil {
				errs = append(errs, err)
			}
		}
	}
	images, _ := filepath.Glob(filepath.Join(abs, "*", imageName))
	for _, img := range images {
		if dev, err := loopDevice(img); err == nil {
			if _, err := run("losetup", "-d", dev); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

func isMountPoint(path string) (bool, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return false, err
	}
	points, err := mountPoints()
	if err != nil {
		return false, err
	}
	for _, p := range points {
		if p == abs {
			return true, nil
		}
	}
	return false, nil
}

// mountPoints lists this mount namespace's mount points in mount order (the Docker daemon
// shares it: the dev cluster's nodes run on the Docker host).
func mountPoints() ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 64*1024), 1024*1024)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) > 4 {
			out = append(out, unescapeMountPath(fields[4]))
		}
	}
	return out, s.Err()
}

// unescapeMountPath undoes mountinfo's octal escapes (\040 for a space and so on).
func unescapeMountPath(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
