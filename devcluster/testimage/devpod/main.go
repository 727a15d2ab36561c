// Command devpod is the process inside the dev cluster's test image: a tiny
// static server the provider tests can query over TCP from the host, so they
// check env, args and mounted files as the container itself sees them.
//
// Protocol, one request line per connection: "ENV NAME", "ARGS", "CAT PATH",
// "ID" (uid:gid), "PUT PATH TEXT" (writes a file, answers OK), "FILL PATH MIB"
// (writes MIB MiB of zeros and syncs, answers OK or the error), "DF PATH"
// (the filesystem's total and available bytes), "GET URL" (an HTTP GET from inside the pod:
// the body when the answer is 200 OK, else "ERR" and the status). "devpod cat PATH" prints a
// file (for exec probes/tests). For init containers: "devpod append PATH TEXT
// [CODE]" appends the line TEXT to PATH, says so, and exits with CODE (0 by
// default); "devpod fail-once PATH" exits 1 the first time (creating PATH)
// and 0 once PATH exists; "devpod sleep SECONDS" sleeps and exits 0,
// ignoring SIGTERM, so that only the SIGKILL at the end of a grace period
// stops it.
package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) > 2 && os.Args[1] == "cat" {
		b, err := os.ReadFile(os.Args[2])
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Stdout.Write(b)
		return
	}
	if len(os.Args) > 3 && os.Args[1] == "append" {
		os.Exit(appendLine(os.Args[2], os.Args[3], os.Args[4:]))
	}
	if len(os.Args) > 2 && os.Args[1] == "fail-once" {
		if _, err := os.Stat(os.Args[2]); err == nil {
			fmt.Println("second run: done")
			return
		}
		os.Exit(appendLine(os.Args[2], "failed once", []string{"1"}))
	}
	if len(os.Args) > 2 && os.Args[1] == "sleep" {
		var s int
		fmt.Sscan(os.Args[2], &s)
		signal.Ignore(syscall.SIGTERM) // Go would exit on it, even as PID 1
		fmt.Printf("devpod sleeping %ds, ignoring SIGTERM\n", s)
		time.Sleep(time.Duration(s) * time.Second)
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "exit" {
		code := 3
		if len(os.Args) > 2 {
			fmt.Sscan(os.Args[2], &code)
		}
		os.Exit(code)
	}
	// Only --port matters; other arguments (e.g. Valkey-like flags) are
	// echoed back by ARGS.
	port := "8080"
	for i, a := range os.Args {
		if a == "--port" && i+1 < len(os.Args) {
			port = os.Args[i+1]
		}
	}
	l, err := net.Listen("tcp", ":"+port)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("devpod listening on %s, args %q\n", port, os.Args)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		s := <-sig
		fmt.Printf("devpod got %v, exiting\n", s)
		os.Exit(0)
	}()
	for {
		c, err := l.Accept()
		if err != nil {
			continue
		}
		go handle(c)
	}
}

func handle(c net.Conn) {
	defer c.Close()
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return
	}
	cmd, arg, _ := strings.Cut(strings.TrimSpace(line), " ")
	switch cmd {
	case "ENV":
		fmt.Fprint(c, os.Getenv(arg))
	case "ARGS":
		fmt.Fprint(c, strings.Join(os.Args, " "))
	case "CAT":
		b, err := os.ReadFile(arg)
		if err != nil {
			fmt.Fprint(c, "ERR ", err)
			return
		}
		c.Write(b)
	case "ID":
		fmt.Fprintf(c, "%d:%d", os.Getuid(), os.Getgid())
	case "PUT":
		path, text, _ := strings.Cut(arg, " ")
		answer(c, os.WriteFile(path, []byte(text), 0o644))
	case "FILL":
		path, n, _ := strings.Cut(arg, " ")
		var mib int
		fmt.Sscan(n, &mib)
		answer(c, fill(path, mib))
	case "DF":
		var fs syscall.Statfs_t
		if err := syscall.Statfs(arg, &fs); err != nil {
			answer(c, err)
			return
		}
		fmt.Fprintf(c, "%d %d", fs.Blocks*uint64(fs.Bsize), fs.Bavail*uint64(fs.Bsize))
	case "GET":
		get(c, arg)
	}
}

// get fetches an http:// URL with a plain HTTP/1.0 request (the server closes the
// connection after the body) and copies a 200 answer's body to c. It speaks HTTP by hand
// because net/http would more than double the binary every test pod starts.
func get(c net.Conn, raw string) {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "http" {
		answer(c, fmt.Errorf("not an http URL: %q", raw))
		return
	}
	conn, err := net.DialTimeout("tcp", u.Host, 5*time.Second)
	if err != nil {
		answer(c, err)
		return
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := fmt.Fprintf(conn, "GET %s HTTP/1.0\r\nHost: %s\r\n\r\n", u.RequestURI(), u.Host); err != nil {
		answer(c, err)
		return
	}
	r := bufio.NewReader(conn)
	status, err := r.ReadString('\n')
	if err != nil {
		answer(c, err)
		return
	}
	for { // headers, up to the blank line
		line, err := r.ReadString('\n')
		if err != nil {
			answer(c, err)
			return
		}
		if strings.TrimSpace(line) == "" {
			break
		}
	}
	// "HTTP/1.1 200 OK" -> "200 OK"
	_, code, _ := strings.Cut(strings.TrimSpace(status), " ")
	if !strings.HasPrefix(code, "200 ") {
		fmt.Fprint(c, "ERR ", code)
		return
	}
	_, _ = io.Copy(c, r)
}

func answer(c net.Conn, err error) {
	if err != nil {
		fmt.Fprint(c, "ERR ", err)
		return
	}
	fmt.Fprint(c, "OK")
}

// fill writes mib MiB to path and syncs it, so a full filesystem shows as an error here
// rather than later.
func fill(path string, mib int) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	chunk := make([]byte, 1<<20)
	for range mib {
		if _, err := f.Write(chunk); err != nil {
			f.Close()
			return err
		}
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// appendLine appends text and a newline to path and returns the exit code to
// end with: code[0] when given, 1 when the write failed.
func appendLine(path, text string, code []string) int {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err == nil {
		_, err = fmt.Fprintln(f, text)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("appended %q to %s\n", text, path)
	exit := 0
	if len(code) > 0 {
		fmt.Sscan(code[0], &exit)
	}
	return exit
}
