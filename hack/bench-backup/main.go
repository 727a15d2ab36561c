// Command bench-backup measures issue #25's backup and restore on a private dev cluster
// (devtest) with the operator running on the host, against the dev cluster's object store
// (SeaweedFS), and prints for each Valkey version:
//
//	backup: keys=<n> bytes=<b> seconds=<s> mb-per-s=<r> baseline-s=<x>
//	backup: ratio=<s/x> (target <= 1.5)
//	restore: keys=<n> seconds=<s> baseline-s=<x>
//	restore: ratio=<s/x> (target < 1)
//
// backup: a 3x1 cluster filled with -keys keys (pipelined SETs), then a ValkeyBackup timed
// from kubectl apply to Completed. Its baseline on the same data: `valkey-cli --rdb` of every
// shard's replica (in parallel, the operator user's password in REDISCLI_AUTH) and then an
// upload of the files to the same bucket with rclone (configured through RCLONE_CONFIG_*
// environment variables), timed together.
//
// restore: a new 3x1 cluster with spec.restoreFrom the backup, timed from kubectl apply to
// Active; then a digest (SHA-256 over every key and value, sorted by key) of the restored
// cluster must equal the source's. Its baseline: an empty 3x1 cluster (formed untimed), into
// which the same keys are re-written through a pipelined valkey-go cluster client.
//
// A benchmark reports: a missed target does not fail the run; a wrong restore does.
// Progress goes to stderr, the result lines to stdout. Everything started is removed at the
// end, on error and on SIGINT/SIGTERM.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gomomento/valkey-operator/devcluster"
)

var (
	keys         = flag.Int("keys", 1_000_000, "keys written to the cluster that is backed up")
	valueBytes   = flag.Int("value-bytes", 16, "size of each value")
	versions     = flag.String("versions", "8.0,9.1", "comma-separated Valkey versions (ValkeyImage valkey-<version> of examples/valkeyimage.yaml)")
	totalTimeout = flag.Duration("timeout", 40*time.Minute, "bound on the whole run")
	stepTimeout  = flag.Duration("step-timeout", 10*time.Minute, "bound on each backup, restore and baseline")
	keepLogs     = flag.Bool("keep-logs", false, "keep the operator's log folder even on success")
	restoreImage = flag.String("restore-image", "valkey-operator:dev", "the image restoring pods run (the operator's, make image)")
)

var began = time.Now()

var runFailed bool

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench-backup %6.1fs: %s\n", time.Since(began).Seconds(), fmt.Sprintf(format, args...))
}

var cleanups struct {
	mu   sync.Mutex
	fns  []func()
	once sync.Once
}

func atExit(fn func()) {
	cleanups.mu.Lock()
	defer cleanups.mu.Unlock()
	cleanups.fns = append(cleanups.fns, fn)
}

func cleanupAll() {
	cleanups.once.Do(func() {
		cleanups.mu.Lock()
		fns := cleanups.fns
		cleanups.mu.Unlock()
		for i := len(fns) - 1; i >= 0; i-- {
			fns[i]()
		}
	})
}

func main() {
	flag.Parse()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		s := <-sig
		logf("%v: cleaning up", s)
		runFailed = true
		cleanupAll()
		os.Exit(130)
	}()
	err := run()
	runFailed = err != nil
	cleanupAll()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-backup:", err)
		os.Exit(1)
	}
	logf("done")
}

func run() error {
	ctx, cancel := context.WithTimeout(context.Background(), *totalTimeout)
	defer cancel()
	vs, err := preflight()
	if err != nil {
		return err
	}
	b, err := startBench(ctx)
	if err != nil {
		return err
	}
	for _, v := range vs {
		if err := b.measure(ctx, v); err != nil {
			return b.explain(fmt.Errorf("valkey %s: %w", v, err))
		}
	}
	return nil
}

// preflight names what is missing instead of failing obscurely later; it returns the versions.
func preflight() ([]string, error) {
	for _, tool := range []string{"kubectl", "valkey-cli", "rclone", "docker", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("%s not on PATH (make prerequisites)", tool)
		}
	}
	root, err := devcluster.FindRoot()
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(root + "/bin/controlplane/kube-apiserver"); err != nil {
		return nil, fmt.Errorf("bin/controlplane not built (make controlplane): %w", err)
	}
	if *keys < 1 {
		return nil, errors.New("-keys must be positive")
	}
	var vs []string
	for _, v := range strings.Split(*versions, ",") {
		if v = strings.TrimSpace(v); v != "" {
			vs = append(vs, v)
		}
	}
	if len(vs) == 0 {
		return nil, errors.New("-versions names no version")
	}
	return vs, nil
}
