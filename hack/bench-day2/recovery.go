package main

import (
	"context"
	"fmt"
	"net"
	"sort"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/gomomento/valkey-operator/internal/loadgen"
	"github.com/gomomento/valkey-operator/internal/poll"
	"github.com/gomomento/valkey-operator/valkeyops"
)

// waitNewCluster applies a shards x replicas cluster in namespace ns and waits until it is
// converged; it returns the default user's password.
func (b *bench) waitNewCluster(ctx context.Context, ns, name string, shards, replicas int) (string, error) {
	start := time.Now()
	if err := b.applyCluster(ctx, ns, name, shards, replicas); err != nil {
		return "", err
	}
	var password string
	err := poll.Until(ctx, 500*time.Millisecond, 3*time.Minute, "Secret "+name+"-auth", func(ctx context.Context) (bool, string, error) {
		p, err := b.secret(ctx, ns, name+"-auth", "password")
		password = p
		return err == nil, fmt.Sprint(err), nil
	})
	if err != nil {
		return "", err
	}
	if err := b.waitConverged(ctx, ns, name, converge{nodes: shards * (1 + replicas), balanced: shards}, 4*time.Minute, password); err != nil {
		return "", err
	}
	logf("%s/%s: %dx%d converged in %.1fs", ns, name, shards, replicas, time.Since(start).Seconds())
	return password, nil
}

// recoveries runs the pod-deleted and the crash measurement one after the other on one 3x1
// cluster (converged again in between), then deletes it.
func (b *bench) recoveries(ctx context.Context) error {
	const ns, name = "bench-recovery", "rec"
	password, err := b.waitNewCluster(ctx, ns, name, 3, 1)
	if err != nil {
		return err
	}
	for _, kind := range []string{"pod-deleted", "crash"} {
		if err := b.recovery(ctx, ns, name, password, kind); err != nil {
			return fmt.Errorf("recovery %s: %w", kind, err)
		}
	}
	return b.deleteCluster(ctx, ns, name)
}

// recovery loses one primary of a converged 3x1 cluster while two writers run, and prints
// the recovery line.
//
// writes-resumed: the second writer (slotWriter) writes only keys {tag}:<i>, where tag was
// picked by asking the servers (CLUSTER KEYSLOT) until its slot lies in the victim's slot
// ranges; it runs on a client of its own, so loadgen's WAITs never queue in front of it.
// Every write is recorded with its end time and whether it was acknowledged (SET answered
// OK by a primary; no WAIT). writes-resumed-s is from the delete/kill to the first
// acknowledged write after the last failed write (refused, connection error or 1 s timeout);
// the gap from its last acknowledged write before the outage to that one goes to stderr.
func (b *bench) recovery(ctx context.Context, ns, name, password, kind string) error {
	nodes, err := b.valkeyNodes(ctx, ns, name)
	if err != nil {
		return err
	}
	ips, err := b.podIPs(ctx, ns, name)
	if err != nil {
		return err
	}
	var addrs []string
	for _, ip := range ips {
		addrs = append(addrs, net.JoinHostPort(ip, "6379"))
	}
	sort.Strings(addrs)
	victim := ""
	for _, n := range nodes {
		if n.role == "primary" && ips[n.name] != "" {
			victim = n.name
			break
		}
	}
	if victim == "" {
		return fmt.Errorf("no primary among %v", nodes)
	}
	view, err := clusterNodes(ctx, net.JoinHostPort(ips[victim], "6379"), password)
	if err != nil {
		return err
	}
	var self *valkeyops.ClusterNode
	for i := range view {
		if view[i].Myself() {
			self = &view[i]
		}
	}
	if self == nil || !self.IsPrimary() || len(self.Slots) == 0 {
		return fmt.Errorf("%s does not report itself as a slot-holding primary: %+v", victim, self)
	}

	c, err := clusterClient(addrs, password)
	if err != nil {
		return err
	}
	defer c.Close()
	sc, err := clusterClient(addrs, password)
	if err != nil {
		return err
	}
	defer sc.Close()
	tag, slot, err := tagIn(ctx, c, kind, self.Slots)
	if err != nil {
		return err
	}
	logf("recovery %s: victim %s (%s, slots %v); second writer's hash tag %s is slot %d", kind, victim, ips[victim], self.Slots, tag, slot)

	replicas := 0
	if kind == "crash" {
		replicas = 1
	}
	prefix := "rec-" + kind + ":"
	lw := loadgen.Start(c, loadgen.Options{Prefix: prefix, Pace: *pace, Replicas: replicas})
	sw := startSlotWriter(sc, tag+":"+kind+":")
	stopped := false
	defer func() {
		if !stopped {
			lw.Stop()
			sw.finish()
		}
	}()
	if err := poll.Until(ctx, 100*time.Millisecond, 30*time.Second, "writers running", func(context.Context) (bool, string, error) {
		return lw.Acked() >= 200 && sw.acked() >= 200, fmt.Sprintf("loadgen %d, slot writer %d acknowledged", lw.Acked(), sw.acked()), nil
	}); err != nil {
		return err
	}

	t0 := time.Now()
	switch kind {
	case "pod-deleted":
		if _, err := b.kubectl.In(ns).Run(ctx, "delete", "pod", victim, "--wait=false"); err != nil {
			return err
		}
	case "crash":
		ids, err := b.containers(ctx, ns, victim)
		if err != nil {
			return err
		}
		if len(ids) != 1 {
			return fmt.Errorf("want one running container for pod %s, found %v", victim, ids)
		}
		if _, err := docker(ctx, "kill", "--signal", "KILL", ids[0]); err != nil {
			return err
		}
	}
	if err := b.waitConverged(ctx, ns, name, converge{nodes: 6, gone: victim, balanced: 3}, *healTimeout, password); err != nil {
		return err
	}
	topology := time.Since(t0)
	res := lw.Stop()
	results := sw.finish()
	stopped = true

	resumed, gap, failed, err := outage(results, t0)
	if err != nil {
		return err
	}
	mctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	lost, first := loadgen.Missing(mctx, c, prefix, res.Acked)
	logf("recovery %s: loadgen acknowledged=%d unconfirmed=%d rejected=%d lost=%d (first: %v) longest-pause=%s; slot writer: %d writes, %d failed after the loss, outage gap %.2fs",
		kind, len(res.Acked), res.Unconfirmed, res.Failed, lost, first, res.MaxPause.Round(time.Millisecond), len(results), failed, gap.Seconds())
	fmt.Printf("recovery: kind=%s writes-resumed-s=%.2f topology-s=%.1f lost=%d\n", kind, resumed.Seconds(), topology.Seconds(), lost)
	return nil
}

// tagIn finds a hash tag "{...}" whose slot lies in ranges, asking the servers (CLUSTER
// KEYSLOT) for each candidate's slot.
func tagIn(ctx context.Context, c valkey.Client, kind string, ranges []valkeyops.SlotRange) (string, int, error) {
	for i := 0; i < 1000; i++ {
		tag := fmt.Sprintf("{bd2-%s-%d}", kind, i)
		qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		slot, err := c.Do(qctx, c.B().ClusterKeyslot().Key(tag).Build()).AsInt64()
		cancel()
		if err != nil {
			return "", 0, fmt.Errorf("CLUSTER KEYSLOT %s: %w", tag, err)
		}
		for _, r := range ranges {
			if int(slot) >= r.Start && int(slot) <= r.End {
				return tag, int(slot), nil
			}
		}
	}
	return "", 0, fmt.Errorf("no hash tag found in slots %v", ranges)
}
