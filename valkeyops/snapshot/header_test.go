package snapshot

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// rdbStr is a raw RDB string (6-bit length).
func rdbStr(s string) string { return string(rune(len(s))) + s }

func aux(k, v string) string { return "\xfa" + rdbStr(k) + v }

// TestParseHeader reads the header forms the servers write: both magics, aux values in each
// string encoding (raw, 8/16/32-bit integers, LZF), functions before the first database, a
// snapshot with no database, and stops without failing where it cannot go on.
func TestParseHeader(t *testing.T) {
	auxes := aux("valkey-ver", rdbStr("9.1.2")) + aux("redis-bits", "\xc0\x40") + aux("neg", "\xc1\xfe\xff") +
		aux("ctime", "\xc2\x01\x02\x03\x04") + aux("lzf", "\xc3\x05\x0a\x00a\xe0\x00\x00")
	db := "\xfe\x00\xfb\x41\x2c\x05" // SELECTDB 0, RESIZEDB 300 keys, 5 expires
	tests := []struct {
		name      string
		in        string
		magic     string
		version   int
		keysKnown bool
		keys      int64
		stopped   string
	}{
		{name: "valkey 8", in: "REDIS0011" + auxes + db + "\x00junk", magic: "REDIS", version: 11, keysKnown: true, keys: 300},
		{name: "valkey magic", in: "VALKEY080" + auxes + db, magic: "VALKEY", version: 80, keysKnown: true, keys: 300},
		{name: "function before the data", in: "REDIS0011" + auxes + "\xf5" + rdbStr("#!lua name=x") + db, magic: "REDIS", version: 11, keysKnown: true, keys: 300},
		{name: "no database", in: "REDIS0011" + auxes + "\xff12345678", magic: "REDIS", version: 11, keysKnown: true},
		{name: "32-bit key count", in: "REDIS0011" + auxes + "\xfe\x00\xfb\x80\x00\x0f\x42\x40\x00", magic: "REDIS", version: 11, keysKnown: true, keys: 1_000_000},
		{name: "module data", in: "REDIS0011" + auxes + "\xf7\x01", magic: "REDIS", version: 11, stopped: "module data before the first database"},
		{name: "truncated", in: "REDIS0011" + auxes + "\xfe\x00\xfb", magic: "REDIS", version: 11, stopped: "payload ended within the header"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, err := ParseHeader([]byte(tt.in))
			require.NoError(t, err)
			assert.Equal(t, tt.magic, h.Magic)
			assert.Equal(t, tt.version, h.Version)
			assert.Equal(t, tt.keysKnown, h.KeysKnown)
			assert.Equal(t, tt.keys, h.Keys)
			assert.Equal(t, tt.stopped, h.Stopped)
			assert.Equal(t, "9.1.2", h.ServerVersion())
			assert.Equal(t, "64", h.Aux["redis-bits"], "8-bit integer")
			assert.Equal(t, "-2", h.Aux["neg"], "16-bit integer, signed")
			assert.Equal(t, "67305985", h.Aux["ctime"], "32-bit integer, little-endian")
			assert.Equal(t, strings.Repeat("a", 10), h.Aux["lzf"], "LZF back reference overlapping its output")
			if tt.keys == 300 {
				assert.EqualValues(t, 5, h.Expires)
			}
		})
	}
	_, err := ParseHeader([]byte("+FULLRESYNC x 0"))
	assert.ErrorIs(t, err, ErrNotRDB)
	h, err := ParseHeader([]byte("REDIS0011" + aux("redis-ver", rdbStr("7.2.4")) + "\xff"))
	require.NoError(t, err)
	assert.Equal(t, "7.2.4", h.ServerVersion(), "redis-ver when there is no valkey-ver")
}

// TestHeaderSnifferKeepsOnlyTheStart: memory stays bounded whatever is written.
func TestHeaderSnifferKeepsOnlyTheStart(t *testing.T) {
	s := &headerSniffer{}
	chunk := make([]byte, 48<<10)
	for range 10 {
		n, err := s.Write(chunk)
		require.NoError(t, err)
		require.Equal(t, len(chunk), n)
	}
	assert.Len(t, s.buf, headerCap)
}
