// Command bench compares valkeyops with valkey-cli on identical fresh Valkey containers and
// prints the figures issue 3 asks for:
//
//	bootstrap: ours=<s>s valkey-cli=<s>s ratio=<ours/valkey-cli>
//	rebalance: ours=<keys/s> valkey-cli=<keys/s> valkey-cli-matched=<keys/s> ratio=<ours/valkey-cli> ratio-matched=<ours/valkey-cli-matched>
//	rebalance-9.1-atomic: ours=<keys/s> valkey-cli=<keys/s> valkey-cli-matched=<keys/s> ratio=<ours/valkey-cli> atomic-slots=<n> migrate-slots=<n> ratio-matched=<...> (...)
//
// valkey-cli runs twice per line: at its default --cluster-pipeline (10 keys per MIGRATE) and
// "matched", at --cluster-pipeline valkeyops.DefaultMigrateBatch, the keys per MIGRATE of our
// key-by-key path. atomic-slots and migrate-slots say how our slots moved: by atomic slot
// migration (CLUSTER MIGRATESLOTS) or key by key (SETSLOT + MIGRATE).
//
// Both sides are timed to the same end condition by the same poller: every node reports
// cluster_state:ok, all slots are assigned and replicas are linked (model.Health); for the
// rebalance also the even 4-shard slot layout. After that (untimed) every key must read back
// and the primaries must hold exactly the keys written (DBSIZE), before and after each
// side's move, or the bench fails. Needs Docker, the local
// images (make valkey-image) and a host valkey-cli (hack/valkey-image/install-tools.sh).
// Progress goes to stderr, the result lines to stdout.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gomomento/valkey-operator/integration/harness"
	"github.com/gomomento/valkey-operator/internal/poll"
	"github.com/gomomento/valkey-operator/internal/valkeycli"
	"github.com/gomomento/valkey-operator/valkeyops"
	"github.com/gomomento/valkey-operator/valkeyops/model"
)

const (
	defaultPassword  = "bench-default"
	operatorPassword = "bench-operator"
)

var (
	keys       = flag.Int("keys", 1_000_000, "keys written before the scale-out")
	rounds     = flag.Int("bootstrap-rounds", 3, "bootstrap comparisons (median is printed)")
	skipAtomic = flag.Bool("skip-9", false, "skip the Valkey 9.1 atomic comparison")
	onlyBoot   = flag.Bool("bootstrap-only", false, "run only the bootstrap comparison")
	skipBoot   = flag.Bool("skip-bootstrap", false, "skip the bootstrap comparison")
	skip8      = flag.Bool("skip-8", false, "skip the Valkey 8.0 rebalance comparison")
	oursOnly   = flag.Bool("ours-only", false, "rebalance: run only our side (no valkey-cli, no ratios)")
	verbose    = flag.Bool("v", false, "log valkeyops progress")
)

func logf(format string, args ...any) { fmt.Fprintf(os.Stderr, "bench: "+format+"\n", args...) }

// live holds every Env not yet closed, so an interrupted run still removes its containers.
var live sync.Map

func main() {
	flag.Parse()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-sig
		cleanupAll()
		os.Exit(130)
	}()
	err := run()
	cleanupAll()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run() error {
	if err := harness.DockerProblem(harness.Image(), harness.Image9()); err != nil {
		return err
	}
	if _, err := exec.LookPath("valkey-cli"); err != nil {
		return fmt.Errorf("host valkey-cli missing (run hack/valkey-image/install-tools.sh): %w", err)
	}
	ctx := context.Background()

	var ours, cli []float64
	for i := 0; i < *rounds && !*skipBoot; i++ {
		o, err := bootstrapOurs(ctx, harness.Image())
		if err != nil {
			return fmt.Errorf("bootstrap ours: %w", err)
		}
		c, err := bootstrapCLI(ctx, harness.Image())
		if err != nil {
			return fmt.Errorf("bootstrap valkey-cli: %w", err)
		}
		logf("bootstrap round %d: ours=%.3fs valkey-cli=%.3fs", i+1, o.Seconds(), c.Seconds())
		ours, cli = append(ours, o.Seconds()), append(cli, c.Seconds())
	}
	if !*skipBoot {
		mo, mc := median(ours), median(cli)
		fmt.Printf("bootstrap: ours=%.3fs valkey-cli=%.3fs ratio=%.3f\n", mo, mc, mo/mc)
	}
	if *onlyBoot {
		return nil
	}

	logf("rebalance sides: ours moves %d keys per MIGRATE (valkeyops.DefaultMigrateBatch), sources in parallel; "+
		"valkey-cli at its default --cluster-pipeline (10 keys per MIGRATE) and matched at --cluster-pipeline %d; %d keys each",
		valkeyops.DefaultMigrateBatch, valkeyops.DefaultMigrateBatch, *keys)
	if !*skip8 {
		line, err := compare(ctx, harness.Image(), "")
		if err != nil {
			return err
		}
		fmt.Printf("rebalance: ours=%.0f valkey-cli=%.0f valkey-cli-matched=%.0f ratio=%.2f ratio-matched=%.2f\n",
			line.ours.rate, line.cli, line.matched, line.ours.rate/line.cli, line.ours.rate/line.matched)
	}

	if *skipAtomic {
		return nil
	}
	// valkey-cli 9.1.2 has no --cluster-use-atomic-slot-migration; its rebalance (run from a
	// container of the 9.1 image, so the 9.1 client is used) is the MIGRATE-based one.
	flagNote := "valkey-cli has no --cluster-use-atomic-slot-migration; compared with its plain rebalance"
	atomicFlag := ""
	if cliHasAtomic(harness.Image9()) {
		atomicFlag, flagNote = "--cluster-use-atomic-slot-migration", "valkey-cli with --cluster-use-atomic-slot-migration"
	}
	line, err := compare(ctx, harness.Image9(), atomicFlag)
	if err != nil {
		return fmt.Errorf("9.1: %w", err)
	}
	fmt.Printf("rebalance-9.1-atomic: ours=%.0f valkey-cli=%.0f valkey-cli-matched=%.0f ratio=%.2f atomic-slots=%d migrate-slots=%d ratio-matched=%.2f (%s)\n",
		line.ours.rate, line.cli, line.matched, line.ours.rate/line.cli, line.ours.stats.AtomicSlots, line.ours.stats.MigrateSlots,
		line.ours.rate/line.matched, flagNote)
	return nil
}

func cleanupAll() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	live.Range(func(k, _ any) bool {
		_ = k.(*harness.Env).Close(ctx)
		live.Delete(k)
		return true
	})
}

// replicationLogin is the replicas' login as the operator sets it, on the command line.
func replicationLogin() []string {
	user, pw := model.ReplicationLogin(operatorPassword)
	return []string{"--masteruser", user, "--masterauth", pw}
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[len(s)/2]
}

type cluster struct {
	env   *harness.Env
	admin *valkeyops.Admin
	nodes []model.Node
	image string
}

func newCluster(ctx context.Context, image string, shards, perShard int) (*cluster, error) {
	// masteruser/masterauth on the command line so valkey-cli's replicas can authenticate
	// too (our Bootstrap sets them itself); identical for both sides.
	acl, err := operatorACL(image)
	if err != nil {
		return nil, err
	}
	env, err := harness.New(ctx, harness.Config{Image: image, ACL: acl, Args: replicationLogin()})
	if err != nil {
		return nil, err
	}
	live.Store(env, true)
	nodes, err := env.StartNodes(ctx, shards, perShard)
	if err != nil {
		env.Close(ctx)
		return nil, err
	}
	opts := valkeyops.Options{Credentials: valkeyops.Credentials{Username: model.OperatorUser, Password: operatorPassword}}
	if *verbose {
		opts.Log = logf
	}
	admin, err := valkeyops.NewAdmin(opts)
	if err != nil {
		env.Close(ctx)
		return nil, err
	}
	// Servers refuse to report cluster_state:ok for 2 s after start; let both sides start
	// from nodes past that point.
	time.Sleep(2500 * time.Millisecond)
	return &cluster{env: env, admin: admin, nodes: nodes, image: image}, nil
}

// operatorACL is the users file the operator renders for servers of image: the default and
// operator users, and the replication user granted CLUSTER SYNCSLOTS when the release knows
// it (model.ReplicationSyncsSlots of the servers' version, as the reconciler decides).
// Without that grant every atomic migration of a 9.x server is refused by its target and
// falls back to MIGRATE.
func operatorACL(image string) (model.ACLSpec, error) {
	spec := model.ACLSpec{DefaultPassword: defaultPassword, OperatorPassword: operatorPassword}
	v, err := imageVersion(image)
	if err != nil {
		return spec, err
	}
	spec.ReplicationSyncsSlots = model.ReplicationSyncsSlots([]string{v})
	return spec, nil
}

var versions sync.Map // image -> version

// imageVersion is the release of the image's valkey-server (`valkey-server --version`'s v=).
func imageVersion(image string) (string, error) {
	if v, ok := versions.Load(image); ok {
		return v.(string), nil
	}
	out, err := exec.Command("docker", "run", "--rm", image, "valkey-server", "--version").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("valkey-server --version in %s: %v: %s", image, err, out)
	}
	for _, f := range strings.Fields(string(out)) {
		if v, ok := strings.CutPrefix(f, "v="); ok {
			versions.Store(image, v)
			logf("%s: valkey-server %s", image, v)
			return v, nil
		}
	}
	return "", fmt.Errorf("valkey-server --version in %s: no version in %q", image, out)
}

func (c *cluster) close() {
	live.Delete(c.env)
	c.admin.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_ = c.env.Close(ctx)
}

// waitHealthy is the common poller: Health empty (cluster_state ok everywhere, all slots
// assigned, every node knows every node, replicas linked), plus extra when given.
func (c *cluster) waitHealthy(ctx context.Context, nodes []model.Node, shards int, extra func(*model.Snapshot) bool) error {
	return poll.Until(ctx, 10*time.Millisecond, 5*time.Minute, "healthy", func(ctx context.Context) (bool, string, error) {
		snap, err := c.admin.Observe(ctx, nodes)
		if err != nil {
			return false, "", err
		}
		reasons := model.Health(snap, shards, 1)
		return len(reasons) == 0 && (extra == nil || extra(snap)), fmt.Sprint(reasons), nil
	})
}

func bootstrapOurs(ctx context.Context, image string) (time.Duration, error) {
	c, err := newCluster(ctx, image, 3, 2)
	if err != nil {
		return 0, err
	}
	defer c.close()
	start := time.Now()
	if err := c.admin.Bootstrap(ctx, c.nodes, 3); err != nil {
		return 0, err
	}
	if err := c.waitHealthy(ctx, c.nodes, 3, nil); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

func cliArgs(args ...string) []string {
	return append([]string{"--user", model.OperatorUser}, args...)
}

func bootstrapCLI(ctx context.Context, image string) (time.Duration, error) {
	c, err := newCluster(ctx, image, 3, 2)
	if err != nil {
		return 0, err
	}
	defer c.close()
	args := []string{"--cluster", "create"}
	for _, n := range c.nodes {
		args = append(args, n.Addr)
	}
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	start := time.Now()
	if out, err := valkeycli.Command(ctx, operatorPassword, cliArgs(args...)...).CombinedOutput(); err != nil {
		return 0, fmt.Errorf("valkey-cli --cluster create: %v: %s", err, out)
	}
	if err := c.waitHealthy(ctx, c.nodes, 3, nil); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}
