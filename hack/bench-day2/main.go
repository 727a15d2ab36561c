// Command bench-day2 measures what an Active cluster does by itself, on a private dev cluster
// (devtest) with the operator binary running on the host, and prints exactly these lines:
//
//	recovery: kind=pod-deleted promotion-s=<p> writes-resumed-s=<x> topology-s=<y> lost=<n>
//	recovery: kind=crash promotion-s=<p> writes-resumed-s=<x> writes-resumed-default-client-s=<d> topology-s=<y> lost-acked=<n> lost-replica-acked=<m>
//	scaleout: ours=<keys/s> valkey-cli=<keys/s> valkey-cli-matched=<keys/s> ratio=<ours/valkey-cli> ratio-matched=<ours/valkey-cli-matched> ours-from-patch=<keys/s>
//	roll: seconds-per-shard=<x> longest-pause-s=<y> lost=<n>
//	drain: nodes=<n> data-mib=<m> total-s=<x> longest-drain-s=<y> longest-pause-s=<z> lost=<l>
//	zone-loss: primaries-lost=<n> writes-resumed-s=<x> lost-replica-acked=<n>
//	outage: shards=3 replicas=1 recovered-s=<x> converged-s=<y> warning=<message>
//	durable: kind=crash-in-place writes-resumed-s=<x> lost-replica-acked=<n> lost-acked=<m> restarted-s=<y> same-nodes=<bool>
//	durable: kind=full-restart recovered-s=<x> lost=<n> keys=<k> same-nodes=<bool>
//
// recovery: a 3x1 cluster with three writers running through cluster-mode valkey-go clients:
// internal/loadgen over the whole key space (its acknowledged writes are read back afterwards:
// lost), and two slot writers whose keys all carry one hash tag in the slots of the primary
// that is then lost: writes-resumed is an outage, from the writer's last acknowledged write
// before its first failure to its first acknowledged write after its last failure (see
// recovery). writes-resumed-s is the writer whose client drops a connection that has not
// answered for 2 s, so after a crash it looks for the new primary soon after it is promoted;
// writes-resumed-default-client-s the one whose client has valkey-go's defaults (10 s).
// promotion-s runs from the delete or kill until the lost primary's replica reports itself
// primary (INFO replication). pod-deleted is `kubectl delete pod`; crash is a SIGKILL of the pod's
// container (docker kill), with loadgen waiting for one replica per write (WAIT 1):
// lost-replica-acked counts the lost writes a replica confirmed, lost-acked every lost write
// the primary acknowledged (Valkey replicates asynchronously). topology-s runs from the delete
// or kill until the lost ValkeyNode is retired, all 6 ValkeyNodes are Active with pod IPs and
// `valkey-cli --cluster check` finds all 16384 slots covered and every node agreeing.
//
// scaleout: a 3x1 cluster filled with -keys keys (pipelined SETs, -value-bytes values), then
// `kubectl patch` shards 3->4, until converged as above with 8 nodes and every primary within
// 1% of 4096 slots. ours = keys on the new shard's primary (DBSIZE) / seconds from the start
// of the operator's Rebalance action (its log line; planned once the join has returned on a
// healthy cluster) to converged; ours-from-patch the same keys / seconds from the patch, which adds creating, scheduling,
// starting and joining the new shard's pods.
// valkey-cli gets the same situation without Kubernetes, twice (at its default
// --cluster-pipeline of 10 keys per MIGRATE, and matched at valkeyops.DefaultMigrateBatch,
// ours' keys per MIGRATE): plain Valkey containers
// (integration/harness) of the same image, formed 3x(1+1) with valkeyops, the same keys,
// an empty fourth shard (primary + replica) joined, the same CPU/memory limits and
// maxmemory settings as the operator's pods; then `valkey-cli --cluster rebalance
// --cluster-use-empty-masters` timed until it exits and the servers report the even 4-shard
// layout. valkey-cli's clock starts with its fourth shard joined and every server passing
// the health check (waitHealthy), as the operator's join leaves it before its Rebalance, so
// ours= is the like-for-like figure; stderr logs when ours' shard joined, its Rebalance
// began and its first slot moved.
// Either side's primaries holding other than -keys keys after the fill or the move fails the
// run.
//
// roll: a 3x1 cluster of a ValkeyConfig of its own, with loadgen writing; an edit to that
// config (maxmemory-policy) replaces every node, shard by shard, replacement first, failing
// each primary over gracefully. seconds-per-shard is the time from the edit until every old
// node is gone and the cluster converged as above, over 3; longest-pause-s is loadgen's
// longest gap between two acknowledged writes over the roll; lost counts acknowledged writes
// not read back.
//
// drain, zone-loss and outage: node maintenance, the loss of a zone and of every pod at once
// (see drain.go, zoneloss.go, outage.go); -disruption-only runs just these three.
//
// durable: a 3x1 cluster with an AOF on a volume per node loses a primary's server, then
// every pod at once, and comes back in place each time (see durable.go).
//
// With -fleet it runs the fleet scenario instead (see fleet.go; make bench-fleet).
//
// Progress goes to stderr, the result lines to stdout. Everything started (dev cluster,
// operator process, containers) is removed at the end, on error and on SIGINT/SIGTERM.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/gomomento/valkey-operator/devcluster"
	"github.com/gomomento/valkey-operator/integration/harness"
	"github.com/gomomento/valkey-operator/valkeyops"
)

var (
	keys          = flag.Int("keys", 1_000_000, "keys written before the scale-out (both sides)")
	valueBytes    = flag.Int("value-bytes", 16, "size of each value written before the scale-out")
	totalTimeout  = flag.Duration("timeout", 40*time.Minute, "bound on the whole run")
	healTimeout   = flag.Duration("heal-timeout", 3*time.Minute, "bound on each recovery's convergence")
	scaleTimeout  = flag.Duration("scale-timeout", 6*time.Minute, "bound on each side's scale-out")
	pace          = flag.Duration("pace", time.Millisecond, "pause between two writes of each writer")
	skipRecovery  = flag.Bool("skip-recovery", false, "skip the two recovery measurements")
	skipScaleout  = flag.Bool("skip-scaleout", false, "skip the scale-out comparison")
	skipRoll      = flag.Bool("skip-roll", false, "skip the rolling replacement measurement")
	rollTimeout   = flag.Duration("roll-timeout", 6*time.Minute, "bound on the rolling replacement")
	keepLogs      = flag.Bool("keep-logs", false, "keep the operator's log folder even on success")
	operatorDebug = flag.Bool("operator-debug", false, "run the operator with -zap-log-level=debug (valkeyops steps in its log)")
	heapProfile   = flag.String("operator-heap-profile", "", "fleet: serve the operator's pprof on loopback and write its heap profile at the end of the idle window to this file")
)

var began = time.Now()

// runFailed keeps the operator's log folder (read by a cleanup).
var runFailed bool

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench-day2 %6.1fs: %s\n", time.Since(began).Seconds(), fmt.Sprintf(format, args...))
}

// cleanups run last-registered first, once, on the normal path, on error and on a signal.
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
		fmt.Fprintln(os.Stderr, "bench-day2:", err)
		os.Exit(1)
	}
	logf("done")
}

func run() error {
	ctx, cancel := context.WithTimeout(context.Background(), *totalTimeout)
	defer cancel()
	if err := preflight(); err != nil {
		return err
	}
	b, err := startBench(ctx)
	if err != nil {
		return err
	}
	if *fleetMode {
		if err := b.fleet(ctx); err != nil {
			return b.explain(fmt.Errorf("fleet: %w", err))
		}
		return nil
	}
	if *disruptionOnly {
		if err := b.disruptions(ctx); err != nil {
			return b.explain(err)
		}
		return nil
	}
	if !*skipRecovery {
		if err := b.recoveries(ctx); err != nil {
			return b.explain(err)
		}
	}
	if !*skipRoll {
		if err := b.roll(ctx); err != nil {
			return b.explain(fmt.Errorf("roll: %w", err))
		}
	}
	if err := b.disruptions(ctx); err != nil {
		return b.explain(err)
	}
	if !*skipDurable {
		if err := b.durable(ctx); err != nil {
			return b.explain(fmt.Errorf("durable: %w", err))
		}
	}
	if *skipScaleout {
		return nil
	}
	ours, limits, err := b.scaleoutOurs(ctx)
	if err != nil {
		return b.explain(err)
	}
	cli, err := scaleoutCLI(ctx, limits, 0)
	if err != nil {
		return fmt.Errorf("valkey-cli side: %w", err)
	}
	matched, err := scaleoutCLI(ctx, limits, valkeyops.DefaultMigrateBatch)
	if err != nil {
		return fmt.Errorf("valkey-cli side, --cluster-pipeline %d: %w", valkeyops.DefaultMigrateBatch, err)
	}
	fmt.Printf("scaleout: ours=%.0f valkey-cli=%.0f valkey-cli-matched=%.0f ratio=%.2f ratio-matched=%.2f ours-from-patch=%.0f\n",
		ours.fromMoveStart, cli, matched, ours.fromMoveStart/cli, ours.fromMoveStart/matched, ours.fromPatch)
	return nil
}

// preflight names what is missing instead of failing obscurely later.
func preflight() error {
	for _, tool := range []string{"kubectl", "valkey-cli", "docker", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s not on PATH (make prerequisites)", tool)
		}
	}
	if err := harness.DockerProblem(harness.Image()); err != nil {
		return err
	}
	root, err := devcluster.FindRoot()
	if err != nil {
		return err
	}
	if _, err := os.Stat(root + "/bin/controlplane/kube-apiserver"); err != nil {
		return fmt.Errorf("bin/controlplane not built (make controlplane): %w", err)
	}
	if *keys < 1 {
		return errors.New("-keys must be positive")
	}
	return nil
}
