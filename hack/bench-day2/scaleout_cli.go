package main

// The valkey-cli side of the scale-out comparison: the same situation as ours, on plain
// containers, rebalanced by valkey-cli.

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gomomento/valkey-operator/integration/harness"
	"github.com/gomomento/valkey-operator/internal/poll"
	"github.com/gomomento/valkey-operator/internal/valkeycli"
	"github.com/gomomento/valkey-operator/valkeyops"
	"github.com/gomomento/valkey-operator/valkeyops/model"
)

const (
	cliDefaultPassword  = "bench-day2-default"
	cliOperatorPassword = "bench-day2-operator"
)

// scaleoutCLI builds the same situation on plain containers and returns valkey-cli's
// rebalance rate: keys on the new primary / seconds from the rebalance's start until it has
// exited and the servers report 4 healthy shards with even slots. pipeline > 0 is passed as
// --cluster-pipeline (keys per MIGRATE; valkey-cli's default is 10). The primaries must hold
// exactly the keys written after the fill and after the rebalance.
func scaleoutCLI(ctx context.Context, shape serverShape, pipeline int) (float64, error) {
	label := "scaleout valkey-cli"
	if pipeline > 0 {
		label = fmt.Sprintf("scaleout valkey-cli --cluster-pipeline %d", pipeline)
	}
	user, pw := model.ReplicationLogin(cliOperatorPassword)
	args := append([]string{"--masteruser", user, "--masterauth", pw}, shape.settings...)
	env, err := harness.New(ctx, harness.Config{Image: harness.Image(),
		ACL:  model.ACLSpec{DefaultPassword: cliDefaultPassword, OperatorPassword: cliOperatorPassword},
		Args: args})
	if err != nil {
		return 0, err
	}
	var closeOnce sync.Once
	closeEnv := func() {
		closeOnce.Do(func() {
			cctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			if err := env.Close(cctx); err != nil {
				logf("valkey-cli side: removing containers: %v", err)
			}
		})
	}
	atExit(closeEnv)
	defer closeEnv()

	admin, err := valkeyops.NewAdmin(valkeyops.Options{Credentials: valkeyops.Credentials{Username: model.OperatorUser, Password: cliOperatorPassword}})
	if err != nil {
		return 0, err
	}
	defer admin.Close()
	start := func(shards int) ([]model.Node, error) {
		sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		nodes, err := env.StartNodes(sctx, shards, 2)
		if err != nil {
			return nil, err
		}
		return nodes, limit(ctx, env, nodes, shape)
	}
	nodes, err := start(3)
	if err != nil {
		return 0, err
	}
	bctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	err = admin.Bootstrap(bctx, nodes, 3)
	cancel()
	if err != nil {
		return 0, err
	}
	if err := waitHealthy(ctx, admin, nodes, 3, time.Minute); err != nil {
		return 0, err
	}
	var addrs []string
	for _, n := range nodes {
		addrs = append(addrs, n.Addr)
	}
	c, err := clusterClient(addrs, cliDefaultPassword)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	t := time.Now()
	if err := fill(ctx, c, *keys); err != nil {
		return 0, err
	}
	logf("%s: wrote %d keys in %.1fs", label, *keys, time.Since(t).Seconds())
	if total, err := primaryKeys(ctx, admin, nodes); err != nil {
		return 0, err
	} else if total != int64(*keys) {
		return 0, fmt.Errorf("%s: the primaries hold %d keys after the fill, not %d", label, total, *keys)
	}

	added, err := start(1)
	if err != nil {
		return 0, err
	}
	for i := range added {
		added[i].Shard = 3
	}
	all := append(append([]model.Node(nil), nodes...), added...)
	bctx, cancel = context.WithTimeout(ctx, 2*time.Minute)
	err = admin.Bootstrap(bctx, all, 4) // meets the new pair and attaches its replica; moves no slot
	cancel()
	if err != nil {
		return 0, err
	}
	if err := waitHealthy(ctx, admin, all, 3, time.Minute); err != nil {
		return 0, err
	}

	t0 := time.Now()
	rctx, cancel := context.WithTimeout(ctx, *scaleTimeout)
	// As the operator's user, as the operator itself moves slots: the default user may not.
	cliArgs := []string{"--user", model.OperatorUser, "--cluster", "rebalance", all[0].Addr, "--cluster-use-empty-masters"}
	if pipeline > 0 {
		cliArgs = append(cliArgs, "--cluster-pipeline", strconv.Itoa(pipeline))
	}
	out, err := valkeycli.Command(rctx, cliOperatorPassword, cliArgs...).CombinedOutput()
	cancel()
	if err != nil {
		return 0, fmt.Errorf("valkey-cli --cluster rebalance: %v: %s", err, lastLines(string(out), 5))
	}
	if err := waitHealthy(ctx, admin, all, 4, time.Minute); err != nil {
		return 0, err
	}
	elapsed := time.Since(t0)

	snap, err := admin.Observe(ctx, all)
	if err != nil {
		return 0, err
	}
	var moved int64
	for _, n := range added {
		if st := snap.ByName(n.Name); st != nil && st.Role == model.RolePrimary {
			if moved, err = dbsize(ctx, n.Addr, cliDefaultPassword); err != nil {
				return 0, err
			}
		}
	}
	if total, err := primaryKeys(ctx, admin, all); err != nil {
		return 0, err
	} else if total != int64(*keys) {
		return 0, fmt.Errorf("%s: the primaries hold %d keys after the rebalance, not %d", label, total, *keys)
	}
	logf("%s: moved %d keys in %.1fs", label, moved, elapsed.Seconds())
	if moved == 0 {
		return 0, fmt.Errorf("%s moved no key to the new primary", label)
	}
	return float64(moved) / elapsed.Seconds(), nil
}

// primaryKeys adds up DBSIZE over the slot-holding primaries among nodes.
func primaryKeys(ctx context.Context, admin *valkeyops.Admin, nodes []model.Node) (int64, error) {
	snap, err := admin.Observe(ctx, nodes)
	if err != nil {
		return 0, err
	}
	var total int64
	for _, p := range snap.Primaries() {
		if len(p.Slots) == 0 {
			continue
		}
		k, err := dbsize(ctx, p.Addr, cliDefaultPassword)
		if err != nil {
			return 0, err
		}
		total += k
	}
	return total, nil
}

// limit gives the containers the operator pods' CPU and memory limits.
func limit(ctx context.Context, env *harness.Env, nodes []model.Node, s serverShape) error {
	var args []string
	if s.nanoCPUs > 0 {
		args = append(args, "--cpus", strconv.FormatFloat(float64(s.nanoCPUs)/1e9, 'f', -1, 64))
	}
	if s.memory > 0 {
		swap := s.memorySwap
		if swap <= 0 {
			swap = s.memory
		}
		args = append(args, "--memory", strconv.FormatInt(s.memory, 10), "--memory-swap", strconv.FormatInt(swap, 10))
	}
	if len(args) == 0 {
		return nil
	}
	for _, n := range nodes {
		c := env.Container(n.Name)
		if c == nil {
			return fmt.Errorf("no container for %s", n.Name)
		}
		if _, err := docker(ctx, append(append([]string{"update"}, args...), c.GetContainerID())...); err != nil {
			return err
		}
	}
	return nil
}

// waitHealthy: every node reports cluster_state ok, all slots assigned, replicas linked
// (model.Health for shards x 1), and the slot-holding primaries are balanced within 1%.
func waitHealthy(ctx context.Context, admin *valkeyops.Admin, nodes []model.Node, shards int, timeout time.Duration) error {
	return poll.Until(ctx, 20*time.Millisecond, timeout, fmt.Sprintf("%d healthy shards", shards), func(ctx context.Context) (bool, string, error) {
		snap, err := admin.Observe(ctx, nodes)
		if err != nil {
			return false, "", err
		}
		if reasons := model.Health(snap, shards, 1); len(reasons) > 0 {
			return false, fmt.Sprint(reasons), nil
		}
		var view []model.ClusterNode
		for _, p := range snap.Primaries() {
			if len(p.Slots) > 0 {
				view = append(view, model.ClusterNode{Flags: []string{"master"}, Slots: p.Slots})
			}
		}
		ok, why := balanced(view, shards)
		return ok, why, nil
	})
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}
