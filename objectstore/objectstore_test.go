//go:build envtest

package objectstore

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	devstore "github.com/gomomento/valkey-operator/devcluster/objectstore"
)

// TestAgainstRealStore drives every operation a backup and a restore need against one real
// S3-compatible server (the dev cluster's SeaweedFS on loopback): round trips, a multipart
// upload of unknown size, an interrupted upload that leaves no object, and each typed
// failure for what a user can get wrong.
func TestAgainstRealStore(t *testing.T) {
	bin, err := devstore.FindBin()
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	dev, err := devstore.Start(ctx, devstore.Config{Bin: bin, Dir: dir, IP: netip.MustParseAddr("127.0.0.1")})
	require.NoError(t, err)
	t.Cleanup(func() {
		dev.Stop()
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(dir, "weed.log"))
			t.Logf("weed.log:\n%s", b)
		}
	})
	loc := Location{Endpoint: dev.Endpoint, Bucket: dev.Bucket, Prefix: "valkey/prod", Region: devstore.Region,
		AccessKey: dev.AccessKey, SecretKey: dev.SecretKey}
	s, err := Open(loc)
	require.NoError(t, err)
	require.NoError(t, s.Check(ctx), "the bucket is there")

	t.Run("small object round trip under the prefix", func(t *testing.T) {
		key := s.Key("ns", "c", "b1", "manifest.json")
		assert.Equal(t, "valkey/prod/ns/c/b1/manifest.json", key)
		require.NoError(t, s.PutSmall(ctx, key, []byte(`{"formatVersion":1}`), "application/json"))
		size, err := s.Stat(ctx, key)
		require.NoError(t, err)
		assert.EqualValues(t, 19, size)
		r, n, err := s.Get(ctx, key)
		require.NoError(t, err)
		got, err := io.ReadAll(r)
		require.NoError(t, r.Close())
		require.NoError(t, err)
		assert.Equal(t, `{"formatVersion":1}`, string(got))
		assert.EqualValues(t, 19, n)
		keys, err := s.List(ctx, s.Key("ns", "c")+"/")
		require.NoError(t, err)
		assert.Equal(t, []string{key}, keys)
		require.NoError(t, s.Delete(ctx, key))
		_, err = s.Stat(ctx, key)
		assert.ErrorIs(t, err, ErrNotFound)
		_, _, err = s.Get(ctx, key)
		assert.ErrorIs(t, err, ErrNotFound)
		assert.NoError(t, s.Delete(ctx, key), "deleting what is gone is not an error")
	})

	t.Run("an upload of unknown size spans parts and reads back identical", func(t *testing.T) {
		data := make([]byte, PartSize+3<<20)
		_, err := rand.Read(data)
		require.NoError(t, err)
		key := s.Key("ns", "c", "b2", "shard-0.rdb")
		// io.MultiReader hides the size, as a snapshot stream does.
		n, err := s.Put(ctx, key, io.MultiReader(bytes.NewReader(data)))
		require.NoError(t, err)
		assert.EqualValues(t, len(data), n)
		r, _, err := s.Get(ctx, key)
		require.NoError(t, err)
		h := sha256.New()
		_, err = io.Copy(h, r)
		require.NoError(t, r.Close())
		require.NoError(t, err)
		want := sha256.Sum256(data)
		assert.Equal(t, want[:], h.Sum(nil))
	})

	t.Run("a failed upload leaves no object and no parts", func(t *testing.T) {
		dir := s.Key("ns", "c", "b3") + "/"
		key := dir + "shard-1.rdb"
		_, err := s.Put(ctx, key, io.MultiReader(io.LimitReader(rand.Reader, PartSize+1<<20), failing{errors.New("stream cut")}))
		require.Error(t, err)
		_, err = s.Stat(ctx, key)
		assert.ErrorIs(t, err, ErrNotFound, "no object named after a cut upload")
		pending, err := s.Incomplete(ctx, dir)
		require.NoError(t, err)
		assert.Empty(t, pending, "the upload aborted its own parts")
	})

	t.Run("an upload cut where it could not abort is aborted afterwards", func(t *testing.T) {
		// A transfer whose process is killed leaves its multipart upload open: made here
		// with one part sent and never completed.
		dir := s.Key("ns", "c", "b4") + "/"
		key := dir + "shard-2.rdb"
		core := minio.Core{Client: s.c}
		id, err := core.NewMultipartUpload(ctx, loc.Bucket, key, minio.PutObjectOptions{})
		require.NoError(t, err)
		part := make([]byte, 5<<20)
		_, err = core.PutObjectPart(ctx, loc.Bucket, key, id, 1, bytes.NewReader(part), int64(len(part)), minio.PutObjectPartOptions{})
		require.NoError(t, err)
		pending, err := s.Incomplete(ctx, dir)
		require.NoError(t, err)
		require.Equal(t, []string{key}, pending, "the store lists the open upload")
		require.NoError(t, s.AbortIncomplete(ctx, dir))
		pending, err = s.Incomplete(ctx, dir)
		require.NoError(t, err)
		assert.Empty(t, pending, "no unfinished upload left under the backup")
		_, err = s.Stat(ctx, key)
		assert.ErrorIs(t, err, ErrNotFound)
	})

	refusals := []struct {
		name string
		loc  func(Location) Location
		want error
	}{
		{"a wrong secret key", func(l Location) Location { l.SecretKey = "not-the-secret"; return l }, ErrCredentials},
		{"an unknown access key", func(l Location) Location { l.AccessKey = "nobody"; return l }, ErrCredentials},
		{"a bucket that does not exist", func(l Location) Location { l.Bucket = "no-such-bucket"; return l }, ErrNoBucket},
		{"an endpoint nobody serves", func(l Location) Location { l.Endpoint = "http://" + closedPort(t); return l }, ErrUnreachable},
	}
	for _, tc := range refusals {
		t.Run(tc.name, func(t *testing.T) {
			badLoc := tc.loc(loc)
			bad, err := Open(badLoc)
			require.NoError(t, err)
			err = bad.Check(ctx)
			require.ErrorIs(t, err, tc.want)
			assert.Contains(t, err.Error(), badLoc.Endpoint, "the message names the endpoint")
			assert.NotContains(t, err.Error(), loc.SecretKey, "never a credential")
			_, err = bad.Put(ctx, bad.Key("x"), strings.NewReader("x"))
			assert.ErrorIs(t, err, tc.want, "an upload is refused the same way")
		})
	}
}

// failing is a reader that fails with err.
type failing struct{ err error }

func (f failing) Read([]byte) (int, error) { return 0, f.err }

// closedPort is a loopback address where nothing listens.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}
