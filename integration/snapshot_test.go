//go:build integration

package integration

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valkey-io/valkey-go"

	"github.com/gomomento/valkey-operator/integration/harness"
	"github.com/gomomento/valkey-operator/internal/poll"
	"github.com/gomomento/valkey-operator/internal/testcerts"
	"github.com/gomomento/valkey-operator/valkeyops"
	"github.com/gomomento/valkey-operator/valkeyops/model"
	"github.com/gomomento/valkey-operator/valkeyops/snapshot"
)

const backupPassword = "backup-secret"

// snapshotSource is a 1x1 cluster (on Docker volumes, so a server can be started on a
// snapshot file) with the backup user on its replica, and how to reach its nodes.
type snapshotSource struct {
	f                *fixture
	primary, replica model.Node
	tls              *tls.Config // nil = plaintext
	creds            valkeyops.Credentials
}

// newSnapshotSource starts a 1x1 cluster of image, TLS-only when withTLS, and gives its
// replica the backup user as model.BackupLine renders it.
func newSnapshotSource(t *testing.T, image string, withTLS bool) *snapshotSource {
	t.Helper()
	cfg := harness.Config{Image: image, Volumes: true}
	s := &snapshotSource{}
	var opts valkeyops.Options
	if withTLS {
		ca, err := testcerts.NewCA("snapshot CA")
		require.NoError(t, err)
		leaf := issue(t, ca, 1)
		cfg.TLS = &harness.TLSFiles{CA: ca.CertPEM, Cert: leaf.CertPEM, Key: leaf.KeyPEM}
		s.creds = valkeyops.Credentials{CA: ca.CertPEM, ServerName: tlsServerName}
		s.tls, err = s.creds.TLSConfig()
		require.NoError(t, err)
		opts.Credentials = s.creds
	}
	s.f = newFixture(t, cfg, 1, 2, opts)
	ctx := ctxT(t, 2*time.Minute)
	require.NoError(t, s.f.admin.Bootstrap(ctx, s.f.nodes, 1))
	snap := waitHealthy(t, s.f, s.f.nodes, 1, 1, 30*time.Second)
	s.primary = snap.Primaries()[0].Node
	s.replica = snap.ReplicasOf(snap.Primaries()[0].ID)[0].Node
	line := model.BackupLine(model.HashPassword(backupPassword))
	s.do(t, s.replica, model.OperatorUser, operatorPassword, append([]string{"ACL", "SETUSER", line.User, "reset"}, line.Rules...)...)
	s.creds.Username, s.creds.Password = model.BackupUser, backupPassword
	return s
}

// client is a single-node connection to n as user.
func (s *snapshotSource) client(t *testing.T, n model.Node, user, password string) valkey.Client {
	t.Helper()
	o := valkey.ClientOption{InitAddress: []string{n.Addr}, Username: user, Password: password,
		ForceSingleClient: true, DisableCache: true, DisableRetry: true}
	if s.tls != nil {
		o.TLSConfig = s.tls.Clone()
	}
	c, err := valkey.NewClient(o)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

// do runs one command on n as user and fails the test on an error.
func (s *snapshotSource) do(t *testing.T, n model.Node, user, password string, args ...string) valkey.ValkeyMessage {
	t.Helper()
	c := s.client(t, n, user, password)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	msg, err := c.Do(ctx, c.B().Arbitrary(args...).Build()).ToMessage()
	require.NoError(t, err, "%s", args[0])
	return msg
}

// info is one field of n's INFO section.
func (s *snapshotSource) info(t *testing.T, n model.Node, section, field string) string {
	t.Helper()
	msg := s.do(t, n, model.OperatorUser, operatorPassword, "INFO", section)
	text, err := msg.ToString()
	require.NoError(t, err)
	for _, l := range strings.Split(text, "\r\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			return v
		}
	}
	require.Failf(t, "no INFO field", "%s %s on %s", section, field, n.Name)
	return ""
}

func (s *snapshotSource) forks(t *testing.T, n model.Node) int {
	v, err := strconv.Atoi(s.info(t, n, "stats", "total_forks"))
	require.NoError(t, err)
	return v
}

func (s *snapshotSource) dbsize(t *testing.T, n model.Node) int64 {
	msg := s.do(t, n, model.OperatorUser, operatorPassword, "DBSIZE")
	v, err := msg.AsInt64()
	require.NoError(t, err)
	return v
}

// load writes keys of every common type, some with a TTL, through the primary, and waits
// until the replica holds as many keys.
func (s *snapshotSource) load(t *testing.T, perType int) int64 {
	t.Helper()
	c := s.client(t, s.primary, model.OperatorUser, operatorPassword)
	ctx := ctxT(t, 2*time.Minute)
	var cmds valkey.Commands
	for i := range perType {
		k := strconv.Itoa(i)
		cmds = append(cmds,
			c.B().Set().Key("str:"+k).Value(strings.Repeat("v", i%200)+k).Build(),
			c.B().Hset().Key("hash:"+k).FieldValue().FieldValue("a", k).FieldValue("b", "x"+k).Build(),
			c.B().Rpush().Key("list:"+k).Element("1", "2", k).Build(),
			c.B().Sadd().Key("set:"+k).Member("m1", "m2", k).Build(),
			c.B().Zadd().Key("zset:"+k).ScoreMember().ScoreMember(1.5, "a").ScoreMember(float64(i), "b").Build(),
			c.B().Set().Key("int:"+k).Value(k).Build(),
		)
		if i%10 == 0 {
			cmds = append(cmds, c.B().Pexpire().Key("str:"+k).Milliseconds(3_600_000).Build())
		}
		if len(cmds) >= 3000 || i == perType-1 {
			for _, r := range c.DoMulti(ctx, cmds...) {
				require.NoError(t, r.Error())
			}
			cmds = cmds[:0]
		}
	}
	want := s.dbsize(t, s.primary)
	require.NoError(t, poll.Until(ctx, 20*time.Millisecond, time.Minute, "replica holds every key", func(context.Context) (bool, string, error) {
		got := s.dbsize(t, s.replica)
		return got == want, fmt.Sprintf("%d of %d keys", got, want), nil
	}))
	return want
}

// digest is a SHA-256 over every key of n, sorted: its name, DUMP (type, encoding and
// value) and whether it has a TTL.
func (s *snapshotSource) digest(t *testing.T, n model.Node) (string, int) {
	t.Helper()
	c := s.client(t, n, model.OperatorUser, operatorPassword)
	ctx := ctxT(t, 2*time.Minute)
	var keys []string
	cursor := uint64(0)
	for {
		e, err := c.Do(ctx, c.B().Scan().Cursor(cursor).Count(1000).Build()).AsScanEntry()
		require.NoError(t, err)
		keys = append(keys, e.Elements...)
		if cursor = e.Cursor; cursor == 0 {
			break
		}
	}
	slices.Sort(keys)
	keys = slices.Compact(keys)
	h := sha256.New()
	for i := 0; i < len(keys); i += 500 {
		batch := keys[i:min(i+500, len(keys))]
		var cmds valkey.Commands
		for _, k := range batch {
			cmds = append(cmds, c.B().Dump().Key(k).Build(), c.B().Pttl().Key(k).Build())
		}
		res := c.DoMulti(ctx, cmds...)
		for j, k := range batch {
			dump, err := res[2*j].ToString()
			require.NoError(t, err, "DUMP %s", k)
			ttl, err := res[2*j+1].AsInt64()
			require.NoError(t, err)
			fmt.Fprintf(h, "%d:%s%d:%s%t\n", len(k), k, len(dump), dump, ttl > 0)
		}
	}
	return hex.EncodeToString(h.Sum(nil)), len(keys)
}

// fileSHA256 is the hex SHA-256 and size of a file.
func fileSHA256(t *testing.T, path string) (string, int64) {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	require.NoError(t, err)
	return hex.EncodeToString(h.Sum(nil)), n
}

// TestSnapshotStream: on Valkey 8.0 over TLS and 9.1 in plaintext, the backup user streams the
// replica's RDB snapshot into a file, in both payload forms on 8.0 (the replica's
// repl-diskless-sync yes: $EOF:<mark>; no: $<length>; 9.1 always sends the first). What
// Stream reports (bytes, SHA-256) is the file; its header reader's key and TTL counts are
// the replica's and its versions are the server's. The replica forks for it, the primary
// does not, and the replica keeps no replica slot for the stream. The file is a real
// snapshot: a new server started on it as its dump.rdb holds every key with the same value,
// type, encoding and TTL presence (digest over DUMP of every key). The backup user can do
// nothing else (GET, KEYS, SCAN, DUMP, SET, CONFIG, PSYNC, INFO, ACL, CLUSTER, PUBLISH
// refused NOPERM); a user without the grant gets a typed NOPERM error, a wrong password a
// typed WRONGPASS; a stream cut midway is an error, never a result: by a cancelled context
// (the context's error) or by the server (ErrShortStream).
func TestSnapshotStream(t *testing.T) {
	for _, img := range rotationImages {
		// One TLS mode per release, the other's in TestRestoreFetch (8.0 plaintext, 9.1 TLS):
		// together every release streams both ways, at half this test's cost.
		withTLS := img.image != harness.Image9()
		t.Run(fmt.Sprintf("%s/tls=%t", img.name, withTLS), func(t *testing.T) {
			t.Parallel()
			s := newSnapshotSource(t, img.image, withTLS)
			const perType = 500
			keys := s.load(t, perType)
			wantDigest, n := s.digest(t, s.primary)
			require.EqualValues(t, keys, n)
			version := s.info(t, s.replica, "server", "valkey_version")
			ctx := ctxT(t, 3*time.Minute)

			var files []string
			for _, diskless := range []bool{true, false} {
				s.do(t, s.replica, model.OperatorUser, operatorPassword, "CONFIG", "SET", "repl-diskless-sync", map[bool]string{true: "yes", false: "no"}[diskless])
				primaryForks, replicaForks := s.forks(t, s.primary), s.forks(t, s.replica)
				path := filepath.Join(t.TempDir(), "dump.rdb")
				out, err := os.Create(path)
				require.NoError(t, err)
				start := time.Now()
				res, err := snapshot.Stream(ctx, s.replica, out, snapshot.Options{Credentials: s.creds})
				require.NoError(t, err)
				require.NoError(t, out.Close())
				t.Logf("repl-diskless-sync %t: %d bytes ($EOF form %t) in %s, RDB %s%d, valkey %s, keys %d, rdb-only %t",
					diskless, res.Bytes, res.Diskless, time.Since(start).Round(time.Millisecond), res.Header.Magic, res.Header.Version, res.Header.ServerVersion(), res.Header.Keys, res.RDBOnly)

				sum, size := fileSHA256(t, path)
				assert.Equal(t, size, res.Bytes, "bytes reported are the file's")
				assert.Equal(t, sum, res.SHA256, "SHA-256 reported is the file's")
				// Valkey 9 writes an rdb-only snapshot to the socket whatever
				// repl-diskless-sync says (seen on 9.1.2: "Starting BGSAVE for SYNC with
				// target: replicas sockets"), so the $<length> form is 8.0's alone.
				assert.Equal(t, diskless || !strings.HasPrefix(version, "8."), res.Diskless, "payload form follows repl-diskless-sync")
				assert.True(t, res.RDBOnly, "the server takes REPLCONF rdb-only")
				assert.True(t, res.Header.KeysKnown, "key count learned (%s)", res.Header.Stopped)
				assert.Equal(t, keys, res.Header.Keys, "RESIZEDB key count is DBSIZE")
				assert.EqualValues(t, perType/10, res.Header.Expires, "keys with a TTL")
				assert.Equal(t, version, res.Header.ServerVersion(), "valkey-ver is the server's version")
				assert.Equal(t, "64", res.Header.Aux["redis-bits"])
				if strings.HasPrefix(version, "8.") {
					assert.Equal(t, "REDIS", res.Header.Magic)
					assert.Equal(t, 11, res.Header.Version)
				}
				assert.Equal(t, primaryForks, s.forks(t, s.primary), "the primary did not fork")
				assert.Greater(t, s.forks(t, s.replica), replicaForks, "the replica forked for the snapshot")
				require.NoError(t, poll.Until(ctx, 20*time.Millisecond, 10*time.Second, "no replica slot left on the replica", func(context.Context) (bool, string, error) {
					v := s.info(t, s.replica, "replication", "connected_slaves")
					return v == "0", "connected_slaves:" + v, nil
				}))
				files = append(files, path)
			}

			// Either file loads into a new server with every key as it was.
			for i, path := range files {
				node, err := s.f.env.StartNode(ctx, 0)
				require.NoError(t, err)
				rdb, err := os.ReadFile(path)
				require.NoError(t, err)
				require.NoError(t, s.f.env.WriteFile(ctx, node.Name, "/data/dump.rdb", rdb))
				node, err = s.f.env.Restart(ctx, node.Name)
				require.NoError(t, err)
				assert.Equal(t, keys, s.dbsize(t, node), "file %d: every key loaded", i)
				// It claims the slots its keys hash to (and only those): served without
				// full coverage, it answers for them.
				s.do(t, node, model.OperatorUser, operatorPassword, "CONFIG", "SET", "cluster-require-full-coverage", "no")
				require.NoError(t, poll.Until(ctx, 20*time.Millisecond, 10*time.Second, "restored node serves its slots", func(context.Context) (bool, string, error) {
					v := s.do(t, node, model.OperatorUser, operatorPassword, "CLUSTER", "INFO")
					text, err := v.ToString()
					return strings.Contains(text, "cluster_state:ok"), "cluster state not ok", err
				}))
				got, _ := s.digest(t, node)
				assert.Equal(t, wantDigest, got, "file %d: every key, type, encoding, value and TTL presence as on the source", i)
			}

			// The backup user streams and does nothing else.
			backup := s.client(t, s.replica, model.BackupUser, backupPassword)
			for _, cmd := range [][]string{
				{"GET", "str:1"}, {"KEYS", "*"}, {"SCAN", "0"}, {"DUMP", "str:1"}, {"SET", "x", "y"},
				{"CONFIG", "GET", "masterauth"}, {"CONFIG", "SET", "repl-diskless-sync", "yes"},
				{"PSYNC", "?", "-1"}, {"INFO"}, {"ACL", "LIST"}, {"CLUSTER", "NODES"}, {"PUBLISH", "ch", "x"},
			} {
				err := backup.Do(ctx, backup.B().Arbitrary(cmd...).Build()).Error()
				if assert.Error(t, err, "%v", cmd) {
					assert.True(t, strings.HasPrefix(err.Error(), "NOPERM"), "%v: %v", cmd, err)
				}
			}

			// Refusals are typed errors that name the refused command.
			var reply *snapshot.ReplyError
			creds := s.creds
			creds.Username, creds.Password = model.ExporterUser, model.ExporterPassword(operatorPassword)
			_, err := snapshot.Stream(ctx, s.replica, io.Discard, snapshot.Options{Credentials: creds})
			require.ErrorAs(t, err, &reply)
			assert.Equal(t, "NOPERM", reply.Code(), "a user without the grant: %v", err)
			assert.Equal(t, "REPLCONF capa", reply.Command)
			creds = s.creds
			creds.Password = "wrong"
			_, err = snapshot.Stream(ctx, s.replica, io.Discard, snapshot.Options{Credentials: creds})
			require.ErrorAs(t, err, &reply)
			assert.Equal(t, "WRONGPASS", reply.Code())
			assert.NotContains(t, err.Error(), "wrong", "the password is not in the error")

			// Interrupted streams are errors, never complete: the replica writes its
			// snapshot slowly (rdb-key-save-delay, µs per key), and the stream is cut
			// once its first bytes arrived, by the caller (context) or by the server
			// (CLIENT KILL of the stream's connection: the payload ends early).
			s.do(t, s.replica, model.OperatorUser, operatorPassword, "CONFIG", "SET", "repl-diskless-sync", "yes", "rdb-key-save-delay", "200")
			cctx, cancel := context.WithCancel(ctx)
			_, err = snapshot.Stream(cctx, s.replica, &onFirstWrite{do: cancel}, snapshot.Options{Credentials: s.creds})
			cancel()
			assert.ErrorIs(t, err, context.Canceled)
			var op *model.OpError
			if assert.ErrorAs(t, err, &op) {
				assert.Equal(t, "snapshot-transfer", op.Step)
			}
			kill := func() { s.do(t, s.replica, model.OperatorUser, operatorPassword, "CLIENT", "KILL", "TYPE", "replica") }
			_, err = snapshot.Stream(ctx, s.replica, &onFirstWrite{do: kill}, snapshot.Options{Credentials: s.creds})
			assert.ErrorIs(t, err, snapshot.ErrShortStream, "a payload cut by the server is short, not complete")
		})
	}
}

// onFirstWrite runs do on its first write.
type onFirstWrite struct {
	do   func()
	done bool
}

func (w *onFirstWrite) Write(p []byte) (int, error) {
	if !w.done {
		w.done = true
		w.do()
	}
	return len(p), nil
}

// TestSnapshotStreamThroughput streams a snapshot of about 50 MiB (incompressible values,
// so the RDB is as large as the data) from a replica into a file, reports bytes/s, and
// proves the streaming process's memory flat: its heap in use, sampled throughout, never
// grows by more than a few buffers (flatBound, a sixth of the snapshot) over what it was
// before. One image over TLS, the path with the most buffering; every image with and
// without TLS at larger sizes is the backup benchmark's job.
func TestSnapshotStreamThroughput(t *testing.T) {
	const (
		keys      = 50_000
		valueSize = 1024
		flatBound = 8 << 20
	)
	for _, img := range rotationImages[1:] {
		for _, withTLS := range []bool{true} {
			t.Run(fmt.Sprintf("%s/tls=%t", img.name, withTLS), func(t *testing.T) {
				s := newSnapshotSource(t, img.image, withTLS)
				c := s.client(t, s.primary, model.OperatorUser, operatorPassword)
				ctx := ctxT(t, 5*time.Minute)
				value := func(i int) string {
					b := make([]byte, valueSize)
					rng := rand.New(rand.NewPCG(uint64(i), 1))
					for j := range b {
						b[j] = byte(rng.Uint32())
					}
					return string(b)
				}
				for i := 0; i < keys; i += 2000 {
					var cmds valkey.Commands
					for j := i; j < min(i+2000, keys); j++ {
						cmds = append(cmds, c.B().Set().Key("big:"+strconv.Itoa(j)).Value(value(j)).Build())
					}
					for _, r := range c.DoMulti(ctx, cmds...) {
						require.NoError(t, r.Error())
					}
				}
				require.NoError(t, poll.Until(ctx, 50*time.Millisecond, time.Minute, "replica holds every key", func(context.Context) (bool, string, error) {
					got := s.dbsize(t, s.replica)
					return got == keys, fmt.Sprintf("%d of %d keys", got, keys), nil
				}))
				primaryForks := s.forks(t, s.primary)

				path := filepath.Join(t.TempDir(), "dump.rdb")
				out, err := os.Create(path)
				require.NoError(t, err)
				defer out.Close()
				runtime.GC()
				var ms runtime.MemStats
				runtime.ReadMemStats(&ms)
				base, peak := ms.HeapInuse, ms.HeapInuse
				done := make(chan struct{})
				sampled := make(chan struct{})
				go func() {
					defer close(sampled)
					tick := time.NewTicker(10 * time.Millisecond)
					defer tick.Stop()
					for {
						select {
						case <-done:
							return
						case <-tick.C:
							var m runtime.MemStats
							runtime.ReadMemStats(&m)
							peak = max(peak, m.HeapInuse)
						}
					}
				}()
				start := time.Now()
				res, err := snapshot.Stream(ctx, s.replica, out, snapshot.Options{Credentials: s.creds})
				elapsed := time.Since(start)
				close(done)
				<-sampled
				require.NoError(t, err)
				sum, size := fileSHA256(t, path)
				assert.Equal(t, size, res.Bytes)
				assert.Equal(t, sum, res.SHA256)
				assert.EqualValues(t, keys, res.Header.Keys)
				assert.Greater(t, res.Bytes, int64(keys*valueSize), "the RDB is as large as the data")
				assert.Equal(t, primaryForks, s.forks(t, s.primary), "the primary did not fork")
				growth := int64(peak) - int64(base)
				t.Logf("snapshot %s tls=%t: %d bytes in %s = %.1f MB/s (diskless=%t); heap in use %.1f MiB before, peak +%.2f MiB",
					img.name, withTLS, res.Bytes, elapsed.Round(time.Millisecond), float64(res.Bytes)/1e6/elapsed.Seconds(), res.Diskless,
					float64(base)/(1<<20), float64(growth)/(1<<20))
				assert.Less(t, growth, int64(flatBound), "memory stays flat: peak heap growth %d bytes", growth)

				// Baseline for the figure: valkey-cli --rdb, as the same user, inside the
				// replica's container (no network between them).
				cli := []string{"valkey-cli", "--user", model.BackupUser, "--pass", backupPassword, "--no-auth-warning"}
				if withTLS {
					cli = append(cli, "--tls", "--cacert", "/etc/valkey/tls/ca.crt", "--sni", tlsServerName)
				}
				start = time.Now()
				code, text, err := s.f.env.Exec(ctx, s.replica.Name, append(cli, "--rdb", "/data/baseline.rdb")...)
				cliElapsed := time.Since(start)
				require.NoError(t, err)
				require.Zero(t, code, "valkey-cli --rdb as the backup user: %s", text)
				t.Logf("baseline valkey-cli --rdb %s tls=%t: %s = %.1f MB/s (stream/baseline time %.2f)", img.name, withTLS,
					cliElapsed.Round(time.Millisecond), float64(res.Bytes)/1e6/cliElapsed.Seconds(), elapsed.Seconds()/cliElapsed.Seconds())
			})
		}
	}
}
