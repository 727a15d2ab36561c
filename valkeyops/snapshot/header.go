package snapshot

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
)

// Header is what the start of an RDB payload says about the snapshot: enough to record a
// backup (format version, the server's version, the key count at fork time) without
// parsing the data itself.
type Header struct {
	// Magic is the file's first bytes: "REDIS" followed by a four-digit version (what Valkey
	// 8.0.1 and 9.1.2 both write: REDIS0011), or "VALKEY" followed by three digits, read too
	// in case a later release marks a format of its own that way.
	Magic string
	// Version is the RDB format version: a server refuses to load a higher one than it knows.
	Version int
	// Aux are the auxiliary fields written before the first database: valkey-ver (or
	// redis-ver), redis-bits, ctime, used-mem, repl-id, ...
	Aux map[string]string
	// KeysKnown says whether Keys and Expires were learned: the header was read up to the
	// first database's RESIZEDB, or to the end of a snapshot holding no database.
	KeysKnown bool
	// Keys and Expires are the first database's key count and count of keys with a TTL when
	// the server forked (RESIZEDB). In cluster mode db0 is the only database.
	Keys, Expires int64
	// Stopped says why the reader stopped before learning the key count (KeysKnown false):
	// an opcode it does not skip (module data), or a header longer than it keeps.
	Stopped string
}

// ServerVersion is the version of the server that wrote the snapshot (valkey-ver, or
// redis-ver for an RDB written by Redis or an older Valkey).
func (h Header) ServerVersion() string {
	if v := h.Aux["valkey-ver"]; v != "" {
		return v
	}
	return h.Aux["redis-ver"]
}

// ErrNotRDB means the payload does not start as an RDB file does.
var ErrNotRDB = errors.New("payload is not an RDB snapshot")

// headerCap is how many leading bytes of a payload the header reader keeps: the aux fields
// and the first RESIZEDB come within a few hundred bytes, unless server functions are
// stored before them, so this bounds memory whatever the snapshot's size.
const headerCap = 64 << 10

// headerSniffer keeps the first headerCap bytes written to it and drops the rest.
type headerSniffer struct {
	buf []byte
}

func (s *headerSniffer) Write(p []byte) (int, error) {
	if room := headerCap - len(s.buf); room > 0 {
		s.buf = append(s.buf, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

// RDB opcodes the header reader knows (rdb.h).
const (
	opFunction2 = 245
	opModuleAux = 247
	opAux       = 250
	opResizeDB  = 251
	opSelectDB  = 254
	opEOF       = 255
)

// ParseHeader reads an RDB header from the leading bytes of a payload. It never fails on
// a well-formed start it cannot finish (Header.Stopped says why); it fails with ErrNotRDB
// when the magic is neither form.
func ParseHeader(b []byte) (Header, error) {
	h := Header{Aux: map[string]string{}}
	switch {
	case len(b) >= 9 && bytes.HasPrefix(b, []byte("REDIS")):
		h.Magic = "REDIS"
		v, err := strconv.Atoi(string(b[5:9]))
		if err != nil {
			return h, fmt.Errorf("%w: version %q", ErrNotRDB, b[5:9])
		}
		h.Version = v
	case len(b) >= 9 && bytes.HasPrefix(b, []byte("VALKEY")):
		h.Magic = "VALKEY"
		v, err := strconv.Atoi(string(b[6:9]))
		if err != nil {
			return h, fmt.Errorf("%w: version %q", ErrNotRDB, b[6:9])
		}
		h.Version = v
	default:
		return h, fmt.Errorf("%w: starts with %q", ErrNotRDB, b[:min(9, len(b))])
	}
	r := &rdbReader{b: b[9:]}
	for {
		op, ok := r.byte()
		if !ok {
			h.Stopped = r.short()
			return h, nil
		}
		switch op {
		case opAux:
			k, ok1 := r.str()
			v, ok2 := r.str()
			if !ok1 || !ok2 {
				h.Stopped = r.short()
				return h, nil
			}
			h.Aux[k] = v
		case opFunction2:
			if _, ok := r.str(); !ok {
				h.Stopped = r.short()
				return h, nil
			}
		case opSelectDB:
			if _, _, ok := r.length(); !ok {
				h.Stopped = r.short()
				return h, nil
			}
			if op, ok := r.byte(); !ok || op != opResizeDB {
				h.Stopped = "no RESIZEDB after the first SELECTDB"
				return h, nil
			}
			keys, _, ok1 := r.length()
			expires, _, ok2 := r.length()
			if !ok1 || !ok2 {
				h.Stopped = r.short()
				return h, nil
			}
			h.KeysKnown, h.Keys, h.Expires = true, int64(keys), int64(expires)
			return h, nil
		case opEOF:
			h.KeysKnown = true // no database written: no key
			return h, nil
		case opModuleAux:
			h.Stopped = "module data before the first database"
			return h, nil
		default:
			h.Stopped = fmt.Sprintf("unknown opcode %d before the first database", op)
			return h, nil
		}
	}
}

// rdbReader reads RDB primitives from a byte slice; a read past its end reports !ok.
type rdbReader struct {
	b   []byte
	off int
}

func (r *rdbReader) short() string {
	if len(r.b)+9 >= headerCap {
		return fmt.Sprintf("header longer than the %d bytes read", headerCap)
	}
	return "payload ended within the header"
}

func (r *rdbReader) take(n uint64) ([]byte, bool) {
	if n > uint64(len(r.b)-r.off) {
		return nil, false
	}
	out := r.b[r.off : r.off+int(n)]
	r.off += int(n)
	return out, true
}

func (r *rdbReader) byte() (byte, bool) {
	b, ok := r.take(1)
	if !ok {
		return 0, false
	}
	return b[0], true
}

// String encodings of a length byte whose two top bits are 11 (RDB_ENC_*).
const (
	encInt8  = 0
	encInt16 = 1
	encInt32 = 2
	encLZF   = 3
)

// length reads an RDB length. encoded reports a special string encoding (the value is
// then the RDB_ENC_* kind, not a length).
func (r *rdbReader) length() (n uint64, encoded, ok bool) {
	first, ok := r.byte()
	if !ok {
		return 0, false, false
	}
	switch first >> 6 {
	case 0:
		return uint64(first & 0x3f), false, true
	case 1:
		next, ok := r.byte()
		return uint64(first&0x3f)<<8 | uint64(next), false, ok
	case 3:
		return uint64(first & 0x3f), true, true
	}
	switch first {
	case 0x80:
		b, ok := r.take(4)
		if !ok {
			return 0, false, false
		}
		return uint64(binary.BigEndian.Uint32(b)), false, true
	case 0x81:
		b, ok := r.take(8)
		if !ok {
			return 0, false, false
		}
		return binary.BigEndian.Uint64(b), false, true
	}
	return 0, false, false
}

// str reads an RDB string: raw, an integer encoding (rendered in decimal, as the server
// reads it back) or LZF-compressed.
func (r *rdbReader) str() (string, bool) {
	n, encoded, ok := r.length()
	if !ok {
		return "", false
	}
	if !encoded {
		b, ok := r.take(n)
		return string(b), ok
	}
	switch n {
	case encInt8:
		b, ok := r.take(1)
		if !ok {
			return "", false
		}
		return strconv.FormatInt(int64(int8(b[0])), 10), true
	case encInt16:
		b, ok := r.take(2)
		if !ok {
			return "", false
		}
		return strconv.FormatInt(int64(int16(binary.LittleEndian.Uint16(b))), 10), true
	case encInt32:
		b, ok := r.take(4)
		if !ok {
			return "", false
		}
		return strconv.FormatInt(int64(int32(binary.LittleEndian.Uint32(b))), 10), true
	case encLZF:
		clen, _, ok1 := r.length()
		ulen, _, ok2 := r.length()
		if !ok1 || !ok2 || ulen > headerCap {
			return "", false
		}
		c, ok := r.take(clen)
		if !ok {
			return "", false
		}
		out, err := lzfDecompress(c, int(ulen))
		return string(out), err == nil
	}
	return "", false
}

// lzfDecompress expands LZF data (the compression RDB strings use) into exactly size
// bytes. Each control byte is a literal run (below 32: that many plus one bytes follow) or
// a back reference (length in its top three bits, extended by a further byte when they are
// all set; offset from its low five bits and the next byte).
func lzfDecompress(in []byte, size int) ([]byte, error) {
	out := make([]byte, 0, size)
	bad := errors.New("corrupt LZF string")
	for i := 0; i < len(in); {
		ctrl := int(in[i])
		i++
		if ctrl < 32 {
			n := ctrl + 1
			if i+n > len(in) || len(out)+n > size {
				return nil, bad
			}
			out = append(out, in[i:i+n]...)
			i += n
			continue
		}
		n := ctrl >> 5
		if n == 7 {
			if i >= len(in) {
				return nil, bad
			}
			n += int(in[i])
			i++
		}
		n += 2
		if i >= len(in) {
			return nil, bad
		}
		ref := len(out) - (ctrl&0x1f)<<8 - int(in[i]) - 1
		i++
		if ref < 0 || len(out)+n > size {
			return nil, bad
		}
		for k := 0; k < n; k++ { // byte by byte: a reference may overlap what it produces
			out = append(out, out[ref+k])
		}
	}
	if len(out) != size {
		return nil, bad
	}
	return out, nil
}
