// Package testimage builds a tiny local Docker image for the dev cluster's own
// tests. No registry is reachable here, so the image is a single static Go
// binary (package devpod) packed with `docker import`.
package testimage

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// Image is the tag the test image gets.
const Image = "valkey-operator/devpod:test"

// Ensure builds and imports the image unless a fresh copy exists. It is cheap
// to call from every test. It returns the image's own tag, named after the
// binary's hash, besides tagging it Image: a test that needs what this
// version of devpod does names that tag, since another checkout's test run
// may re-tag Image with its own devpod at any moment on a shared Docker.
func Ensure(ctx context.Context) (string, error) {
	_, self, _, _ := runtime.Caller(0)
	src := filepath.Join(filepath.Dir(self), "devpod")
	tmp, err := os.MkdirTemp("", "devpod")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	bin := filepath.Join(tmp, "devpod")
	build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, ".")
	build.Dir = src
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build devpod: %w: %s", err, out)
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		return "", err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, d := range []string{"tmp/", "etc/"} {
		_ = tw.WriteHeader(&tar.Header{Name: d, Mode: 0o1777, Typeflag: tar.TypeDir})
	}
	_ = tw.WriteHeader(&tar.Header{Name: "devpod", Mode: 0o755, Size: int64(len(data)), Typeflag: tar.TypeReg})
	_, _ = tw.Write(data)
	if err := tw.Close(); err != nil {
		return "", err
	}
	sum := sha256.Sum256(data)
	own := fmt.Sprintf("%s:%x", strings.Split(Image, ":")[0], sum[:6])
	imp := exec.CommandContext(ctx, "docker", "import", "--change", `ENTRYPOINT ["/devpod"]`, "--change", `CMD ["serve"]`, "-", own)
	imp.Stdin = &buf
	if out, err := imp.CombinedOutput(); err != nil {
		return "", fmt.Errorf("docker import: %w: %s", err, out)
	}
	if out, err := exec.CommandContext(ctx, "docker", "tag", own, Image).CombinedOutput(); err != nil {
		return "", fmt.Errorf("docker tag: %w: %s", err, out)
	}
	return own, nil
}
