package snapshot

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// feed writes data to one end of a pipe in chunks of size, then closes it if close.
func feed(t *testing.T, data []byte, size int, close bool) *session {
	t.Helper()
	client, server := net.Pipe()
	t.Cleanup(func() { client.Close(); server.Close() })
	go func() {
		for off := 0; off < len(data); off += size {
			if _, err := server.Write(data[off:min(off+size, len(data))]); err != nil {
				return
			}
		}
		if close {
			server.Close()
		}
	}()
	// A reader smaller than a mark, so reads end anywhere around it.
	return &session{conn: client, r: bufio.NewReaderSize(client, 16), idle: 5 * time.Second}
}

// TestCopyUntilMark: the diskless form's payload is everything before the end mark, however
// the reads split the stream around it (one byte at a time, within the mark, exactly at
// it); the mark is never written; a stream that ends without it is short.
func TestCopyUntilMark(t *testing.T) {
	mark := bytes.Repeat([]byte("m"), eofMarkSize)
	payload := make([]byte, 10_000)
	_, _ = rand.Read(payload)
	for _, chunk := range []int{1, 7, 39, 40, 41, 1000, 20_000} {
		for _, bufSize := range []int{16, 64, 4096} {
			s := feed(t, append(append([]byte(nil), payload...), mark...), chunk, false)
			var out bytes.Buffer
			require.NoError(t, s.copyUntilMark(&out, mark, make([]byte, bufSize)), "chunk %d, buffer %d", chunk, bufSize)
			assert.Equal(t, payload, out.Bytes(), "chunk %d, buffer %d", chunk, bufSize)
		}
	}
	s := feed(t, append(append([]byte(nil), payload...), mark[:39]...), 100, true)
	var out bytes.Buffer
	assert.ErrorIs(t, s.copyUntilMark(&out, mark, make([]byte, 64)), ErrShortStream)
}

// TestCopyN: the length form copies exactly its length and leaves what follows; fewer bytes
// are a short stream.
func TestCopyN(t *testing.T) {
	payload := make([]byte, 5000)
	_, _ = rand.Read(payload)
	s := feed(t, append(append([]byte(nil), payload...), "+after"...), 333, false)
	var out bytes.Buffer
	require.NoError(t, s.copyN(&out, int64(len(payload)), make([]byte, 64)))
	assert.Equal(t, payload, out.Bytes())

	s = feed(t, payload[:4000], 333, true)
	out.Reset()
	assert.ErrorIs(t, s.copyN(&out, int64(len(payload)), make([]byte, 64)), ErrShortStream)
}
