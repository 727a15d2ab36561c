package snapshot

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gomomento/valkey-operator/objectstore"
)

// memStore serves objects from memory: the unit tests' stand-in for the object store (the
// integration tier fetches from the real one). size, when set, overrides the size Get
// reports; cut, when set, ends the body early with that error.
type memStore struct {
	objects map[string][]byte
	size    map[string]int64
	cut     map[string]error
	err     error
	gets    int
}

func (m *memStore) Get(_ context.Context, key string) (io.ReadCloser, int64, error) {
	m.gets++
	if m.err != nil {
		return nil, 0, m.err
	}
	b, ok := m.objects[key]
	if !ok {
		return nil, 0, fmt.Errorf("get key %q: %w", key, objectstore.ErrNotFound)
	}
	size := int64(len(b))
	if s, ok := m.size[key]; ok {
		size = s
	}
	var r io.Reader = bytes.NewReader(b)
	if err := m.cut[key]; err != nil {
		r = io.MultiReader(bytes.NewReader(b[:len(b)/2]), &failing{err})
	}
	return io.NopCloser(r), size, nil
}

type failing struct{ err error }

func (f *failing) Read([]byte) (int, error) { return 0, f.err }

// fakeRDB is a small well-formed RDB start of the given magic and version, padded with
// filler to n bytes.
func fakeRDB(magic string, n int) []byte {
	b := []byte(magic + aux("valkey-ver", rdbStr("8.0.1")) + "\xfe\x00\xfb\x03\x00")
	for len(b) < n {
		b = append(b, byte(len(b)))
	}
	return b
}

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// TestFetch places a verified dump.rdb, keeps one already there, replaces a stale part
// file, leaves a directory a server started on alone, and refuses (with a message naming
// the shard and the difference, and without leaving dump.rdb or the part file) every object
// that is not the manifest's or that the server cannot load. A cut download is transient.
func TestFetch(t *testing.T) {
	rdb11 := fakeRDB("REDIS0011", 300_000) // larger than one copy buffer
	rdb80 := fakeRDB("VALKEY080", 1000)
	foreign := fakeRDB("REDIS0012", 1000)
	notRDB := bytes.Repeat([]byte("x"), 1000)
	objects := map[string][]byte{"b/shard-0.rdb": rdb11, "b/shard-1.rdb": rdb80, "b/foreign.rdb": foreign, "b/text": notRDB}
	want := func(key string) Wanted {
		b := objects[key]
		v := 11
		switch key {
		case "b/shard-1.rdb":
			v = 80
		case "b/foreign.rdb":
			v = 12
		}
		return Wanted{Shard: 1, Object: key, SHA256: sum(b), Bytes: int64(len(b)), RDBVersion: v, MaxRDBVersion: 80, ValkeyVersion: "9.1.2"}
	}

	tests := []struct {
		name      string
		wanted    func(w Wanted) Wanted
		key       string
		store     func(m *memStore)
		before    func(t *testing.T, dir string)
		reason    error  // nil: success
		message   string // the refusal's whole message
		transient bool
		gets      int // downloads made
		after     func(t *testing.T, dir string, got Fetched)
	}{
		{name: "placed", key: "b/shard-0.rdb", gets: 1, after: func(t *testing.T, dir string, got Fetched) {
			assert.False(t, got.AlreadyThere)
			assert.Equal(t, 11, got.Header.Version)
			assert.EqualValues(t, 3, got.Header.Keys)
			b, err := os.ReadFile(filepath.Join(dir, DumpFile))
			require.NoError(t, err)
			assert.Equal(t, rdb11, b)
		}},
		{name: "VALKEY magic", key: "b/shard-1.rdb", gets: 1},
		{name: "already there", key: "b/shard-0.rdb", gets: 0,
			before: func(t *testing.T, dir string) { write(t, dir, DumpFile, rdb11) },
			after:  func(t *testing.T, _ string, got Fetched) { assert.True(t, got.AlreadyThere) }},
		{name: "stale part and another dump replaced", key: "b/shard-0.rdb", gets: 1,
			before: func(t *testing.T, dir string) {
				write(t, dir, PartFile, []byte("half a download"))
				write(t, dir, DumpFile, rdb80)
			},
			after: func(t *testing.T, dir string, got Fetched) {
				b, err := os.ReadFile(filepath.Join(dir, DumpFile))
				require.NoError(t, err)
				assert.Equal(t, rdb11, b)
			}},
		{name: "a server started here", key: "b/shard-0.rdb", gets: 0,
			before: func(t *testing.T, dir string) {
				write(t, dir, "nodes.conf", []byte("x"))
				write(t, dir, DumpFile, []byte("written by the server since"))
			},
			after: func(t *testing.T, dir string, got Fetched) {
				assert.True(t, got.Started)
				b, err := os.ReadFile(filepath.Join(dir, DumpFile))
				require.NoError(t, err)
				assert.Equal(t, "written by the server since", string(b), "untouched")
			}},
		{name: "SHA-256", key: "b/shard-0.rdb", gets: 1, reason: ErrChecksum,
			wanted:  func(w Wanted) Wanted { w.SHA256 = sum([]byte("other")); return w },
			message: fmt.Sprintf("shard 1: SHA-256 of the downloaded object is %s…, the manifest says %s…", sum(rdb11)[:12], sum([]byte("other"))[:12])},
		{name: "size stated", key: "b/shard-0.rdb", gets: 1, reason: ErrSize,
			wanted:  func(w Wanted) Wanted { w.Bytes = 10; return w },
			message: "shard 1: the object b/shard-0.rdb has 300000 bytes, the manifest says 10"},
		{name: "shorter than stated", key: "b/shard-0.rdb", gets: 1, reason: ErrSize,
			store:   func(m *memStore) { m.size = map[string]int64{"b/shard-0.rdb": 300_001} },
			wanted:  func(w Wanted) Wanted { w.Bytes = 300_001; return w },
			message: "shard 1: the object b/shard-0.rdb has 300000 bytes, the manifest says 300001"},
		{name: "longer than stated", key: "b/shard-0.rdb", gets: 1, reason: ErrSize,
			store:   func(m *memStore) { m.size = map[string]int64{"b/shard-0.rdb": 299_999} },
			wanted:  func(w Wanted) Wanted { w.Bytes = 299_999; return w },
			message: "shard 1: the object b/shard-0.rdb has more than 299999 bytes, the manifest says 299999"},
		{name: "too new for the server", key: "b/shard-1.rdb", gets: 0, reason: ErrRDBVersion,
			wanted:  func(w Wanted) Wanted { w.MaxRDBVersion, w.ValkeyVersion = 11, "8.0.1"; return w },
			message: "shard 1: the backup's RDB version 80 is newer than Valkey 8.0.1 loads (11)"},
		{name: "header is not the manifest's", key: "b/shard-1.rdb", gets: 1, reason: ErrRDBVersion,
			wanted:  func(w Wanted) Wanted { w.RDBVersion = 11; return w },
			message: "shard 1: the object's RDB version is 80, the manifest says 11"},
		{name: "foreign format", key: "b/foreign.rdb", gets: 0, reason: ErrRDBVersion,
			message: "shard 1: the backup's RDB version 12 is another server's format, which no Valkey loads"},
		{name: "not an RDB", key: "b/text", gets: 1, reason: ErrNotRDB,
			message: `shard 1: the object b/text is not an RDB snapshot (payload is not an RDB snapshot: starts with "xxxxxxxxx")`},
		{name: "missing", key: "b/none", gets: 1, reason: ErrObjectMissing,
			wanted:  func(w Wanted) Wanted { w.SHA256, w.Bytes, w.RDBVersion = sum(nil), 5, 11; return w },
			message: `shard 1: the backup's object b/none is not in the store (get key "b/none": object not found)`},
		{name: "credentials", key: "b/shard-0.rdb", gets: 1, reason: ErrStoreRefused,
			store:   func(m *memStore) { m.err = fmt.Errorf("get: %w", objectstore.ErrCredentials) },
			message: "shard 1: get: object store refused the credentials"},
		{name: "bad request", key: "b/shard-0.rdb", gets: 0, reason: ErrBadRequest,
			wanted:  func(w Wanted) Wanted { w.SHA256 = strings.ToUpper(w.SHA256); return w },
			message: fmt.Sprintf("shard 1: SHA-256 %q is not 64 lowercase hex digits", strings.ToUpper(sum(rdb11)))},
		{name: "unreachable", key: "b/shard-0.rdb", gets: 1, transient: true,
			store: func(m *memStore) { m.err = fmt.Errorf("get: %w", objectstore.ErrUnreachable) }},
		{name: "cut download", key: "b/shard-0.rdb", gets: 1, transient: true,
			store: func(m *memStore) { m.cut = map[string]error{"b/shard-0.rdb": io.ErrUnexpectedEOF} }},
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
			w := want(tt.key)
			if tt.wanted != nil {
				w = tt.wanted(w)
			}
			w.Dir = dir
			got, err := Fetch(context.Background(), m, w)
			assert.Equal(t, tt.gets, m.gets, "downloads")
			switch {
			case tt.transient:
				require.Error(t, err)
				assert.False(t, Refused(err), "transient: %v", err)
				assert.Contains(t, err.Error(), "shard 1: ")
				assertNoFile(t, dir, DumpFile)
				assertNoFile(t, dir, PartFile)
			case tt.reason != nil:
				require.Error(t, err)
				assert.True(t, Refused(err), "permanent: %v", err)
				assert.ErrorIs(t, err, tt.reason)
				assert.Equal(t, tt.message, err.Error())
				if tt.before == nil {
					assertNoFile(t, dir, DumpFile)
				}
				assertNoFile(t, dir, PartFile)
			default:
				require.NoError(t, err)
				assert.Equal(t, filepath.Join(dir, DumpFile), got.Path)
				if !got.Started {
					assert.Equal(t, w.SHA256, got.SHA256)
					assert.Equal(t, w.Bytes, got.Bytes)
				}
				assertNoFile(t, dir, PartFile)
			}
			if tt.after != nil {
				tt.after(t, dir, got)
			}
		})
	}
}

func write(t *testing.T, dir, name string, b []byte) {
	t.Helper()
	require.NoError(t, os.WriteFile(filepath.Join(dir, name), b, 0o600))
}

func assertNoFile(t *testing.T, dir, name string) {
	t.Helper()
	_, err := os.Stat(filepath.Join(dir, name))
	assert.True(t, errors.Is(err, os.ErrNotExist), "%s left behind (%v)", name, err)
}
