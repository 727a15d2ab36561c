// Package snapshot streams one server's RDB snapshot over the replication protocol, as
// valkey-cli --rdb does, into an io.Writer: the protocol half of a backup. It logs in as a
// user that may run nothing but the snapshot stream (model.BackupUser), asks for the RDB
// alone (REPLCONF rdb-only 1: the server then keeps no replication buffer for this client
// and disconnects it once the payload is sent, so no replica slot outlives the transfer),
// accepts the diskless form (REPLCONF capa eof: a server with repl-diskless-sync yes writes
// the RDB straight to the socket instead of its disk; Valkey 9.1 does so for an rdb-only
// client whatever that setting says), sends SYNC and copies the payload through one fixed
// buffer, so memory stays flat whatever the snapshot's size.
//
// The server forks for the snapshot: callers stream from a replica so its primary does not.
package snapshot

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gomomento/valkey-operator/valkeyops"
	"github.com/gomomento/valkey-operator/valkeyops/model"
)

// Options of one stream.
type Options struct {
	// Credentials say how to log in (the backup user and its password) and, with a CA,
	// how to speak TLS.
	Credentials valkeyops.Credentials
	// DialTimeout bounds connecting and the TLS handshake (default 5s).
	DialTimeout time.Duration
	// IdleTimeout bounds how long the server may send nothing at all. While it forks and
	// writes the snapshot it sends a newline every second or so, so this only catches a
	// server or network that went silent (default 60s).
	IdleTimeout time.Duration
	// BufferSize is the size of the one copy buffer (default 256 KiB).
	BufferSize int
}

// Result is what one completed stream wrote and learned.
type Result struct {
	// Bytes and SHA256 (hex) are of the payload as written to the writer: the RDB file.
	Bytes  int64
	SHA256 string
	// Header is what the RDB's first bytes said.
	Header Header
	// Diskless: the server sent the $EOF:<mark> form (written to the socket as it forked),
	// not the $<length> form (written to its disk first).
	Diskless bool
	// RDBOnly: the server took REPLCONF rdb-only (it keeps no replication buffer for us).
	RDBOnly bool
}

// ReplyError is an error reply of the server to one of the stream's commands (a refused
// login, a command the user may not run, SYNC refused by a replica whose own link is
// down, ...).
type ReplyError struct {
	Command string // the command refused, without its arguments (never the password)
	Reply   string // the server's error line, e.g. "NOPERM User backup has no permissions ..."
}

func (e *ReplyError) Error() string {
	return fmt.Sprintf("server refused %s: %s", e.Command, e.Reply)
}

// Code is the reply's first word (NOPERM, WRONGPASS, ERR, NOMASTERLINK, ...).
func (e *ReplyError) Code() string {
	code, _, _ := strings.Cut(e.Reply, " ")
	return code
}

// ErrShortStream means the connection ended before the whole payload arrived: what was
// written is not a snapshot.
var ErrShortStream = errors.New("snapshot stream ended early")

// ErrProtocol means the server sent something the replication protocol does not allow here.
var ErrProtocol = errors.New("unexpected replication protocol reply")

// Stream dials node, logs in with opts.Credentials, and copies its RDB snapshot into w.
// Errors are model.OpErrors naming node and the step: model.ErrUnreachable (dial, TLS),
// a *ReplyError (the server refused a command), ErrShortStream, ErrProtocol, ErrNotRDB, the
// writer's own error, or ctx's error once ctx ends (the connection is closed at once).
// Whatever the error, what w received is not a complete snapshot.
func Stream(ctx context.Context, node model.Node, w io.Writer, opts Options) (Result, error) {
	if opts.DialTimeout <= 0 {
		opts.DialTimeout = 5 * time.Second
	}
	if opts.IdleTimeout <= 0 {
		opts.IdleTimeout = 60 * time.Second
	}
	if opts.BufferSize <= 0 {
		opts.BufferSize = 256 << 10
	}
	fail := func(step string, err error) (Result, error) {
		if ctxErr := ctx.Err(); ctxErr != nil {
			err = fmt.Errorf("%w (%v)", ctxErr, err)
		}
		return Result{}, model.NewOpError(node.Name, "snapshot-"+step, err)
	}
	if opts.Credentials.Password == "" {
		return fail("login", model.ErrAuthRequired)
	}
	tlsCfg, err := opts.Credentials.TLSConfig()
	if err != nil {
		return fail("dial", fmt.Errorf("%w: %v", model.ErrInvalidSpec, err))
	}
	conn, err := dial(ctx, node.Addr, tlsCfg, opts.DialTimeout)
	if err != nil {
		return fail("dial", fmt.Errorf("%w: %v", model.ErrUnreachable, err))
	}
	// Cancellation closes the connection: a blocked read returns at once.
	var closeOnce sync.Once
	closeConn := func() { closeOnce.Do(func() { _ = conn.Close() }) }
	defer closeConn()
	stop := context.AfterFunc(ctx, closeConn)
	defer stop()

	s := &session{conn: conn, r: bufio.NewReaderSize(conn, opts.BufferSize), idle: opts.IdleTimeout}
	login := []string{"AUTH", opts.Credentials.Password}
	if opts.Credentials.Username != "" {
		login = []string{"AUTH", opts.Credentials.Username, opts.Credentials.Password}
	}
	if err := s.call(login...); err != nil {
		return fail("login", err)
	}
	if err := s.call("REPLCONF", "capa", "eof"); err != nil {
		return fail("replconf", err)
	}
	res := Result{RDBOnly: true}
	if err := s.call("REPLCONF", "rdb-only", "1"); err != nil {
		var reply *ReplyError
		if !errors.As(err, &reply) || reply.Code() == "NOPERM" {
			return fail("replconf", err)
		}
		// A server that does not know the option streams the same RDB, then would go on
		// with the replication stream: the connection is closed right after the payload.
		res.RDBOnly = false
	}
	if err := s.send("SYNC"); err != nil {
		return fail("sync", err)
	}
	size, mark, err := s.bulkHeader()
	if err != nil {
		return fail("sync", err)
	}
	res.Diskless = mark != nil

	sum := sha256.New()
	sniff := &headerSniffer{}
	out := &countingWriter{w: io.MultiWriter(w, sum, sniff)}
	buf := make([]byte, opts.BufferSize)
	if mark != nil {
		err = s.copyUntilMark(out, mark, buf)
	} else {
		err = s.copyN(out, size, buf)
	}
	if err != nil {
		return fail("transfer", err)
	}
	if out.werr != nil {
		return fail("transfer", out.werr)
	}
	res.Bytes = out.n
	res.SHA256 = hex.EncodeToString(sum.Sum(nil))
	res.Header, err = ParseHeader(sniff.buf)
	if err != nil {
		return fail("header", err)
	}
	return res, nil
}

func dial(ctx context.Context, addr string, cfg *tls.Config, timeout time.Duration) (net.Conn, error) {
	dctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	nd := &net.Dialer{KeepAlive: 30 * time.Second}
	if cfg == nil {
		return nd.DialContext(dctx, "tcp", addr)
	}
	d := tls.Dialer{NetDialer: nd, Config: cfg.Clone()}
	return d.DialContext(dctx, "tcp", addr)
}

// session is one connection speaking the replication protocol's client side.
type session struct {
	conn net.Conn
	r    *bufio.Reader
	idle time.Duration
}

// send writes one command as a RESP array.
func (s *session) send(args ...string) error {
	var b bytes.Buffer
	b.WriteString("*" + strconv.Itoa(len(args)) + "\r\n")
	for _, a := range args {
		b.WriteString("$" + strconv.Itoa(len(a)) + "\r\n" + a + "\r\n")
	}
	_ = s.conn.SetWriteDeadline(time.Now().Add(s.idle))
	_, err := s.conn.Write(b.Bytes())
	return err
}

// call sends a command that answers +OK or an error.
func (s *session) call(args ...string) error {
	if err := s.send(args...); err != nil {
		return err
	}
	line, err := s.line()
	if err != nil {
		return err
	}
	switch {
	case strings.HasPrefix(line, "+"):
		return nil
	case strings.HasPrefix(line, "-"):
		return &ReplyError{Command: commandName(args), Reply: line[1:]}
	}
	return fmt.Errorf("%w: %s answered %q", ErrProtocol, commandName(args), clip(line))
}

// commandName is args' command and, for REPLCONF, its option: never an argument that may
// be secret.
func commandName(args []string) string {
	if strings.EqualFold(args[0], "REPLCONF") && len(args) > 1 {
		return "REPLCONF " + args[1]
	}
	return args[0]
}

// line reads one reply line without its CRLF; lines are short (a reply header or an error).
func (s *session) line() (string, error) {
	_ = s.conn.SetReadDeadline(time.Now().Add(s.idle))
	b, err := s.r.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		return "", fmt.Errorf("%w: reply line longer than %d bytes", ErrProtocol, s.r.Size())
	}
	if err != nil {
		return "", shortIfEOF(err)
	}
	return strings.TrimRight(string(b), "\r\n"), nil
}

// bulkHeader reads SYNC's answer up to the payload: the newlines the server sends while it
// prepares the snapshot, then "$<length>" or "$EOF:<40-byte mark>". It returns the length,
// or the mark of the diskless form.
func (s *session) bulkHeader() (int64, []byte, error) {
	for {
		line, err := s.line()
		if err != nil {
			return 0, nil, err
		}
		switch {
		case line == "":
			continue // keep-alive while the server forks and writes
		case strings.HasPrefix(line, "-"):
			return 0, nil, &ReplyError{Command: "SYNC", Reply: line[1:]}
		case strings.HasPrefix(line, "$EOF:"):
			mark := []byte(line[len("$EOF:"):])
			if len(mark) != eofMarkSize {
				return 0, nil, fmt.Errorf("%w: EOF mark of %d bytes", ErrProtocol, len(mark))
			}
			return 0, mark, nil
		case strings.HasPrefix(line, "$"):
			n, err := strconv.ParseInt(line[1:], 10, 64)
			if err != nil || n < 0 {
				return 0, nil, fmt.Errorf("%w: bulk header %q", ErrProtocol, clip(line))
			}
			return n, nil, nil
		}
		return 0, nil, fmt.Errorf("%w: SYNC answered %q", ErrProtocol, clip(line))
	}
}

// eofMarkSize is the length of the diskless form's end mark (RDB_EOF_MARK_SIZE).
const eofMarkSize = 40

// copyN copies exactly n payload bytes.
func (s *session) copyN(w io.Writer, n int64, buf []byte) error {
	for n > 0 {
		_ = s.conn.SetReadDeadline(time.Now().Add(s.idle))
		k, err := s.r.Read(buf[:min(int64(len(buf)), n)])
		if k > 0 {
			if _, werr := w.Write(buf[:k]); werr != nil {
				return werr
			}
			n -= int64(k)
		}
		if err != nil && n > 0 {
			return fmt.Errorf("%w: %d bytes missing: %v", ErrShortStream, n, err)
		}
	}
	return nil
}

// copyUntilMark copies the diskless form's payload: everything up to the end mark, which
// is not written. The last eofMarkSize bytes read are held back until more arrive; the
// payload is complete when they equal the mark (the server sends nothing after it, as a
// replica's own loader relies on).
func (s *session) copyUntilMark(w io.Writer, mark, buf []byte) error {
	var tail [eofMarkSize]byte // the last bytes read, not yet written
	held := 0
	var join [2 * eofMarkSize]byte
	for {
		_ = s.conn.SetReadDeadline(time.Now().Add(s.idle))
		k, err := s.r.Read(buf)
		if k >= eofMarkSize {
			if _, werr := w.Write(tail[:held]); werr != nil {
				return werr
			}
			if _, werr := w.Write(buf[:k-eofMarkSize]); werr != nil {
				return werr
			}
			copy(tail[:], buf[k-eofMarkSize:k])
			held = eofMarkSize
		} else if k > 0 {
			n := copy(join[:], tail[:held])
			n += copy(join[n:], buf[:k])
			if over := n - eofMarkSize; over > 0 {
				if _, werr := w.Write(join[:over]); werr != nil {
					return werr
				}
				held = copy(tail[:], join[over:n])
			} else {
				held = copy(tail[:], join[:n])
			}
		}
		if held == eofMarkSize && bytes.Equal(tail[:], mark) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%w: no end mark: %v", ErrShortStream, err)
		}
	}
}

func shortIfEOF(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%w: connection closed", ErrShortStream)
	}
	return err
}

func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}

// countingWriter counts what reached w; after a write error it writes nothing more.
type countingWriter struct {
	w    io.Writer
	n    int64
	werr error
}

func (c *countingWriter) Write(p []byte) (int, error) {
	if c.werr != nil {
		return 0, c.werr
	}
	k, err := c.w.Write(p)
	c.n += int64(k)
	if err != nil {
		c.werr = err
	}
	return k, err
}
