package snapshot

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestFetchAOF: for a server that keeps an AOF, the snapshot becomes the base of a one-part
// AOF (appendonlydir/appendonly.aof.1.base.rdb) and a manifest naming it, written last; no
// dump.rdb. A run again keeps what an earlier run placed, and finishes one cut between the
// base and the manifest. A manifest the restore did not write (a server's AOF) is refused
// and left as it was, as is a directory a server started on. A refused or cut download
// leaves neither a base, a part file nor a manifest.
func TestFetchAOF(t *testing.T) {
	rdb := fakeRDB("REDIS0011", 300_000)
	objects := map[string][]byte{"b/shard-0.rdb": rdb}
	layout := AOFLayout{Dir: "appendonlydir", File: "appendonly.aof"}
	const (
		base     = "appendonly.aof.1.base.rdb"
		manifest = "appendonly.aof.manifest"
		ours     = "file appendonly.aof.1.base.rdb seq 1 type b\n"
		servers  = "file appendonly.aof.1.base.rdb seq 1 type b\nfile appendonly.aof.1.incr.aof seq 1 type i\n"
	)
	aofDir := func(dir string) string { return filepath.Join(dir, layout.Dir) }
	put := func(t *testing.T, dir, name string, b []byte) {
		t.Helper()
		require.NoError(t, os.MkdirAll(aofDir(dir), 0o755))
		write(t, aofDir(dir), name, b)
	}
	read := func(t *testing.T, dir, name string) string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(aofDir(dir), name))
		require.NoError(t, err)
		return string(b)
	}
	tests := []struct {
		name      string
		wanted    func(w Wanted) Wanted
		store     func(m *memStore)
		before    func(t *testing.T, dir string)
		gets      int
		reason    error  // nil: success
		message   string // the refusal's whole message, %s the data directory
		transient bool
		after     func(t *testing.T, dir string, got Fetched)
	}{
		{name: "placed as the AOF's base", gets: 1, after: func(t *testing.T, dir string, got Fetched) {
			assert.False(t, got.AlreadyThere)
			assert.Equal(t, filepath.Join(aofDir(dir), base), got.Path)
			assert.Equal(t, filepath.Join(aofDir(dir), manifest), got.Manifest)
			assert.Equal(t, string(rdb), read(t, dir, base))
			assert.Equal(t, ours, read(t, dir, manifest))
			assertNoFile(t, dir, DumpFile)
			assertNoFile(t, aofDir(dir), "temp-"+manifest)
			assertNoFile(t, aofDir(dir), base+".part")
		}},
		{name: "run again after a placement", gets: 0,
			before: func(t *testing.T, dir string) { put(t, dir, base, rdb); put(t, dir, manifest, []byte(ours)) },
			after: func(t *testing.T, dir string, got Fetched) {
				assert.True(t, got.AlreadyThere)
				assert.Equal(t, ours, read(t, dir, manifest))
			}},
		{name: "run again after a cut before the manifest", gets: 0,
			before: func(t *testing.T, dir string) {
				put(t, dir, base, rdb)
				put(t, dir, base+".part", []byte("an older half"))
				put(t, dir, "temp-"+manifest, []byte("half a manifest"))
			},
			after: func(t *testing.T, dir string, got Fetched) {
				assert.True(t, got.AlreadyThere)
				assert.Equal(t, ours, read(t, dir, manifest))
				assertNoFile(t, aofDir(dir), "temp-"+manifest)
				assertNoFile(t, aofDir(dir), base+".part")
			}},
		{name: "own manifest, base not the snapshot", gets: 1,
			before: func(t *testing.T, dir string) {
				put(t, dir, base, []byte("other"))
				put(t, dir, manifest, []byte(ours))
			},
			after: func(t *testing.T, dir string, got Fetched) {
				assert.False(t, got.AlreadyThere)
				assert.Equal(t, string(rdb), read(t, dir, base))
				assert.Equal(t, ours, read(t, dir, manifest))
			}},
		{name: "a server's AOF", gets: 0, reason: ErrAOFPresent,
			before: func(t *testing.T, dir string) {
				put(t, dir, base, []byte("the server's base"))
				put(t, dir, manifest, []byte(servers))
			},
			message: "shard 0: %s/appendonlydir already holds an AOF manifest, appendonly.aof.manifest, that this restore did not write: the AOF there is kept, nothing fetched",
			after: func(t *testing.T, dir string, _ Fetched) {
				assert.Equal(t, servers, read(t, dir, manifest), "untouched")
				assert.Equal(t, "the server's base", read(t, dir, base), "untouched")
			}},
		{name: "a server started here", gets: 0,
			before: func(t *testing.T, dir string) {
				write(t, dir, "nodes.conf", []byte("x"))
				put(t, dir, manifest, []byte(servers))
			},
			after: func(t *testing.T, dir string, got Fetched) {
				assert.True(t, got.Started)
				assert.Equal(t, servers, read(t, dir, manifest), "untouched")
			}},
		{name: "SHA-256", gets: 1, reason: ErrChecksum,
			wanted:  func(w Wanted) Wanted { w.SHA256 = sum([]byte("other")); return w },
			message: fmt.Sprintf("shard 0: SHA-256 of the downloaded object is %s…, the manifest says %s…", sum(rdb)[:12], sum([]byte("other"))[:12]),
			after: func(t *testing.T, dir string, _ Fetched) {
				assertNoFile(t, aofDir(dir), base)
				assertNoFile(t, aofDir(dir), manifest)
			}},
		{name: "AOF directory is a path", gets: 0, reason: ErrBadRequest,
			wanted:  func(w Wanted) Wanted { w.AOF = &AOFLayout{Dir: "../elsewhere", File: "appendonly.aof"}; return w },
			message: `shard 0: AOF directory name "../elsewhere" is not a plain file name (letters, digits, '.', '_', '-')`},
		{name: "AOF file the manifest cannot hold", gets: 0, reason: ErrBadRequest,
			wanted:  func(w Wanted) Wanted { w.AOF = &AOFLayout{Dir: "appendonlydir", File: "append only"}; return w },
			message: `shard 0: AOF file name "append only" is not a plain file name (letters, digits, '.', '_', '-')`},
		{name: "cut download", gets: 1, transient: true,
			store: func(m *memStore) { m.cut = map[string]error{"b/shard-0.rdb": io.ErrUnexpectedEOF} },
			after: func(t *testing.T, dir string, _ Fetched) {
				assertNoFile(t, aofDir(dir), base)
				assertNoFile(t, aofDir(dir), base+".part")
				assertNoFile(t, aofDir(dir), manifest)
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			m := &memStore{objects: objects}
			if tt.store != nil {
				tt.store(m)
			}
			if tt.before != nil {
				tt.before(t, dir)
			}
			l := layout
			w := Wanted{Shard: 0, Object: "b/shard-0.rdb", SHA256: sum(rdb), Bytes: int64(len(rdb)), RDBVersion: 11,
				MaxRDBVersion: 80, ValkeyVersion: "9.1.2", Dir: dir, AOF: &l}
			if tt.wanted != nil {
				w = tt.wanted(w)
			}
			got, err := Fetch(context.Background(), m, w)
			assert.Equal(t, tt.gets, m.gets, "downloads")
			switch {
			case tt.transient:
				require.Error(t, err)
				assert.False(t, Refused(err), "transient: %v", err)
			case tt.reason != nil:
				require.Error(t, err)
				assert.True(t, Refused(err), "permanent: %v", err)
				assert.ErrorIs(t, err, tt.reason)
				want := tt.message
				if tt.reason == ErrAOFPresent {
					want = fmt.Sprintf(tt.message, dir)
				}
				assert.Equal(t, want, err.Error())
			default:
				require.NoError(t, err)
				assertNoFile(t, dir, DumpFile)
			}
			if tt.after != nil {
				tt.after(t, dir, got)
			}
		})
	}
}

// The manifest line is the server's own format for a base (src/aof.c, aofInfoFormat):
// `file <name> seq <n> type b`, the name the server gives an RDB-format base.
func TestAOFLayoutNames(t *testing.T) {
	tests := []struct {
		layout             AOFLayout
		base, man, content string
	}{
		{AOFLayout{Dir: "appendonlydir", File: "appendonly.aof"}, "appendonly.aof.1.base.rdb", "appendonly.aof.manifest",
			"file appendonly.aof.1.base.rdb seq 1 type b\n"},
		{AOFLayout{Dir: "aof", File: "x.aof"}, "x.aof.1.base.rdb", "x.aof.manifest", "file x.aof.1.base.rdb seq 1 type b\n"},
	}
	for _, tt := range tests {
		t.Run(tt.layout.File, func(t *testing.T) {
			assert.Equal(t, tt.base, tt.layout.BaseFile())
			assert.Equal(t, tt.man, tt.layout.ManifestFile())
			assert.Equal(t, tt.content, tt.layout.Manifest())
		})
	}
}
