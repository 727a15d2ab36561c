// Command bench compares valkeyops with valkey-cli on identical fresh Valkey containers and
// prints the figures issue 3 asks for:
//
//	bootstrap: ours=<s>s valkey-cli=<s>s ratio=<ours/valkey-cli>
//	rebalance: ours=<keys/s> valkey-cli=<keys/s> ratio=<ours/valkey-cli>
//	rebalance-9.1-atomic: ours=<keys/s> valkey-cli=<keys/s> ratio=<ours/valkey-cli> (...)
//
// Both sides are timed to the same end condition by the same poller: every node reports
// cluster_state:ok, all slots are assigned and replicas are linked (valkeyops.Health); for the
// rebalance also the even 4-shard slot layout and every key readable. Needs Docker, the local
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
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/gomomento/valkey-operator/integration/harness"
	"github.com/gomomento/valkey-operator/internal/loadgen"
	"github.com/gomomento/valkey-operator/internal/poll"
	"github.com/gomomento/valkey-operator/valkeyops"
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
	for i := 0; i < *rounds; i++ {
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
	mo, mc := median(ours), median(cli)
	fmt.Printf("bootstrap: ours=%.3fs valkey-cli=%.3fs ratio=%.3f\n", mo, mc, mo/mc)
	if *onlyBoot {
		return nil
	}

	o, err := rebalance(ctx, harness.Image(), ourRebalance)
	if err != nil {
		return fmt.Errorf("rebalance ours: %w", err)
	}
	c, err := rebalance(ctx, harness.Image(), cliRebalance(""))
	if err != nil {
		return fmt.Errorf("rebalance valkey-cli: %w", err)
	}
	fmt.Printf("rebalance: ours=%.0f valkey-cli=%.0f ratio=%.2f\n", o, c, o/c)

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
	o9, err := rebalance(ctx, harness.Image9(), ourRebalance)
	if err != nil {
		return fmt.Errorf("rebalance 9.1 ours: %w", err)
	}
	c9, err := rebalance(ctx, harness.Image9(), cliRebalance(atomicFlag))
	if err != nil {
		return fmt.Errorf("rebalance 9.1 valkey-cli: %w", err)
	}
	fmt.Printf("rebalance-9.1-atomic: ours=%.0f valkey-cli=%.0f ratio=%.2f (%s)\n", o9, c9, o9/c9, flagNote)
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
	user, pw := valkeyops.ReplicationLogin(operatorPassword)
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
	nodes []valkeyops.Node
	image string
}

func newCluster(ctx context.Context, image string, shards, perShard int) (*cluster, error) {
	// masteruser/masterauth on the command line so valkey-cli's replicas can authenticate
	// too (our Bootstrap sets them itself); identical for both sides.
	env, err := harness.New(ctx, harness.Config{Image: image,
		ACL:  valkeyops.ACLSpec{DefaultPassword: defaultPassword, OperatorPassword: operatorPassword},
		Args: replicationLogin()})
	if err != nil {
		return nil, err
	}
	live.Store(env, true)
	nodes, err := env.StartNodes(ctx, shards, perShard)
	if err != nil {
		env.Close(ctx)
		return nil, err
	}
	opts := valkeyops.Options{Credentials: valkeyops.Credentials{Username: valkeyops.OperatorUser, Password: operatorPassword}}
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

func (c *cluster) close() {
	live.Delete(c.env)
	c.admin.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_ = c.env.Close(ctx)
}

// waitHealthy is the common poller: Health empty (cluster_state ok everywhere, all slots
// assigned, every node knows every node, replicas linked), plus extra when given.
func (c *cluster) waitHealthy(ctx context.Context, nodes []valkeyops.Node, shards int, extra func(*valkeyops.Snapshot) bool) error {
	return poll.Until(ctx, 10*time.Millisecond, 5*time.Minute, "healthy", func(ctx context.Context) (bool, string, error) {
		snap, err := c.admin.Observe(ctx, nodes)
		if err != nil {
			return false, "", err
		}
		reasons := valkeyops.Health(snap, shards, 1)
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
	return append([]string{"--no-auth-warning", "--user", valkeyops.OperatorUser, "--pass", operatorPassword}, args...)
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
	if out, err := exec.CommandContext(ctx, "valkey-cli", cliArgs(args...)...).CombinedOutput(); err != nil {
		return 0, fmt.Errorf("valkey-cli --cluster create: %v: %s", err, out)
	}
	if err := c.waitHealthy(ctx, c.nodes, 3, nil); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

type rebalancer func(ctx context.Context, c *cluster, all []valkeyops.Node) error

func ourRebalance(ctx context.Context, c *cluster, all []valkeyops.Node) error {
	_, err := c.admin.Rebalance(ctx, all, nil)
	return err
}

// cliRebalance runs valkey-cli --cluster rebalance --cluster-use-empty-primaries from the
// host for 8.x and from a container of the cluster's image otherwise (the 9.1 client).
func cliRebalance(extraFlag string) rebalancer {
	return func(ctx context.Context, c *cluster, all []valkeyops.Node) error {
		args := cliArgs("--cluster", "rebalance", all[0].Addr, "--cluster-use-empty-primaries")
		if extraFlag != "" {
			args = append(args, extraFlag)
		}
		var cmd *exec.Cmd
		if c.image == harness.Image() {
			cmd = exec.CommandContext(ctx, "valkey-cli", args...)
		} else {
			cmd = exec.CommandContext(ctx, "docker", append([]string{"run", "--rm", "--network", c.env.Network.Name, c.image, "valkey-cli"}, args...)...)
		}
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("valkey-cli --cluster rebalance: %v: %s", err, lastLines(string(out), 5))
		}
		return nil
	}
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}

func cliHasAtomic(image string) bool {
	out, _ := exec.Command("docker", "run", "--rm", image, "valkey-cli", "--cluster", "help").CombinedOutput()
	return strings.Contains(string(out), "atomic")
}

// rebalance forms 3x1 with our Bootstrap, writes the keys, joins a fourth shard (primary +
// replica, not timed) and then times run until the 4-shard layout is reached and every key is
// readable. It returns keys moved per second (keys that ended on the new primary).
func rebalance(ctx context.Context, image string, run rebalancer) (float64, error) {
	c, err := newCluster(ctx, image, 3, 2)
	if err != nil {
		return 0, err
	}
	defer c.close()
	if err := c.admin.Bootstrap(ctx, c.nodes, 3); err != nil {
		return 0, err
	}
	if err := c.waitHealthy(ctx, c.nodes, 3, nil); err != nil {
		return 0, err
	}
	client, err := dataClient(c.nodes)
	if err != nil {
		return 0, err
	}
	defer client.Close()
	t0 := time.Now()
	if err := loadgen.Fill(ctx, client, "k:", *keys, 5000, value); err != nil {
		return 0, err
	}
	logf("%s: wrote %d keys in %s", image, *keys, time.Since(t0).Round(time.Millisecond))
	added, err := c.env.StartNodes(ctx, 1, 2)
	if err != nil {
		return 0, err
	}
	for i := range added {
		added[i].Shard = 3
	}
	all := append(append([]valkeyops.Node(nil), c.nodes...), added...)
	if err := c.admin.Bootstrap(ctx, all, 4); err != nil {
		return 0, err
	}
	if err := c.waitHealthy(ctx, all, 3, nil); err != nil {
		return 0, err
	}

	start := time.Now()
	if err := run(ctx, c, all); err != nil {
		return 0, err
	}
	even := func(s *valkeyops.Snapshot) bool {
		ps := 0
		for _, p := range s.Primaries() {
			n := valkeyops.CountSlots(p.Slots)
			if n < valkeyops.SlotCount/4-valkeyops.SlotCount/100 || n > valkeyops.SlotCount/4+valkeyops.SlotCount/100 {
				return false
			}
			ps++
		}
		return ps == 4
	}
	if err := c.waitHealthy(ctx, all, 4, even); err != nil {
		return 0, err
	}
	if err := verify(ctx, client, *keys); err != nil {
		return 0, err
	}
	elapsed := time.Since(start)
	snap, err := c.admin.Observe(ctx, all)
	if err != nil {
		return 0, err
	}
	var moved int64
	for _, n := range added {
		if st := snap.ByName(n.Name); st.Role == valkeyops.RolePrimary {
			moved, err = dbsize(ctx, n)
			if err != nil {
				return 0, err
			}
		}
	}
	logf("%s: moved %d keys in %s", image, moved, elapsed.Round(time.Millisecond))
	return float64(moved) / elapsed.Seconds(), nil
}

func dataClient(nodes []valkeyops.Node) (valkey.Client, error) {
	o := valkey.ClientOption{Password: defaultPassword, DisableCache: true}
	for _, n := range nodes {
		o.InitAddress = append(o.InitAddress, n.Addr)
	}
	return valkey.NewClient(o)
}

func dbsize(ctx context.Context, n valkeyops.Node) (int64, error) {
	c, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{n.Addr}, Password: defaultPassword, ForceSingleClient: true, DisableCache: true})
	if err != nil {
		return 0, err
	}
	defer c.Close()
	return c.Do(ctx, c.B().Dbsize().Build()).AsInt64()
}

// value is the value rebalance fills and verify expects under key k:<i>.
func value(i int) string { return "value-" + strconv.Itoa(i) }

func verify(ctx context.Context, c valkey.Client, n int) error {
	const batch = 5000
	for i := 0; i < n; i += batch {
		cmds := make(valkey.Commands, 0, batch)
		for j := i; j < min(n, i+batch); j++ {
			cmds = append(cmds, c.B().Get().Key("k:"+strconv.Itoa(j)).Build())
		}
		for j, r := range c.DoMulti(ctx, cmds...) {
			v, err := r.ToString()
			if err != nil || v != value(i+j) {
				return fmt.Errorf("key k:%d unreadable after rebalance: %q %v", i+j, v, err)
			}
		}
	}
	return nil
}
