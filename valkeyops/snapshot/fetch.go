package snapshot

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/gomomento/valkey-operator/objectstore"
	"github.com/gomomento/valkey-operator/valkeyops/model"
)

// File names in the data directory. The server loads DumpFile at start-up; PartFile is the
// download in progress, never loaded, so a fetch cut at any point leaves nothing the server
// would read as a snapshot.
const (
	DumpFile  = "dump.rdb"
	PartFile  = "dump.rdb.part"
	nodesFile = "nodes.conf"
)

// Wanted is one shard's object as the backup's manifest records it, and the server that is
// to load it.
type Wanted struct {
	// Shard is the shard's index, for messages.
	Shard int
	// Object is the object's full key in the bucket.
	Object string
	// SHA256 (lowercase hex) and Bytes are the object's, from the manifest.
	SHA256 string
	Bytes  int64
	// RDBVersion is the format version the manifest records for the object.
	RDBVersion int
	// MaxRDBVersion is the newest format the server that will load it reads
	// (model.MaxRDBVersion of ValkeyVersion).
	MaxRDBVersion int
	// ValkeyVersion is that server's version, for messages.
	ValkeyVersion string
	// Dir is the server's data directory (its `dir`).
	Dir string
	// AOF, when set, is the server's append-only file layout: the server keeps an AOF
	// (appendonly yes), so the snapshot is placed as that AOF's base rather than as
	// dump.rdb, which such a server does not read.
	AOF *AOFLayout
}

// Getter opens an object for reading with its size; *objectstore.Store is one. A missing
// object is objectstore.ErrNotFound.
type Getter interface {
	Get(ctx context.Context, key string) (io.ReadCloser, int64, error)
}

// Fetched is what a completed Fetch placed, or found already placed.
type Fetched struct {
	// Path is the placed snapshot's path: dump.rdb, or the AOF's base file.
	Path string
	// Manifest is the AOF manifest's path when the snapshot was placed as an AOF's base.
	Manifest string
	// Bytes and SHA256 are the placed snapshot's.
	Bytes  int64
	SHA256 string
	// Header is what the downloaded RDB's first bytes said (zero when nothing was downloaded).
	Header Header
	// AlreadyThere says nothing was downloaded: the directory already held the wanted
	// snapshot, or a server already started on it (Started).
	AlreadyThere bool
	// Started says the directory holds nodes.conf: a server has run on it, so it owns the
	// directory's data and nothing was touched.
	Started bool
}

// Why a fetch was refused (RefusedError.Reason). Each is permanent: fetching again cannot
// change it.
var (
	// ErrChecksum: the object's SHA-256 is not the manifest's.
	ErrChecksum = errors.New("SHA-256 mismatch")
	// ErrSize: the object's size is not the manifest's.
	ErrSize = errors.New("size mismatch")
	// ErrRDBVersion: the object's RDB version is not the manifest's, or the target server
	// cannot load it.
	ErrRDBVersion = errors.New("RDB version not loadable")
	// ErrObjectMissing: no object under the key.
	ErrObjectMissing = errors.New("object missing")
	// ErrStoreRefused: the store refused the credentials, or the bucket does not exist.
	ErrStoreRefused = errors.New("object store refused")
	// ErrBadRequest: what Fetch was asked is incomplete or contradictory.
	ErrBadRequest = errors.New("invalid restore request")
)

// RefusedError is a permanent refusal of one shard's restore: the object is not the one the
// manifest describes, or the server cannot load it, or it cannot be read at all. Its
// message is for the user (a pod's termination message, an Event). Reason is one of the
// Err* values above, ErrNotRDB or ErrAOFPresent. Every other error of Fetch is transient
// (the network, the store's availability, the local disk): trying again may succeed.
type RefusedError struct {
	Shard  int
	Reason error
	Detail string
}

func (e *RefusedError) Error() string { return fmt.Sprintf("shard %d: %s", e.Shard, e.Detail) }

// Unwrap makes errors.Is(err, ErrChecksum) and the like work.
func (e *RefusedError) Unwrap() error { return e.Reason }

// Refused reports whether err is a permanent refusal (a *RefusedError).
func Refused(err error) bool {
	var r *RefusedError
	return errors.As(err, &r)
}

// fetchBuffer is the one copy buffer of a download: memory stays flat whatever the size.
const fetchBuffer = 256 << 10

// Fetch places one shard's backed-up RDB in w.Dir as dump.rdb, for a server that has not
// started yet to load; with w.AOF set it places it as the base of the server's AOF instead
// (placeAOF), since a server with appendonly yes loads its AOF and ignores dump.rdb. It
// downloads the object into a part file while hashing it and reading its header, checks
// the size, the SHA-256 and the RDB version against w (the manifest's, and not newer than
// the server loads), syncs the file to disk and only then renames it into place, so the
// server never sees a partial or unverified snapshot.
//
// Running it again is safe (an init container re-run after its pod restarted): a snapshot
// already in place with the wanted SHA-256 is kept, nothing is downloaded and a leftover
// part file is removed; otherwise a leftover part file is replaced. A directory that holds
// nodes.conf belongs to a server that has already started on it (and may have written
// since): Fetch leaves it untouched.
//
// A refusal is a *RefusedError (see Refused); it leaves neither the snapshot nor the part
// file.
func Fetch(ctx context.Context, store Getter, w Wanted) (Fetched, error) {
	if err := w.validate(); err != nil {
		return Fetched{}, err
	}
	if _, err := os.Stat(filepath.Join(w.Dir, nodesFile)); err == nil {
		return Fetched{Path: w.target(), AlreadyThere: true, Started: true}, nil
	}
	if err := w.loadable(w.RDBVersion, "the backup's"); err != nil {
		return Fetched{}, err
	}
	if w.AOF != nil {
		return w.placeAOF(ctx, store)
	}
	return w.place(ctx, store, filepath.Join(w.Dir, DumpFile), filepath.Join(w.Dir, PartFile))
}

// target is where Fetch places the snapshot: dump.rdb, or the AOF's base file.
func (w Wanted) target() string {
	if w.AOF != nil {
		return filepath.Join(w.Dir, w.AOF.Dir, w.AOF.BaseFile())
	}
	return filepath.Join(w.Dir, DumpFile)
}

// place downloads the object through part into path, unless path already holds it.
func (w Wanted) place(ctx context.Context, store Getter, path, part string) (Fetched, error) {
	out := Fetched{Path: path}
	if sum, n, err := fileSHA256(path); err == nil && sum == w.SHA256 && n == w.Bytes {
		out.Bytes, out.SHA256, out.AlreadyThere = n, sum, true
		// A part file left by an earlier run is garbage nothing else removes (the server
		// ignores files its AOF manifest does not name).
		if err := os.Remove(part); err != nil && !errors.Is(err, os.ErrNotExist) {
			return Fetched{}, fmt.Errorf("shard %d: %w", w.Shard, err)
		}
		return out, nil
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return Fetched{}, fmt.Errorf("shard %d: reading the existing %s: %w", w.Shard, path, err)
	}

	body, size, err := store.Get(ctx, w.Object)
	if err != nil {
		return Fetched{}, w.storeError(err)
	}
	defer body.Close()
	if size != w.Bytes {
		return Fetched{}, w.refuse(ErrSize, "the object %s has %d bytes, the manifest says %d", w.Object, size, w.Bytes)
	}

	res, err := w.download(body, part)
	if err != nil {
		_ = os.Remove(part)
		return Fetched{}, err
	}
	if err := os.Rename(part, path); err != nil {
		_ = os.Remove(part)
		return Fetched{}, fmt.Errorf("shard %d: %w", w.Shard, err)
	}
	if err := syncDir(filepath.Dir(path)); err != nil {
		return Fetched{}, fmt.Errorf("shard %d: %w", w.Shard, err)
	}
	res.Path = path
	return res, nil
}

// download copies body into path (replacing any file there), checks what it copied, and
// syncs it. path is the caller's to remove on error.
func (w Wanted) download(body io.Reader, path string) (Fetched, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return Fetched{}, fmt.Errorf("shard %d: %w", w.Shard, err)
	}
	defer f.Close()
	sum := sha256.New()
	sniff := &headerSniffer{}
	// One byte more than wanted is read, so an object longer than its stated size is seen.
	n, err := io.CopyBuffer(io.MultiWriter(f, sum, sniff), io.LimitReader(body, w.Bytes+1), make([]byte, fetchBuffer))
	if err != nil {
		return Fetched{}, fmt.Errorf("shard %d: downloading %s: %w", w.Shard, w.Object, err)
	}
	if n != w.Bytes {
		return Fetched{}, w.refuse(ErrSize, "the object %s has %s bytes, the manifest says %d", w.Object, atLeast(n, w.Bytes), w.Bytes)
	}
	got := hex.EncodeToString(sum.Sum(nil))
	if got != w.SHA256 {
		return Fetched{}, w.refuse(ErrChecksum, "SHA-256 of the downloaded object is %s, the manifest says %s", short(got), short(w.SHA256))
	}
	h, err := ParseHeader(sniff.buf)
	if err != nil {
		return Fetched{}, w.refuse(ErrNotRDB, "the object %s is not an RDB snapshot (%v)", w.Object, err)
	}
	if h.Version != w.RDBVersion {
		return Fetched{}, w.refuse(ErrRDBVersion, "the object's RDB version is %d, the manifest says %d", h.Version, w.RDBVersion)
	}
	if err := w.loadable(h.Version, "the object's"); err != nil {
		return Fetched{}, err
	}
	if err := f.Sync(); err != nil {
		return Fetched{}, fmt.Errorf("shard %d: %w", w.Shard, err)
	}
	if err := f.Close(); err != nil {
		return Fetched{}, fmt.Errorf("shard %d: %w", w.Shard, err)
	}
	return Fetched{Bytes: n, SHA256: got, Header: h}, nil
}

// loadable refuses an RDB version the target server does not load.
func (w Wanted) loadable(v int, whose string) error {
	switch {
	case model.ForeignRDBVersion(v):
		return w.refuse(ErrRDBVersion, "%s RDB version %d is another server's format, which no Valkey loads", whose, v)
	case v > w.MaxRDBVersion:
		return w.refuse(ErrRDBVersion, "%s RDB version %d is newer than Valkey %s loads (%d)", whose, v, w.ValkeyVersion, w.MaxRDBVersion)
	}
	return nil
}

// storeError sorts a failure to open the object: what the store answered for good is a
// refusal, the rest (unreachable, a server error) transient.
func (w Wanted) storeError(err error) error {
	switch {
	case errors.Is(err, objectstore.ErrNotFound):
		return w.refuse(ErrObjectMissing, "the backup's object %s is not in the store (%v)", w.Object, err)
	case errors.Is(err, objectstore.ErrCredentials), errors.Is(err, objectstore.ErrNoBucket):
		return w.refuse(ErrStoreRefused, "%v", err)
	}
	return fmt.Errorf("shard %d: opening the object %s: %w", w.Shard, w.Object, err)
}

func (w Wanted) refuse(reason error, format string, args ...any) *RefusedError {
	return &RefusedError{Shard: w.Shard, Reason: reason, Detail: fmt.Sprintf(format, args...)}
}

func (w Wanted) validate() error {
	bad := func(format string, args ...any) error { return w.refuse(ErrBadRequest, format, args...) }
	switch {
	case w.Dir == "":
		return bad("no data directory given")
	case w.Object == "":
		return bad("no object key given")
	case w.Bytes < 0:
		return bad("object size %d is negative", w.Bytes)
	case w.RDBVersion <= 0:
		return bad("no RDB version given for the object")
	case w.MaxRDBVersion <= 0:
		return bad("no RDB version given that Valkey %s loads", w.ValkeyVersion)
	}
	if w.AOF != nil {
		if err := w.AOF.validate(); err != nil {
			return bad("%v", err)
		}
	}
	if b, err := hex.DecodeString(w.SHA256); err != nil || len(b) != sha256.Size || hex.EncodeToString(b) != w.SHA256 {
		return bad("SHA-256 %q is not 64 lowercase hex digits", w.SHA256)
	}
	return nil
}

// fileSHA256 is the hex SHA-256 and size of the file at path.
func fileSHA256(path string) (string, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.CopyBuffer(h, f, make([]byte, fetchBuffer))
	if err != nil {
		return "", 0, err
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

// syncDir makes a rename in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// short is a SHA-256 shortened for a message, as people compare them.
func short(sum string) string {
	if len(sum) > 12 {
		return sum[:12] + "…"
	}
	return sum
}

// atLeast renders a byte count that may have been cut at limit+1 (the copy stops there).
func atLeast(n, limit int64) string {
	if n > limit {
		return fmt.Sprintf("more than %d", limit)
	}
	return fmt.Sprint(n)
}
