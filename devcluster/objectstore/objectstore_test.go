//go:build envtest

package objectstore_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gomomento/valkey-operator/devcluster/objectstore"
)

// startStore runs a real store on loopback with free ports, stopped when t ends.
func startStore(t *testing.T) *objectstore.Store {
	t.Helper()
	bin, err := objectstore.FindBin()
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	s, err := objectstore.Start(ctx, objectstore.Config{Bin: bin, Dir: dir, IP: netip.MustParseAddr("127.0.0.1")})
	require.NoError(t, err)
	t.Cleanup(func() {
		s.Stop()
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(dir, "weed.log"))
			t.Logf("weed.log:\n%s", tail(string(b), 40))
		}
	})
	return s
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// TestObjectStore runs the S3 operations backups need against one real store: the bucket it
// made ready, a small object's round trip, a multipart upload, and refusals of bad keys.
func TestObjectStore(t *testing.T) {
	s := startStore(t)
	cl, err := s.Client()
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	t.Run("bucket ready", func(t *testing.T) {
		ok, err := cl.BucketExists(ctx, s.Bucket)
		require.NoError(t, err)
		assert.True(t, ok)
		assert.Equal(t, objectstore.DefaultBucket, s.Bucket)
	})

	t.Run("put get list delete", func(t *testing.T) {
		body := []byte("a small object\n")
		_, err := cl.PutObject(ctx, s.Bucket, "dir/small.txt", bytes.NewReader(body), int64(len(body)), minio.PutObjectOptions{})
		require.NoError(t, err)

		obj, err := cl.GetObject(ctx, s.Bucket, "dir/small.txt", minio.GetObjectOptions{})
		require.NoError(t, err)
		got, err := io.ReadAll(obj)
		require.NoError(t, err)
		assert.Equal(t, body, got)

		var keys []string
		for o := range cl.ListObjects(ctx, s.Bucket, minio.ListObjectsOptions{Prefix: "dir/", Recursive: true}) {
			require.NoError(t, o.Err)
			keys = append(keys, o.Key)
		}
		assert.Equal(t, []string{"dir/small.txt"}, keys)

		require.NoError(t, cl.RemoveObject(ctx, s.Bucket, "dir/small.txt", minio.RemoveObjectOptions{}))
		_, err = cl.StatObject(ctx, s.Bucket, "dir/small.txt", minio.StatObjectOptions{})
		assert.Equal(t, "NoSuchKey", minio.ToErrorResponse(err).Code, "a deleted object is gone: %v", err)
	})

	t.Run("multipart upload of unknown size reads back identical", func(t *testing.T) {
		// Size -1 with a fixed part size, as a backup streams an RDB of unknown length.
		const size, part = 20 << 20, 5 << 20
		data := make([]byte, size)
		_, _ = rand.Read(data)
		want := sha256.Sum256(data)
		info, err := cl.PutObject(ctx, s.Bucket, "multipart.bin", bytes.NewReader(data), -1, minio.PutObjectOptions{PartSize: part})
		require.NoError(t, err)
		assert.EqualValues(t, size, info.Size)
		// An S3 multipart object's ETag ends in "-" and its part count.
		assert.True(t, strings.HasSuffix(strings.Trim(info.ETag, `"`), "-4"), "ETag %s of a 4-part upload", info.ETag)

		obj, err := cl.GetObject(ctx, s.Bucket, "multipart.bin", minio.GetObjectOptions{})
		require.NoError(t, err)
		h := sha256.New()
		n, err := io.Copy(h, obj)
		require.NoError(t, err)
		assert.EqualValues(t, size, n)
		assert.Equal(t, want[:], h.Sum(nil))
		require.NoError(t, cl.RemoveObject(ctx, s.Bucket, "multipart.bin", minio.RemoveObjectOptions{}))
	})

	t.Run("wrong credentials refused", func(t *testing.T) {
		for _, tc := range []struct {
			name     string
			mutate   func(*objectstore.Access)
			wantCode string
		}{
			{"unknown access key", func(a *objectstore.Access) { a.AccessKey = "nosuchkey" }, "InvalidAccessKeyId"},
			{"wrong secret key", func(a *objectstore.Access) { a.SecretKey = strings.Repeat("x", 40) }, "SignatureDoesNotMatch"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				bad := s.Access
				tc.mutate(&bad)
				bcl, err := bad.Client()
				require.NoError(t, err)
				_, err = bcl.PutObject(ctx, s.Bucket, "refused", strings.NewReader("x"), 1, minio.PutObjectOptions{})
				require.Error(t, err)
				assert.Equal(t, tc.wantCode, minio.ToErrorResponse(err).Code, "%v", err)
				_, err = cl.StatObject(ctx, s.Bucket, "refused", minio.StatObjectOptions{})
				assert.Equal(t, "NoSuchKey", minio.ToErrorResponse(err).Code, "the refused write left no object")
			})
		}
	})

	t.Run("keys stay off the command line and out of others' reach", func(t *testing.T) {
		pid, err := os.ReadFile(filepath.Join(s.Config.Dir, "weed.pid"))
		require.NoError(t, err)
		cmdline, err := os.ReadFile("/proc/" + strings.TrimSpace(string(pid)) + "/cmdline")
		require.NoError(t, err)
		assert.NotContains(t, string(cmdline), s.AccessKey)
		assert.NotContains(t, string(cmdline), s.SecretKey)
		for _, f := range []string{"s3-identities.json", "access.env"} {
			st, err := os.Stat(filepath.Join(s.Config.Dir, f))
			require.NoError(t, err)
			assert.Equal(t, os.FileMode(0o600), st.Mode().Perm(), f)
		}
	})
	t.Run("stop ends the process and removes its sockets", func(t *testing.T) {
		pidText, err := os.ReadFile(filepath.Join(s.Config.Dir, "weed.pid"))
		require.NoError(t, err)
		pid, err := strconv.Atoi(strings.TrimSpace(string(pidText)))
		require.NoError(t, err)
		start := time.Now()
		s.Stop()
		t.Logf("stopped in %s", time.Since(start))
		assert.ErrorIs(t, syscall.Kill(pid, 0), syscall.ESRCH, "weed (pid %d) still exists", pid)
		socks, err := filepath.Glob("/tmp/seaweedfs-*-grpc-*.sock")
		require.NoError(t, err)
		var ports []int
		b, err := os.ReadFile(filepath.Join(s.Config.Dir, "ports.json"))
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(b, &ports))
		for _, p := range ports {
			for _, sock := range socks {
				assert.False(t, strings.HasSuffix(sock, "-grpc-"+strconv.Itoa(p)+".sock"), "socket %s left", sock)
			}
		}
	})
}
