package main

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/gomomento/valkey-operator/integration/harness"
	"github.com/gomomento/valkey-operator/internal/loadgen"
	"github.com/gomomento/valkey-operator/internal/valkeycli"
	"github.com/gomomento/valkey-operator/valkeyops"
	"github.com/gomomento/valkey-operator/valkeyops/model"
)

// comparison is one rebalance line: ours, valkey-cli at its default pipeline and valkey-cli
// at ours' MIGRATE batch size (keys/s; 0 with -ours-only).
type comparison struct {
	ours         result
	cli, matched float64
}

func compare(ctx context.Context, image, cliFlag string) (comparison, error) {
	var out comparison
	var err error
	if out.ours, err = rebalance(ctx, image, ourRebalance); err != nil {
		return out, fmt.Errorf("rebalance ours: %w", err)
	}
	logf("%s ours: %.0f keys/s, %+v", image, out.ours.rate, out.ours.stats)
	if *oursOnly {
		return out, nil
	}
	r, err := rebalance(ctx, image, cliRebalance(cliFlag, 0))
	if err != nil {
		return out, fmt.Errorf("rebalance valkey-cli: %w", err)
	}
	out.cli = r.rate
	if r, err = rebalance(ctx, image, cliRebalance(cliFlag, valkeyops.DefaultMigrateBatch)); err != nil {
		return out, fmt.Errorf("rebalance valkey-cli --cluster-pipeline %d: %w", valkeyops.DefaultMigrateBatch, err)
	}
	out.matched = r.rate
	return out, nil
}

// rebalancer moves slots onto the empty fourth primary; ours says what moved how.
type rebalancer func(ctx context.Context, c *cluster, all []model.Node) (valkeyops.MoveStats, error)

func ourRebalance(ctx context.Context, c *cluster, all []model.Node) (valkeyops.MoveStats, error) {
	return c.admin.Rebalance(ctx, all, nil)
}

// cliRebalance runs valkey-cli --cluster rebalance --cluster-use-empty-primaries from the
// host for 8.x and from a container of the cluster's image otherwise (the 9.1 client), with
// --cluster-pipeline pipeline when it is above 0 (valkey-cli's default is 10 keys per MIGRATE).
func cliRebalance(extraFlag string, pipeline int) rebalancer {
	return func(ctx context.Context, c *cluster, all []model.Node) (valkeyops.MoveStats, error) {
		args := cliArgs("--cluster", "rebalance", all[0].Addr, "--cluster-use-empty-primaries")
		if extraFlag != "" {
			args = append(args, extraFlag)
		}
		if pipeline > 0 {
			args = append(args, "--cluster-pipeline", strconv.Itoa(pipeline))
		}
		var cmd *exec.Cmd
		if c.image == harness.Image() {
			cmd = valkeycli.Command(ctx, operatorPassword, args...)
		} else {
			cmd = exec.CommandContext(ctx, "docker", append([]string{"run", "--rm", "-e", valkeycli.AuthEnv, "--network", c.env.Network.Name, c.image, "valkey-cli"}, args...)...)
			cmd.Env = valkeycli.Env(operatorPassword)
		}
		if out, err := cmd.CombinedOutput(); err != nil {
			return valkeyops.MoveStats{}, fmt.Errorf("valkey-cli --cluster rebalance: %v: %s", err, lastLines(string(out), 5))
		}
		return valkeyops.MoveStats{}, nil
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

// result is one side's rebalance: keys moved per second (keys that ended on the new
// primary) and, for ours, what moved how.
type result struct {
	rate  float64
	stats valkeyops.MoveStats
}

// rebalance forms 3x1 with our Bootstrap, writes the keys, joins a fourth shard (primary +
// replica, not timed) and then times run until the 4-shard layout is reached and every key is
// readable. The primaries must hold exactly the keys written, before and after the move.
// The clock stops when every node reports the even 4-shard layout (waitHealthy, polled every
// 10 ms); reading every key back and counting them follows, untimed.
func rebalance(ctx context.Context, image string, run rebalancer) (result, error) {
	var res result
	c, err := newCluster(ctx, image, 3, 2)
	if err != nil {
		return res, err
	}
	defer c.close()
	if err := c.admin.Bootstrap(ctx, c.nodes, 3); err != nil {
		return res, err
	}
	if err := c.waitHealthy(ctx, c.nodes, 3, nil); err != nil {
		return res, err
	}
	client, err := dataClient(c.nodes)
	if err != nil {
		return res, err
	}
	defer client.Close()
	t0 := time.Now()
	if err := loadgen.Fill(ctx, client, "k:", *keys, 5000, value); err != nil {
		return res, err
	}
	logf("%s: wrote %d keys in %s", image, *keys, time.Since(t0).Round(time.Millisecond))
	if err := c.checkKeyCount(ctx, c.nodes, "after the fill"); err != nil {
		return res, err
	}
	added, err := c.env.StartNodes(ctx, 1, 2)
	if err != nil {
		return res, err
	}
	for i := range added {
		added[i].Shard = 3
	}
	all := append(append([]model.Node(nil), c.nodes...), added...)
	if err := c.admin.Bootstrap(ctx, all, 4); err != nil {
		return res, err
	}
	if err := c.waitHealthy(ctx, all, 3, nil); err != nil {
		return res, err
	}

	start := time.Now()
	if res.stats, err = run(ctx, c, all); err != nil {
		return res, err
	}
	ran := time.Since(start)
	even := func(s *model.Snapshot) bool {
		ps := 0
		for _, p := range s.Primaries() {
			n := model.CountSlots(p.Slots)
			if n < model.SlotCount/4-model.SlotCount/100 || n > model.SlotCount/4+model.SlotCount/100 {
				return false
			}
			ps++
		}
		return ps == 4
	}
	if err := c.waitHealthy(ctx, all, 4, even); err != nil {
		return res, err
	}
	elapsed := time.Since(start)
	// Every key read back (and the primaries' DBSIZEs adding up) after the clock stopped:
	// reading 1M keys took longer than a 9.1 atomic move, and says nothing of either side's
	// speed; a key missing or a count that differs still fails the bench.
	t1 := time.Now()
	if err := verify(ctx, client, *keys); err != nil {
		return res, err
	}
	if err := c.checkKeyCount(ctx, all, "after the move"); err != nil {
		return res, err
	}
	checked := time.Since(t1)
	snap, err := c.admin.Observe(ctx, all)
	if err != nil {
		return res, err
	}
	var moved int64
	for _, n := range added {
		if st := snap.ByName(n.Name); st.Role == model.RolePrimary {
			moved, err = dbsize(ctx, n)
			if err != nil {
				return res, err
			}
		}
	}
	if moved == 0 {
		return res, fmt.Errorf("%s: no key moved to the new primary", image)
	}
	logf("%s: moved %d keys in %s (the move returned after %s; every key read back and counted in a further %s, untimed)",
		image, moved, elapsed.Round(time.Millisecond), ran.Round(time.Millisecond), checked.Round(time.Millisecond))
	res.rate = float64(moved) / elapsed.Seconds()
	return res, nil
}

// checkKeyCount fails unless the slot-holding primaries among nodes hold exactly -keys keys
// (DBSIZE): a key lost or duplicated by a move fails the bench.
func (c *cluster) checkKeyCount(ctx context.Context, nodes []model.Node, when string) error {
	snap, err := c.admin.Observe(ctx, nodes)
	if err != nil {
		return err
	}
	var total int64
	for _, p := range snap.Primaries() {
		if len(p.Slots) == 0 {
			continue
		}
		k, err := dbsize(ctx, p.Node)
		if err != nil {
			return err
		}
		total += k
	}
	if total != int64(*keys) {
		return fmt.Errorf("%s: the primaries hold %d keys %s, not %d", c.image, total, when, *keys)
	}
	return nil
}

func dataClient(nodes []model.Node) (valkey.Client, error) {
	o := valkey.ClientOption{Password: defaultPassword, DisableCache: true}
	for _, n := range nodes {
		o.InitAddress = append(o.InitAddress, n.Addr)
	}
	return valkey.NewClient(o)
}

func dbsize(ctx context.Context, n model.Node) (int64, error) {
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
