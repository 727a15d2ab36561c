package main

import (
	"context"
	"fmt"
	"time"

	"github.com/gomomento/valkey-operator/internal/loadgen"
	"github.com/gomomento/valkey-operator/internal/poll"
)

// exampleConfig is the example menu's base ValkeyConfig (examples/valkeyconfig.yaml).
const exampleConfig = "standard"

// rollConfig is the bench's own ValkeyConfig: editing it rolls only the bench's cluster.
const rollConfig = "bench-roll"

// roll edits the ValkeyConfig of a converged 3x1 cluster (maxmemory-policy) while loadgen
// writes through a cluster-mode client, waits until every node was replaced and the cluster
// converged again, and prints the roll line: seconds per shard rolled, the longest pause
// between two acknowledged writes over the whole roll (three primary handovers among it),
// and the acknowledged writes not read back afterwards.
func (b *bench) roll(ctx context.Context) error {
	const ns, name = "bench-roll", "roll"
	if _, err := b.kubectl.RunWithInput(ctx, rollConfigYAML("allkeys-lru"), "apply", "-f", "-"); err != nil {
		return err
	}
	password, err := b.waitNewCluster(ctx, ns, name, rollConfig, 3, 1)
	if err != nil {
		return err
	}
	before, err := b.valkeyNodes(ctx, ns, name)
	if err != nil {
		return err
	}
	old := map[string]bool{}
	for _, n := range before {
		old[n.Name] = true
	}
	ips, err := b.podIPs(ctx, ns, name)
	if err != nil {
		return err
	}
	c, err := clusterClient(clientAddrs(ips), password)
	if err != nil {
		return err
	}
	defer c.Close()
	const prefix = "roll:"
	w := loadgen.Start(c, loadgen.Options{Prefix: prefix, Pace: *pace})
	stopped := false
	defer func() {
		if !stopped {
			w.Stop()
		}
	}()
	if err := poll.Until(ctx, 100*time.Millisecond, 30*time.Second, "writer running", func(context.Context) (bool, string, error) {
		return w.Acked() >= 200, fmt.Sprintf("%d acknowledged", w.Acked()), nil
	}); err != nil {
		return err
	}

	t0 := time.Now()
	if _, err := b.kubectl.RunWithInput(ctx, rollConfigYAML("volatile-lru"), "apply", "-f", "-"); err != nil {
		return err
	}
	err = poll.Until(ctx, 250*time.Millisecond, *rollTimeout, "every old node replaced", func(ctx context.Context) (bool, string, error) {
		now, err := b.valkeyNodes(ctx, ns, name)
		if err != nil {
			return false, err.Error(), nil
		}
		for _, n := range now {
			if old[n.Name] {
				return false, fmt.Sprintf("%s still there among %d nodes", n.Name, len(now)), nil
			}
		}
		return true, "", nil
	})
	if err != nil {
		return err
	}
	if err := b.waitConverged(ctx, ns, name, converge{nodes: 6, balanced: 3}, *rollTimeout, password); err != nil {
		return err
	}
	took := time.Since(t0)
	res := w.Stop()
	stopped = true
	mctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	lost, first := loadgen.Missing(mctx, c, prefix, res.Acked)
	logf("roll: 3x1 rolled in %.1fs; writes acknowledged=%d rejected=%d lost=%d (first: %v)", took.Seconds(), len(res.Acked), res.Failed, lost, first)
	fmt.Printf("roll: seconds-per-shard=%.1f longest-pause-s=%.3f lost=%d\n", took.Seconds()/3, res.MaxPause.Seconds(), lost)
	if err := b.deleteCluster(ctx, ns, name); err != nil {
		return err
	}
	_, err = b.kubectl.Run(ctx, "delete", "valkeyconfig", rollConfig, "--wait=false")
	return err
}

func rollConfigYAML(policy string) string {
	return fmt.Sprintf("apiVersion: valkey.gomomento.com/v1alpha1\nkind: ValkeyConfig\nmetadata:\n  name: %s\nspec:\n  imageRef: valkey-8.0\n  resources:\n    cpu: 250m\n    memory: 256Mi\n  valkey:\n    maxmemory: 200mb\n    maxmemory-policy: %s\n",
		rollConfig, policy)
}
