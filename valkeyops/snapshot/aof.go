package snapshot

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// A server started with appendonly yes loads its AOF and never reads dump.rdb: with no AOF
// manifest it creates an empty AOF and starts empty. What it loads is the multi-part AOF
// that valkey's src/aof.c describes (read in valkey-io/valkey's source; the integration
// tier's TestRestoreFetch starts the 9.1 image on what placeAOF writes):
//
//   - The directory `appenddirname` (under `dir`) holds the parts and a manifest named
//     `<appendfilename>.manifest`.
//   - Each manifest line is `file <name> seq <n> type <t>`; the name must be a bare file name
//     in that directory, each of file, seq and type must be given, and at most one line is of
//     type `b`, the base, which is loaded first.
//   - A base whose first bytes are an RDB signature is loaded as an RDB; the server names
//     such a base `<appendfilename>.<seq>.base.rdb`.
//   - A manifest with a base and no incremental part makes the server create the first
//     incremental part itself and rewrite the manifest at start, so the directory must be
//     writable by the server's user (the fetcher runs as that user).
//
// So a snapshot restored into such a server is placed as the base of a one-part AOF, and the
// server goes on appending to it as if it had written the base in a rewrite.

// AOFLayout names a server's append-only file: its `appenddirname` (relative to `dir`) and
// its `appendfilename`.
type AOFLayout struct {
	Dir  string
	File string
}

// baseSeq is the sequence number of the placed base: the first, as on a new server.
const baseSeq = 1

// BaseFile is the name of the base part the snapshot is placed as, in the server's own
// naming of an RDB-format base.
func (a AOFLayout) BaseFile() string { return fmt.Sprintf("%s.%d.base.rdb", a.File, baseSeq) }

// ManifestFile is the name of the AOF's manifest, which the server reads at start.
func (a AOFLayout) ManifestFile() string { return a.File + ".manifest" }

// Manifest is the manifest's content: the base alone.
func (a AOFLayout) Manifest() string {
	return fmt.Sprintf("file %s seq %d type b\n", a.BaseFile(), baseSeq)
}

// tempManifestFile is where the manifest is written before its rename; the server writes
// its own manifest the same way, under this name.
func (a AOFLayout) tempManifestFile() string { return "temp-" + a.ManifestFile() }

// validate refuses names the manifest could not hold as written: a path rather than a bare
// name, or characters the server's manifest parser would read as quoting or separators.
// The operator renders neither name (the servers use Valkey's defaults, appendonlydir and
// appendonly.aof), so anything else is a fault in what the fetcher was given.
func (a AOFLayout) validate() error {
	for _, n := range []struct{ what, name string }{{"AOF directory", a.Dir}, {"AOF file", a.File}} {
		if !plainName(n.name) {
			return fmt.Errorf("%s name %q is not a plain file name (letters, digits, '.', '_', '-')", n.what, n.name)
		}
	}
	return nil
}

func plainName(s string) bool {
	if s == "" || s == "." || s == ".." {
		return false
	}
	for _, c := range s {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
		if !ok {
			return false
		}
	}
	return true
}

// ErrAOFPresent: the data directory already holds an AOF manifest other than the one a
// restore writes, so a server's AOF (its data) is there and a restore must not replace it.
var ErrAOFPresent = errors.New("an AOF is already present")

// placeAOF places the snapshot as the AOF's base file, then its manifest. The manifest is
// written last, through a temporary file and a rename, so until the base is complete and
// verified there is no manifest and a server started on the directory would load nothing of
// it; once the manifest is there, the base it names is whole. A manifest exactly as a
// restore writes it is this restore's own, left by an earlier run: the base is checked (and
// fetched again if it differs) and the manifest kept.
func (w Wanted) placeAOF(ctx context.Context, store Getter) (Fetched, error) {
	a := *w.AOF
	dir := filepath.Join(w.Dir, a.Dir)
	manifest := filepath.Join(dir, a.ManifestFile())
	existing, err := os.ReadFile(manifest)
	switch {
	case err == nil && string(existing) != a.Manifest():
		return Fetched{}, w.refuse(ErrAOFPresent, "%s already holds an AOF manifest, %s, that this restore did not write: the AOF there is kept, nothing fetched",
			dir, a.ManifestFile())
	case err != nil && !errors.Is(err, os.ErrNotExist):
		return Fetched{}, fmt.Errorf("shard %d: reading the existing %s: %w", w.Shard, manifest, err)
	}
	written := err == nil
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Fetched{}, fmt.Errorf("shard %d: %w", w.Shard, err)
	}
	base := filepath.Join(dir, a.BaseFile())
	res, err := w.place(ctx, store, base, base+".part")
	if err != nil {
		return Fetched{}, err
	}
	res.Manifest = manifest
	if written {
		return res, nil
	}
	if err := writeFileSynced(dir, a.tempManifestFile(), a.ManifestFile(), []byte(a.Manifest())); err != nil {
		return Fetched{}, fmt.Errorf("shard %d: writing %s: %w", w.Shard, manifest, err)
	}
	return res, nil
}

// writeFileSynced writes b to dir/name through dir/temp, renamed once synced, and makes the
// rename durable.
func writeFileSynced(dir, temp, name string, b []byte) error {
	tmp := filepath.Join(dir, temp)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, name))
	}
	if err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return syncDir(dir)
}
