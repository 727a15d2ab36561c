// Command bench-backup carries issue #25's full-size proof and measures its backup and
// restore, on a private dev cluster (devtest) with the operator running on the host and the
// dev cluster's object store (SeaweedFS) as the target. For each Valkey version it prints
//
//	== valkey <version> tls=<on|off> keys=<n> ==
//	backup: keys=<n> bytes=<b> seconds=<s> mb-per-s=<r> baseline-s=<x>
//	backup: ratio=<s/x> (target <= 1.5)
//	restore: keys=<n> seconds=<s> baseline-s=<x>
//	restore: ratio=<s/x> (target < 1)
//	restore-reshaped: shards=<2|4> keys=<n> seconds=<s> balanced-s=<b> writer-keys=<w>
//
// and once, after the versions (-schedule-runs > 0),
//
//	schedule: runs=<n> kept=<keep> objects-ok=true
//
// backup: a 3x1 cluster filled with -keys keys k:<i> (pipelined SETs); a writer (a cluster
// client writing w:<i> one at a time, recording when each write was acknowledged) runs from
// before the ValkeyBackup is applied until after it is Completed. The backup is timed from
// kubectl apply to Completed, with the operator started with --backup-transfers=3 (its
// default is 2) so that it streams the 3 shards at once, as the baseline does. The baseline,
// on the same data: `valkey-cli --rdb` of the 3 replicas at once (the operator user's password
// in REDISCLI_AUTH), then an upload of the files to the same bucket with rclone (configured
// through RCLONE_CONFIG_* environment variables), timed together. The operator's peak
// resident memory (VmHWM) after each backup goes to stderr: a transfer streams, so it should
// stay flat whatever the data size.
//
// restore: the writer stopped, the source ValkeyCluster deleted (its pods gone), then a new
// 3x1 cluster with spec.restoreFrom the backup, timed from kubectl apply to Active. It must
// hold the source's k: keys byte for byte (a SHA-256 over every k: key and value, sorted by
// key, equal to the source's taken before the writer started), every writer key acknowledged
// before the backup's status.startedAt (whole seconds: strictly before that second), and
// serve exactly the slot ranges status.shards[].slots recorded. Then the same into 2 and 4
// shards, timed to Active (seconds) and to the slots balanced (balanced-s: a reshaped restore
// can report Active before its slots have moved), whose primaries must cover all 16384 slots,
// each within one of 16384/shards; their keys are checked once balanced. Each restored cluster
// is deleted before the next one is made.
//
// The restore baseline's clock runs over the same span as the restore's: from kubectl apply
// of an empty 3x1 cluster, through its forming to Active, to the end of re-writing every k:
// key through a pipelined valkey-go cluster client. A restore includes forming its cluster
// (pods, servers, slots); a baseline that left forming out would compare a whole restore
// with half a re-write. stderr logs the two parts.
//
// TLS: for the versions of -tls-versions, every cluster of that version serves TLS only
// (spec.tls naming a Secret issued by internal/testcerts), the clients verify it with the CA
// and valkey-cli gets --tls --cacert. The servers accept client certificates without
// demanding them (tls-auth-clients optional), so none is presented.
//
// schedule: a small 3x1 cluster of the last version with spec.backup every minute, keep 2;
// once -schedule-runs scheduled ValkeyBackups have completed, exactly keep remain Completed,
// each with its shard objects and manifest.json in the bucket, and the pruned ones' objects
// are gone.
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
	tlsVersions  = flag.String("tls-versions", "9.1", "comma-separated versions whose clusters run with TLS on")
	scheduleRuns = flag.Int("schedule-runs", 4, "scheduled runs (every minute, keep 2) to wait for before checking what is kept; 0 skips")
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
	tlsOn := map[string]bool{}
	for _, v := range splitList(*tlsVersions) {
		tlsOn[v] = true
	}
	for _, v := range vs {
		if err := b.measure(ctx, v, tlsOn[v]); err != nil {
			return b.explain(fmt.Errorf("valkey %s: %w", v, err))
		}
	}
	if *scheduleRuns > 0 {
		last := vs[len(vs)-1]
		if err := b.checkSchedule(ctx, last, tlsOn[last]); err != nil {
			return b.explain(fmt.Errorf("schedule: %w", err))
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
	if *scheduleRuns < 0 {
		return nil, errors.New("-schedule-runs must not be negative")
	}
	vs := splitList(*versions)
	if len(vs) == 0 {
		return nil, errors.New("-versions names no version")
	}
	return vs, nil
}

// splitList is the non-empty, trimmed items of a comma-separated flag.
func splitList(s string) []string {
	var out []string
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}
