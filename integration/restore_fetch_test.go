//go:build integration

package integration

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	osexec "os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valkey-io/valkey-go"

	devstore "github.com/gomomento/valkey-operator/devcluster/objectstore"
	"github.com/gomomento/valkey-operator/integration/harness"
	"github.com/gomomento/valkey-operator/internal/poll"
	"github.com/gomomento/valkey-operator/objectstore"
	"github.com/gomomento/valkey-operator/reconciler/render"
	"github.com/gomomento/valkey-operator/reconciler/views"
	"github.com/gomomento/valkey-operator/valkeyops/model"
	"github.com/gomomento/valkey-operator/valkeyops/snapshot"
)

// TestRestoreFetch: on Valkey 8.0 with TLS off and on 9.1 with TLS on (one case each, not
// four: TLS changes how the snapshot is streamed and how the restored server is reached, not
// the fetch in between), a replica's snapshot streamed as the backup user into the real
// object store is fetched by snapshot.Fetch into an empty directory, and a new cluster-mode
// server started on that directory (on 9.1 TLS-only with the source's certificate, refusing
// plaintext) holds every key as the source did (digest over DUMP of every key, read over TLS
// on 9.1). Fetching again downloads nothing. Refusals leave no dump.rdb and
// no part file, each with the message a user reads: a SHA-256 that is not the manifest's, a
// missing object, and (9.1) an RDB too new for Valkey 8.0. The streamed snapshot is RDB 11 on
// both releases (9.1 sends the Redis-compatible format to a SYNC client that announces no
// version of its own), so the too-new case is 9.1's own dump.rdb, written by SAVE: RDB 80,
// which an 8.0 server does not load. The manager binary's restore-fetch, run with the
// env the operator renders, exits 0 having placed the file (as dump.rdb, and with the AOF
// variables as an AOF's base), and 2 on a mismatch with the message in its termination log;
// no credential appears in its output. The snapshot is also restored into a server that
// keeps an AOF (restoreIntoAOF): in mode AOF on 8.0 and RDBAndAOF on 9.1.
func TestRestoreFetch(t *testing.T) {
	requireDocker(t)
	manager := buildManager(t)
	for _, img := range rotationImages {
		// TLS on the newer release, whose case also reaches its primary (SAVE) over TLS.
		withTLS := img.image == harness.Image9()
		t.Run(fmt.Sprintf("%s/tls=%t", img.name, withTLS), func(t *testing.T) {
			t.Parallel()
			s := newSnapshotSource(t, img.image, withTLS)
			ctx := ctxT(t, 2*time.Minute)
			dev, err := s.f.env.StartObjectStore(ctx, t.TempDir())
			require.NoError(t, err)
			t.Cleanup(dev.Stop) // before the Env's cleanup removes the network
			loc := objectstore.Location{Endpoint: dev.Endpoint, Bucket: dev.Bucket, Region: devstore.Region, AccessKey: dev.AccessKey, SecretKey: dev.SecretKey}
			store, err := objectstore.Open(loc)
			require.NoError(t, err)

			keys := s.load(t, 500)
			wantDigest, _ := s.digest(t, s.primary)
			version := s.info(t, s.replica, "server", "valkey_version")
			maxRDB, known := model.MaxRDBVersion(version)
			require.True(t, known, "MaxRDBVersion knows %s", version)

			// The backup: the replica's snapshot, streamed straight into the store.
			key := "backups/ns/src/" + img.name + "/shard-0.rdb"
			pr, pw := io.Pipe()
			var res snapshot.Result
			streamed := make(chan error, 1)
			go func() {
				var err error
				res, err = snapshot.Stream(ctx, s.replica, pw, snapshot.Options{Credentials: s.creds})
				pw.CloseWithError(err)
				streamed <- err
			}()
			stored, err := store.Put(ctx, key, pr)
			require.NoError(t, err)
			require.NoError(t, <-streamed)
			require.Equal(t, res.Bytes, stored)
			t.Logf("%s streamed %s%d (%d bytes); the server loads up to RDB %d", version, res.Header.Magic, res.Header.Version, res.Bytes, maxRDB)
			assert.Equal(t, model.RDBVersionRedisCompatible, res.Header.Version, "a streamed snapshot is RDB 11 on 8.0 and 9.1 alike")
			want := snapshot.Wanted{Shard: 0, Object: key, SHA256: res.SHA256, Bytes: res.Bytes, RDBVersion: res.Header.Version,
				MaxRDBVersion: maxRDB, ValkeyVersion: version}

			// Restore: fetched into an empty directory, loaded by a new server started on it.
			dir := dataDir(t)
			want.Dir = dir
			start := time.Now()
			got, err := snapshot.Fetch(ctx, store, want)
			require.NoError(t, err)
			t.Logf("fetched %d bytes in %s", got.Bytes, time.Since(start).Round(time.Millisecond))
			assert.False(t, got.AlreadyThere)
			assert.Equal(t, keys, got.Header.Keys, "the header's key count")
			sum, size := fileSHA256(t, filepath.Join(dir, snapshot.DumpFile))
			assert.Equal(t, res.SHA256, sum)
			assert.Equal(t, res.Bytes, size)
			assertNoFile(t, dir, snapshot.PartFile)
			again, err := snapshot.Fetch(ctx, store, want)
			require.NoError(t, err)
			assert.True(t, again.AlreadyThere, "a second fetch (an init container run again) keeps the file")

			// In a pod the fetcher runs as the server's user; here it ran as this test's.
			require.NoError(t, os.Chown(filepath.Join(dir, snapshot.DumpFile), 999, 999))
			node, err := s.f.env.StartNodeOnDir(ctx, 0, dir)
			require.NoError(t, err)
			if withTLS {
				_, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{node.Addr}, Username: model.OperatorUser, Password: operatorPassword,
					ForceSingleClient: true, DisableCache: true, DisableRetry: true})
				assert.Error(t, err, "the restored server is TLS-only: a plaintext connection is refused")
			}
			assert.Equal(t, keys, s.dbsize(t, node), "every key loaded")
			s.do(t, node, model.OperatorUser, operatorPassword, "CONFIG", "SET", "cluster-require-full-coverage", "no")
			require.NoError(t, poll.Until(ctx, 20*time.Millisecond, 10*time.Second, "restored node serves its slots", func(context.Context) (bool, string, error) {
				v := s.do(t, node, model.OperatorUser, operatorPassword, "CLUSTER", "INFO")
				text, err := v.ToString()
				return strings.Contains(text, "cluster_state:ok"), "cluster state not ok", err
			}))
			restored, _ := s.digest(t, node)
			assert.Equal(t, wantDigest, restored, "every key, type, encoding, value and TTL presence as on the source")
			// The server now owns the directory: a fetch run after it started touches nothing.
			after, err := snapshot.Fetch(ctx, store, want)
			require.NoError(t, err)
			assert.True(t, after.Started)

			// One AOF mode per release, so both loaders and both modes are covered in the
			// tier's time of two cases: AOF on 8.0, RDBAndAOF on 9.1.
			mode := views.PersistenceRDBAndAOF
			if strings.HasPrefix(version, "8.") {
				mode = views.PersistenceAOF
			}
			t.Run("into "+mode, func(t *testing.T) { restoreIntoAOF(t, ctx, s, store, want, mode, keys, wantDigest) })

			// Refusals.
			other := strings.Repeat("0", 64)
			refusals := []fetchRefusal{
				{"SHA-256", func(w snapshot.Wanted) snapshot.Wanted { w.SHA256 = other; return w }, snapshot.ErrChecksum,
					fmt.Sprintf("shard 0: SHA-256 of the downloaded object is %s…, the manifest says %s…", res.SHA256[:12], other[:12])},
				{"missing", func(w snapshot.Wanted) snapshot.Wanted { w.Object = key + ".gone"; return w }, snapshot.ErrObjectMissing,
					fmt.Sprintf("shard 0: the backup's object %s.gone is not in the store (get %s bucket %q key %q: object not found", key, dev.Endpoint, dev.Bucket, key+".gone")},
			}
			if !strings.HasPrefix(version, "8.") {
				// 9.1's own dump.rdb, as SAVE writes it to disk, is RDB 80.
				s.do(t, s.primary, model.OperatorUser, operatorPassword, "SAVE")
				r, err := s.f.env.Container(s.primary.Name).CopyFileFromContainer(ctx, "/data/dump.rdb")
				require.NoError(t, err)
				disk, err := io.ReadAll(r)
				require.NoError(t, err)
				r.Close()
				h, err := snapshot.ParseHeader(disk)
				require.NoError(t, err)
				t.Logf("%s's own dump.rdb: %s%d", version, h.Magic, h.Version)
				require.Equal(t, 80, h.Version)
				diskKey := key + ".disk"
				_, err = store.Put(ctx, diskKey, bytes.NewReader(disk))
				require.NoError(t, err)
				max80, _ := model.MaxRDBVersion("8.0.1")
				disk80 := snapshot.Wanted{Shard: 0, Object: diskKey, SHA256: sha256Hex(disk), Bytes: int64(len(disk)), RDBVersion: h.Version}
				refusals = append(refusals, fetchRefusal{"too new for 8.0", func(snapshot.Wanted) snapshot.Wanted {
					w := disk80
					w.MaxRDBVersion, w.ValkeyVersion = max80, "8.0.1"
					return w
				}, snapshot.ErrRDBVersion, "shard 0: the backup's RDB version 80 is newer than Valkey 8.0.1 loads (11)"}, fetchRefusal{"header not the manifest's", func(snapshot.Wanted) snapshot.Wanted {
					w := disk80
					w.RDBVersion, w.MaxRDBVersion, w.ValkeyVersion = 11, max80, "8.0.1"
					return w
				}, snapshot.ErrRDBVersion, "shard 0: the object's RDB version is 80, the manifest says 11"})
			}
			for _, rf := range refusals {
				t.Run(rf.name, func(t *testing.T) {
					dir := dataDir(t)
					w := rf.wanted(want)
					w.Dir = dir
					_, err := snapshot.Fetch(ctx, store, w)
					require.Error(t, err)
					assert.True(t, snapshot.Refused(err), "a permanent refusal: %v", err)
					assert.ErrorIs(t, err, rf.reason)
					assert.True(t, strings.HasPrefix(err.Error(), rf.message), "message %q, want %q", err, rf.message)
					assertNoFile(t, dir, snapshot.DumpFile)
					assertNoFile(t, dir, snapshot.PartFile)
				})
			}

			// The binary, as the init container runs it.
			t.Run("manager restore-fetch", func(t *testing.T) {
				bin := manager(t)
				run := func(w snapshot.Wanted, extraEnv ...string) (int, string, string, string) {
					term := filepath.Join(t.TempDir(), "termination-log")
					cmd := osexec.CommandContext(ctx, bin, "restore-fetch")
					cmd.Env = []string{
						snapshot.EnvRestoreEndpoint + "=" + loc.Endpoint,
						snapshot.EnvRestoreBucket + "=" + loc.Bucket,
						snapshot.EnvRestoreRegion + "=" + loc.Region,
						snapshot.EnvRestoreObject + "=" + w.Object,
						snapshot.EnvRestoreSHA256 + "=" + w.SHA256,
						snapshot.EnvRestoreBytes + "=" + fmt.Sprint(w.Bytes),
						snapshot.EnvRestoreRDBVersion + "=" + fmt.Sprint(w.RDBVersion),
						snapshot.EnvRestoreMaxRDBVersion + "=" + fmt.Sprint(w.MaxRDBVersion),
						snapshot.EnvRestoreValkeyVersion + "=" + w.ValkeyVersion,
						snapshot.EnvRestoreShard + "=" + fmt.Sprint(w.Shard),
						snapshot.EnvRestoreAccessKey + "=" + loc.AccessKey,
						snapshot.EnvRestoreSecretKey + "=" + loc.SecretKey,
						snapshot.EnvRestoreDir + "=" + w.Dir,
						snapshot.EnvRestoreTerminationLog + "=" + term,
					}
					cmd.Env = append(cmd.Env, extraEnv...)
					var stdout, stderr bytes.Buffer
					cmd.Stdout, cmd.Stderr = &stdout, &stderr
					err := cmd.Run()
					code := 0
					if err != nil {
						exit, ok := err.(*osexec.ExitError)
						require.True(t, ok, "%v", err)
						code = exit.ExitCode()
					}
					msg, _ := os.ReadFile(term)
					for _, secret := range []string{loc.AccessKey, loc.SecretKey} {
						assert.NotContains(t, stdout.String()+stderr.String()+string(msg), secret, "no credential in any output")
					}
					return code, stdout.String(), stderr.String(), string(msg)
				}

				w := want
				w.Dir = dataDir(t)
				code, stdout, stderr, msg := run(w)
				assert.Equal(t, 0, code, "stderr: %s", stderr)
				assert.Contains(t, stdout, fmt.Sprintf("shard 0: %s placed: %d bytes, SHA-256 verified, RDB version %d, %d keys", filepath.Join(w.Dir, snapshot.DumpFile), res.Bytes, res.Header.Version, keys))
				assert.Empty(t, msg, "no termination message on success")
				sum, _ := fileSHA256(t, filepath.Join(w.Dir, snapshot.DumpFile))
				assert.Equal(t, res.SHA256, sum)

				// As the operator renders it for a server that keeps an AOF.
				aof := snapshot.AOFLayout{Dir: render.AOFDirName, File: render.AOFFileName}
				w.Dir = dataDir(t)
				code, stdout, stderr, msg = run(w, snapshot.EnvRestoreAOFDir+"="+aof.Dir, snapshot.EnvRestoreAOFFile+"="+aof.File)
				assert.Equal(t, 0, code, "stderr: %s", stderr)
				base, manifest := filepath.Join(w.Dir, aof.Dir, aof.BaseFile()), filepath.Join(w.Dir, aof.Dir, aof.ManifestFile())
				assert.Contains(t, stdout, fmt.Sprintf("shard 0: %s placed: %d bytes", base, res.Bytes))
				assert.Contains(t, stdout, fmt.Sprintf("shard 0: %s names it as the AOF's base", manifest))
				assert.Empty(t, msg, "no termination message on success")
				sum, _ = fileSHA256(t, base)
				assert.Equal(t, res.SHA256, sum)
				assertNoFile(t, w.Dir, snapshot.DumpFile)

				w.Dir, w.SHA256 = dataDir(t), other
				code, stdout, stderr, msg = run(w)
				assert.Equal(t, 2, code, "a mismatch is permanent")
				wantMsg := fmt.Sprintf("shard 0: SHA-256 of the downloaded object is %s…, the manifest says %s…", res.SHA256[:12], other[:12])
				assert.Equal(t, wantMsg, msg, "termination message")
				assert.Equal(t, "restore-fetch: "+wantMsg+"\n", stderr)
				assert.Empty(t, stdout)
				assertNoFile(t, w.Dir, snapshot.DumpFile)
				assertNoFile(t, w.Dir, snapshot.PartFile)
			})
		})
	}
}

// restoreIntoAOF: the shard's snapshot fetched for a server that keeps an AOF (persistence
// mode, with the AOF names the operator renders the init container with) is placed as the
// base of a one-part AOF with its manifest, and no dump.rdb; a server started on the
// directory with the mode's directives as the operator renders them runs with appendonly
// yes, loads every key of the snapshot from that base, and has added its own incremental
// file to the manifest.
func restoreIntoAOF(t *testing.T, ctx context.Context, s *snapshotSource, store snapshot.Getter, want snapshot.Wanted, mode string, keys int64, wantDigest string) {
	aof := snapshot.AOFLayout{Dir: render.AOFDirName, File: render.AOFFileName}
	dir := dataDir(t)
	want.Dir, want.AOF = dir, &aof
	got, err := snapshot.Fetch(ctx, store, want)
	require.NoError(t, err)
	aofDir := filepath.Join(dir, aof.Dir)
	assert.Equal(t, filepath.Join(aofDir, aof.BaseFile()), got.Path)
	assert.Equal(t, filepath.Join(aofDir, aof.ManifestFile()), got.Manifest)
	sum, size := fileSHA256(t, got.Path)
	assert.Equal(t, want.SHA256, sum)
	assert.Equal(t, want.Bytes, size)
	placed, err := os.ReadFile(got.Manifest)
	require.NoError(t, err)
	assert.Equal(t, "file appendonly.aof.1.base.rdb seq 1 type b\n", string(placed))
	assertNoFile(t, dir, snapshot.DumpFile)
	again, err := snapshot.Fetch(ctx, store, want)
	require.NoError(t, err)
	assert.True(t, again.AlreadyThere, "a second fetch keeps the base and the manifest")

	// In a pod the fetcher runs as the server's user; here it ran as this test's.
	for _, p := range []string{aofDir, got.Path, got.Manifest} {
		require.NoError(t, os.Chown(p, 999, 999))
	}
	var args []string
	for k, v := range render.PersistenceDirectives(views.Persistence{Mode: mode}) {
		args = append(args, "--"+k)
		if words := strings.Fields(v); len(words) > 0 {
			args = append(args, words...)
		} else {
			args = append(args, "")
		}
	}
	node, err := s.f.env.StartNodeOnDir(ctx, 0, dir, args...)
	require.NoError(t, err)
	reply := s.do(t, node, model.OperatorUser, operatorPassword, "CONFIG", "GET", "appendonly")
	on, err := reply.AsStrMap()
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"appendonly": "yes"}, on, "the server keeps an AOF")
	assert.Equal(t, keys, s.dbsize(t, node), "every key loaded from the AOF's base")
	s.do(t, node, model.OperatorUser, operatorPassword, "CONFIG", "SET", "cluster-require-full-coverage", "no")
	require.NoError(t, poll.Until(ctx, 20*time.Millisecond, 10*time.Second, "restored node serves its slots", func(context.Context) (bool, string, error) {
		v := s.do(t, node, model.OperatorUser, operatorPassword, "CLUSTER", "INFO")
		text, err := v.ToString()
		return strings.Contains(text, "cluster_state:ok"), "cluster state not ok", err
	}))
	restored, _ := s.digest(t, node)
	assert.Equal(t, wantDigest, restored, "every key, type, encoding, value and TTL presence as on the source")
	// The server took the AOF over: its manifest keeps the base and names its own
	// incremental file, which it created.
	now, err := os.ReadFile(got.Manifest)
	require.NoError(t, err)
	assert.Contains(t, string(now), "file appendonly.aof.1.base.rdb seq 1 type b\n")
	assert.Contains(t, string(now), "file appendonly.aof.1.incr.aof seq 1 type i\n")
	_, err = os.Stat(filepath.Join(aofDir, "appendonly.aof.1.incr.aof"))
	assert.NoError(t, err, "the server's incremental file")
}

// dataDir is an empty directory the Valkey containers' user (999:999) may write: a data
// directory as a pod's volume gives it.
func dataDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.Chown(dir, 999, 999))
	return dir
}

func assertNoFile(t *testing.T, dir, name string) {
	t.Helper()
	_, err := os.Stat(filepath.Join(dir, name))
	assert.ErrorIs(t, err, os.ErrNotExist, "%s left in %s", name, dir)
}

// fetchRefusal is one refused fetch: how it differs from the backup's shard, why it is
// refused, and how its message starts.
type fetchRefusal struct {
	name    string
	wanted  func(w snapshot.Wanted) snapshot.Wanted
	reason  error
	message string
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// buildManager builds cmd/manager into a temporary directory, in the background from now
// on; the returned function waits for it and gives the binary's path.
func buildManager(t *testing.T) func(*testing.T) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	require.True(t, ok)
	root := filepath.Dir(filepath.Dir(file))
	bin := filepath.Join(t.TempDir(), "manager")
	var (
		once sync.Once
		out  []byte
		err  error
		done = make(chan struct{})
	)
	go func() {
		defer close(done)
		cmd := osexec.Command("go", "build", "-o", bin, "./cmd/manager")
		cmd.Dir = root
		out, err = cmd.CombinedOutput()
	}()
	t.Cleanup(func() { <-done })
	return func(t *testing.T) string {
		once.Do(func() { <-done })
		require.NoError(t, err, "go build ./cmd/manager: %s", out)
		return bin
	}
}
