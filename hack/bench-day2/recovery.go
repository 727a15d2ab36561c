package main

import (
	"context"
	"fmt"
	"net"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/gomomento/valkey-operator/internal/loadgen"
	"github.com/gomomento/valkey-operator/internal/poll"
	"github.com/gomomento/valkey-operator/valkeyops/model"
)

// clientAddrs are the client addresses of the pods ips lists (pod name -> IP), sorted.
func clientAddrs(ips map[string]string) []string {
	var addrs []string
	for _, ip := range ips {
		addrs = append(addrs, net.JoinHostPort(ip, "6379"))
	}
	sort.Strings(addrs)
	return addrs
}

// waitNewCluster applies a shards x replicas cluster of configRef in namespace ns and waits
// until it is converged; it returns the default user's password.
func (b *bench) waitNewCluster(ctx context.Context, ns, name, configRef string, shards, replicas int) (string, error) {
	start := time.Now()
	if err := b.applyCluster(ctx, ns, name, configRef, shards, replicas); err != nil {
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
	password, err := b.waitNewCluster(ctx, ns, name, exampleConfig, 3, 1)
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

// recovery loses one primary of a converged 3x1 cluster while three writers run, and prints
// the recovery line.
//
// promotion-s: from the delete/kill until the victim's replica reports role:master (INFO
// replication, polled every 20 ms on its own connection): the servers' and the operator's
// part.
//
// writes-resumed: two slot writers (loadgen writers that record every outcome) write only
// keys {tag}:<kind>:<i> and {tag}:<kind>:default:<i>, where tag was picked by asking the
// servers (CLUSTER KEYSLOT) until its slot lies in the victim's slot ranges; each runs on a
// client of its own, so loadgen's WAITs never queue in front of them. The first's client is
// the tuned one (clusterClient: a silent connection dropped after 2 s): writes-resumed-s; the
// second's has valkey-go's defaults (defaultClusterClient: 10 s):
// writes-resumed-default-client-s. Both watch the same loss.
// Every write is recorded with its end time and whether it was acknowledged (SET answered
// OK by a primary; no WAIT). The outage is the stretch after the delete/kill from the last
// acknowledged write before the first failed write (refused, connection error or 1 s
// timeout) to the first acknowledged write after the last failed one; writes-resumed-s is
// that gap. When no write failed (a graceful hand-over), it is the longest pause between two
// acknowledged writes after the delete. For a crash the last write before the outage ends
// at the kill (writes are 1 ms apart), so the gap is the time from the kill; for a deleted
// pod, which keeps serving for a while, stderr also gives the time from the delete.
//
// lost (pod-deleted) and lost-acked (crash) count writes of the whole-key-space writer that
// the primary acknowledged (SET answered OK) but that are not read back afterwards; for a
// crash that writer also WAITs for one replica after each SET, and lost-replica-acked counts
// only the writes a replica confirmed. A crash loses what the primary took but had not yet
// sent to its replica: lost-acked is Valkey's asynchronous replication window.
func (b *bench) recovery(ctx context.Context, ns, name, password, kind string) error {
	victim, ips, self, err := b.primaryToLose(ctx, ns, name, password)
	if err != nil {
		return err
	}
	addrs := clientAddrs(ips)

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
	dc, err := defaultClusterClient(addrs, password)
	if err != nil {
		return err
	}
	defer dc.Close()
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
	// The slot writer's keys all carry the hash tag, so every write goes to the one slot the
	// tag hashes to, owned by the primary about to be lost; it records each write's outcome.
	sw := loadgen.Start(sc, loadgen.Options{Prefix: tag + ":" + kind + ":", Pace: *pace, Record: true})
	dw := loadgen.Start(dc, loadgen.Options{Prefix: tag + ":" + kind + ":default:", Pace: *pace, Record: true})
	stopped := false
	defer func() {
		if !stopped {
			lw.Stop()
			sw.Stop()
			dw.Stop()
		}
	}()
	if err := poll.Until(ctx, 100*time.Millisecond, 30*time.Second, "writers running", func(context.Context) (bool, string, error) {
		return lw.Acked() >= 200 && sw.Acked() >= 200 && dw.Acked() >= 200,
			fmt.Sprintf("loadgen %d, slot writers %d (tuned) and %d (default client) acknowledged", lw.Acked(), sw.Acked(), dw.Acked()), nil
	}); err != nil {
		return err
	}

	// A replacement replica that joined just before (the previous scenario's heal) reaches
	// the victim's view by gossip: read it again until it shows.
	replicaAddr, err := replicaInView(ctx, victim, ips[victim], self.ID, password)
	if err != nil {
		return err
	}
	verb := map[string]string{"pod-deleted": "delete", "crash": "kill"}[kind]
	t0 := time.Now()
	promoted := watchPromotion(ctx, replicaAddr, password, t0)
	defer promoted()
	switch kind {
	case "pod-deleted":
		if _, err := b.kubectl.In(ns).Run(ctx, "delete", "pod", victim, "--wait=false"); err != nil {
			return err
		}
	case "crash":
		if err := b.killServer(ctx, ns, victim); err != nil {
			return err
		}
	}
	if err := b.waitConverged(ctx, ns, name, converge{nodes: 6, gone: victim, balanced: 3}, *healTimeout, password); err != nil {
		return err
	}
	topology := time.Since(t0)
	promotion := promoted()
	if promotion <= 0 {
		return fmt.Errorf("the victim's replica %s was not seen reporting itself primary", replicaAddr)
	}
	logf("recovery %s: the victim's replica %s reported itself primary %.2fs after the %s", kind, replicaAddr, promotion.Seconds(), verb)
	// The clients may still be catching up when the servers have converged: keep writing
	// until each slot writer's last 100 writes were all acknowledged.
	if err := ackedAgain(ctx, "the slot writers' writes acknowledged again", sw, dw); err != nil {
		return err
	}
	res := lw.Stop()
	results := sw.Stop().Outcomes
	dresults := dw.Stop().Outcomes
	stopped = true

	resumed, gap, failed, err := loadgen.Outage(results, t0)
	if err != nil {
		return fmt.Errorf("tuned slot writer: %w", err)
	}
	dresumed, dgap, dfailed, err := loadgen.Outage(dresults, t0)
	if err != nil {
		return fmt.Errorf("default-client slot writer: %w", err)
	}
	mctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	// res.Acked: acknowledged as loadgen counts it (with WAIT 1 for a crash: confirmed by a
	// replica); res.UnconfirmedIdx: taken by the primary, not confirmed by a replica.
	lost, first := loadgen.Missing(mctx, c, prefix, res.Acked)
	lostUnconfirmed, firstUnconfirmed := loadgen.Missing(mctx, c, prefix, res.UnconfirmedIdx)
	logf("recovery %s: loadgen acknowledged=%d unconfirmed=%d rejected=%d lost=%d (first: %v) lost-unconfirmed=%d (first: %v) longest-pause=%s",
		kind, len(res.Acked), res.Unconfirmed, res.Failed, lost, first, lostUnconfirmed, firstUnconfirmed, res.MaxPause.Round(time.Millisecond))
	logf("recovery %s: tuned slot writer: %d writes, %d failed after the %s, outage %.2fs ending %.2fs after the %s; "+
		"default-client slot writer: %d writes, %d failed, outage %.2fs ending %.2fs after the %s",
		kind, len(results), failed, verb, gap.Seconds(), resumed.Seconds(), verb, len(dresults), dfailed, dgap.Seconds(), dresumed.Seconds(), verb)
	switch kind {
	case "crash":
		fmt.Printf("recovery: kind=%s promotion-s=%.2f writes-resumed-s=%.2f writes-resumed-default-client-s=%.2f topology-s=%.1f lost-acked=%d lost-replica-acked=%d\n",
			kind, promotion.Seconds(), gap.Seconds(), dgap.Seconds(), topology.Seconds(), lost+lostUnconfirmed, lost)
	default:
		fmt.Printf("recovery: kind=%s promotion-s=%.2f writes-resumed-s=%.2f topology-s=%.1f lost=%d\n",
			kind, promotion.Seconds(), gap.Seconds(), topology.Seconds(), lost+lostUnconfirmed)
	}
	return nil
}

// tagIn finds a hash tag "{...}" whose slot lies in ranges, asking the servers (CLUSTER
// KEYSLOT) for each candidate's slot.
func tagIn(ctx context.Context, c valkey.Client, kind string, ranges []model.SlotRange) (string, int, error) {
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

// primaryToLose picks a primary of the cluster with a pod IP and reads its own entry in its
// CLUSTER NODES (its ID and slots), which must show a slot-holding primary; ips are the
// cluster's pod IPs by pod name.
func (b *bench) primaryToLose(ctx context.Context, ns, name, password string) (victim string, ips map[string]string, self model.ClusterNode, err error) {
	nodes, err := b.valkeyNodes(ctx, ns, name)
	if err != nil {
		return "", nil, self, err
	}
	ips, err = b.podIPs(ctx, ns, name)
	if err != nil {
		return "", nil, self, err
	}
	for _, n := range nodes {
		if n.Role == "primary" && ips[n.Name] != "" {
			victim = n.Name
			break
		}
	}
	if victim == "" {
		return "", nil, self, fmt.Errorf("no primary among %v", nodes)
	}
	view, err := clusterNodes(ctx, net.JoinHostPort(ips[victim], "6379"), password)
	if err != nil {
		return "", nil, self, err
	}
	var me *model.ClusterNode
	for i := range view {
		if view[i].Myself() {
			me = &view[i]
		}
	}
	if me == nil || !me.IsPrimary() || len(me.Slots) == 0 {
		return "", nil, self, fmt.Errorf("%s does not report itself as a slot-holding primary: %+v", victim, me)
	}
	return victim, ips, *me, nil
}

// replicaInView reads the view of primary victim (at ip, node ID id) until it shows a replica
// of it and returns that replica's address: a replacement replica that joined just before (a
// previous scenario's heal) reaches the primary's view by gossip.
func replicaInView(ctx context.Context, victim, ip, id, password string) (string, error) {
	replicaAddr := ""
	err := poll.Until(ctx, 100*time.Millisecond, 30*time.Second, victim+" has a replica in its own view", func(ctx context.Context) (bool, string, error) {
		view, err := clusterNodes(ctx, net.JoinHostPort(ip, "6379"), password)
		if err != nil {
			return false, err.Error(), nil
		}
		for _, n := range view {
			if n.PrimaryID == id {
				replicaAddr = n.Addr()
			}
		}
		return replicaAddr != "", fmt.Sprintf("%d nodes in its view, none a replica of it", len(view)), nil
	})
	return replicaAddr, err
}

// killServer SIGKILLs the one running container of pod (docker kill): a crash, which the
// server cannot flush or hand over in.
func (b *bench) killServer(ctx context.Context, ns, pod string) error {
	ids, err := b.containers(ctx, ns, pod)
	if err != nil {
		return err
	}
	if len(ids) != 1 {
		return fmt.Errorf("want one running container for pod %s, found %v", pod, ids)
	}
	_, err = docker(ctx, "kill", "--signal", "KILL", ids[0])
	return err
}

// ackedAgain keeps the recording writers running until each one's last 100 writes were all
// acknowledged: the clients may still be catching up when the servers have converged, and
// an outage is only over once its writer took writes again.
func ackedAgain(ctx context.Context, what string, writers ...*loadgen.Writer) error {
	return poll.Until(ctx, 100*time.Millisecond, time.Minute, what, func(context.Context) (bool, string, error) {
		var why []string
		ok := true
		for _, w := range writers {
			rs := w.Outcomes()
			n := 0
			for i := len(rs) - 1; i >= 0 && rs[i].Acked; i-- {
				n++
			}
			ok = ok && n >= 100
			why = append(why, fmt.Sprintf("%d writes, the last %d acknowledged", len(rs), n))
		}
		return ok, strings.Join(why, "; "), nil
	})
}

// watchPromotion polls the replica's own INFO replication every 20 ms (promotion-s: how much
// of the outage is the failover; ROLE is an admin command the default user may not run);
// the returned function stops the watch and says when the replica first reported
// role:master, since t0 (0: not seen).
func watchPromotion(ctx context.Context, addr, password string, t0 time.Time) func() time.Duration {
	stop := make(chan struct{})
	done := make(chan time.Duration, 1)
	go func() {
		var at time.Duration
		defer func() { done <- at }()
		c, err := nodeClient(addr, password)
		if err != nil {
			return
		}
		defer c.Close()
		for {
			qctx, cancel := context.WithTimeout(ctx, time.Second)
			info, err := c.Do(qctx, c.B().Info().Section("replication").Build()).ToString()
			cancel()
			if err == nil && strings.Contains(info, "role:master\r\n") {
				at = time.Since(t0)
				return
			}
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	var once sync.Once
	var at time.Duration
	return func() time.Duration {
		once.Do(func() {
			close(stop)
			at = <-done
		})
		return at
	}
}
