package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/tidwall/gjson"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gomomento/valkey-operator/internal/loadgen"
	"github.com/gomomento/valkey-operator/internal/poll"
	"github.com/gomomento/valkey-operator/reconciler/render"
)

// The durable scenarios (issue #24): a 3x1 cluster whose ValkeyConfig keeps an AOF on a claim
// per node (persistence mode AOF, 64Mi) loses a primary's server, then every pod at once, and
// comes back in place each time: the same ValkeyNodes, claims and pod names. They print
//
//	durable: kind=crash-in-place writes-resumed-s=<x> lost-replica-acked=<n> lost-acked=<m> restarted-s=<y> same-nodes=<bool>
//	durable: kind=full-restart recovered-s=<x> lost=<n> keys=<k> same-nodes=<bool>
//
// crash-in-place: a primary's container is SIGKILLed while two writers run, as recovery's
// crash: loadgen over the whole key space waiting for one replica per write (WAIT 1), and a
// recording slot writer on the tuned client whose keys all hash to one slot of the victim.
// writes-resumed-s is that writer's outage (loadgen.Outage, as recovery measures it);
// lost-replica-acked counts loadgen's replica-confirmed writes not read back afterwards,
// lost-acked every write the primary acknowledged that is not read back (the replica is
// promoted, so what it had not received is gone: Valkey's replication window, not a bug by
// itself). restarted-s runs from the kill until the victim's ValkeyNode reports
// status.restarts >= 1 and the cluster converged again (6 Active nodes, check clean, slots
// even). same-nodes says whether the ValkeyNodes are exactly those from before (restarted in
// place, none replaced).
//
// full-restart: -durable-keys keys written (every SET answered), then every pod of the
// cluster deleted at once. recovered-s runs from the delete until every pod is new, all
// 16384 slots are covered and a fresh client writes and reads on every shard (as outage
// measures it); lost counts the written keys not read back once the cluster converged.
// Unlike outage's cluster, nothing of the data may be lost here: each node comes back on its
// volume and the operator introduces the servers again at their new addresses.

var (
	skipDurable = flag.Bool("skip-durable", false, "skip the durable scenarios (a crash restarted in place, a full restart)")
	durableKeys = flag.Int("durable-keys", 20_000, "keys written before the durable cluster's full restart")
)

// durableConnectTimeout bounds each connection of the durable scenarios' cluster checks: a
// restarted server comes back at a new IP and its peers list the old one until they hear
// from it (until Reintroduce after a full restart), and valkey-cli without a bound can wait
// up to the check's 30 s on such an address, which would be measured as recovery time.
const durableConnectTimeout = 500 * time.Millisecond

// durableConfig is the bench's ValkeyConfig with persistence.
const durableConfig = "bench-durable"

// durableConfigYAML: the example menu's image and resources; noeviction, so that a key can
// only go missing by being lost, never by eviction, and a maxmemory (48mb) well below the
// 64Mi volume holding the AOF.
var durableConfigYAML = fmt.Sprintf(`apiVersion: valkey.gomomento.com/v1alpha1
kind: ValkeyConfig
metadata:
  name: %s
spec:
  imageRef: valkey-8.0
  resources:
    cpu: 250m
    memory: 256Mi
  valkey:
    maxmemory: 48mb
    maxmemory-policy: noeviction
  persistence:
    mode: AOF
    size: 64Mi
`, durableConfig)

// durable runs both durable scenarios on one 3x1 cluster, then deletes it and its config.
func (b *bench) durable(ctx context.Context) error {
	const ns, name = "bench-durable", "durable"
	if _, err := b.kubectl.RunWithInput(ctx, durableConfigYAML, "apply", "-f", "-"); err != nil {
		return err
	}
	password, err := b.waitNewCluster(ctx, ns, name, durableConfig, 3, 1)
	if err != nil {
		return err
	}
	before, err := b.nodeNames(ctx, ns, name)
	if err != nil {
		return err
	}
	if err := b.crashInPlace(ctx, ns, name, password, before); err != nil {
		return fmt.Errorf("crash-in-place: %w", err)
	}
	if err := b.fullRestart(ctx, ns, name, password, before); err != nil {
		return fmt.Errorf("full-restart: %w", err)
	}
	if err := b.deleteCluster(ctx, ns, name); err != nil {
		return err
	}
	_, err = b.kubectl.Run(ctx, "delete", "valkeyconfig", durableConfig, "--wait=false")
	return err
}

// crashInPlace SIGKILLs a primary's server while the writers run and prints the
// crash-in-place line (see the top of this file).
func (b *bench) crashInPlace(ctx context.Context, ns, name, password string, before []string) error {
	const kind = "crash-in-place"
	victim, ips, self, err := b.primaryToLose(ctx, ns, name, password)
	if err != nil {
		return err
	}
	addrs := clientAddrs(ips)
	// Each writer has a client of its own, so loadgen's WAITs never queue in front of the
	// slot writer's SETs (as in recovery).
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
	logf("durable %s: victim %s (%s, slots %v); slot writer's hash tag %s is slot %d", kind, victim, ips[victim], self.Slots, tag, slot)

	const prefix = "durable-crash:"
	lw := loadgen.Start(c, loadgen.Options{Prefix: prefix, Pace: *pace, Replicas: 1})
	sw := loadgen.Start(sc, loadgen.Options{Prefix: tag + ":" + kind + ":", Pace: *pace, Record: true})
	stopped := false
	defer func() {
		if !stopped {
			lw.Stop()
			sw.Stop()
		}
	}()
	if err := poll.Until(ctx, 100*time.Millisecond, 30*time.Second, "writers running", func(context.Context) (bool, string, error) {
		return lw.Acked() >= 200 && sw.Acked() >= 200, fmt.Sprintf("loadgen %d, slot writer %d acknowledged", lw.Acked(), sw.Acked()), nil
	}); err != nil {
		return err
	}
	replicaAddr, err := replicaInView(ctx, victim, ips[victim], self.ID, password)
	if err != nil {
		return err
	}

	t0 := time.Now()
	promoted := watchPromotion(ctx, replicaAddr, password, t0)
	defer promoted()
	if err := b.killServer(ctx, ns, victim); err != nil {
		return err
	}
	// The restart count first: right after the kill the old pod may still look converged.
	if err := poll.Until(ctx, 250*time.Millisecond, *healTimeout, victim+" restarted in place", func(ctx context.Context) (bool, string, error) {
		r, err := b.restarts(ctx, ns, victim)
		if err != nil {
			return false, err.Error(), nil
		}
		return r >= 1, fmt.Sprintf("status.restarts=%d", r), nil
	}); err != nil {
		return err
	}
	restartCounted := time.Since(t0)
	if err := b.waitConverged(ctx, ns, name, converge{nodes: 6, balanced: 3, connectTimeout: durableConnectTimeout}, *healTimeout, password); err != nil {
		return err
	}
	restarted := time.Since(t0)
	logf("durable %s: the victim's replica %s reported itself primary %.2fs after the kill; %s counted its restart at %.1fs",
		kind, replicaAddr, promoted().Seconds(), victim, restartCounted.Seconds())
	if err := ackedAgain(ctx, "the slot writer's writes acknowledged again", sw); err != nil {
		return err
	}
	res := lw.Stop()
	results := sw.Stop().Outcomes
	stopped = true

	_, gap, failed, err := loadgen.Outage(results, t0)
	if err != nil {
		return fmt.Errorf("slot writer: %w", err)
	}
	mctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	// res.Acked: confirmed by a replica (WAIT 1); res.UnconfirmedIdx: taken by the primary only.
	lost, first := loadgen.Missing(mctx, c, prefix, res.Acked)
	lostUnconfirmed, firstUnconfirmed := loadgen.Missing(mctx, c, prefix, res.UnconfirmedIdx)
	same, after, err := b.sameNodes(ctx, ns, name, before)
	if err != nil {
		return err
	}
	role := ""
	if nodes, err := b.valkeyNodes(ctx, ns, name); err == nil {
		for _, n := range nodes {
			if n.Name == victim {
				role = n.Role
			}
		}
	}
	logf("durable %s: loadgen acknowledged=%d unconfirmed=%d rejected=%d lost=%d (first: %v) lost-unconfirmed=%d (first: %v); "+
		"slot writer: %d writes, %d failed after the kill; %s is now %s; nodes before %v, after %v",
		kind, len(res.Acked), res.Unconfirmed, res.Failed, lost, first, lostUnconfirmed, firstUnconfirmed,
		len(results), failed, victim, role, before, after)
	fmt.Printf("durable: kind=%s writes-resumed-s=%.2f lost-replica-acked=%d lost-acked=%d restarted-s=%.1f same-nodes=%t\n",
		kind, gap.Seconds(), lost, lost+lostUnconfirmed, restarted.Seconds(), same)
	return nil
}

// fullRestart writes -durable-keys keys, deletes every pod of the cluster at once and prints
// the full-restart line (see the top of this file).
func (b *bench) fullRestart(ctx context.Context, ns, name, password string, before []string) error {
	const kind, prefix, pods = "full-restart", "durable-full:", 6
	ips, err := b.podIPs(ctx, ns, name)
	if err != nil {
		return err
	}
	c, err := clusterClient(clientAddrs(ips), password)
	if err != nil {
		return err
	}
	// Fill checks every SET's answer: each key was acknowledged before the delete.
	err = loadgen.Fill(ctx, c, prefix, *durableKeys, 5000, nil)
	c.Close()
	if err != nil {
		return err
	}
	old, err := b.podUIDs(ctx, ns, name)
	if err != nil {
		return err
	}
	logf("durable %s: %d keys written; deleting all %d pods", kind, *durableKeys, len(old))
	t0 := time.Now()
	if _, err := b.kubectl.In(ns).Run(ctx, "delete", "pod", "-l", render.LabelCluster+"="+name, "--wait=false"); err != nil {
		return err
	}
	// The pods come back under the same names: a pod is new when its UID is.
	if err := poll.Until(ctx, 100*time.Millisecond, 3*time.Minute, "every slot served and writable again", func(ctx context.Context) (bool, string, error) {
		now, err := b.podUIDs(ctx, ns, name)
		if err != nil {
			return false, err.Error(), nil
		}
		var addrs []string
		for uid, ip := range now {
			if _, was := old[uid]; was {
				return false, "a pod from before the delete is still there", nil
			}
			if ip != "" {
				addrs = append(addrs, net.JoinHostPort(ip, "6379"))
			}
		}
		if len(addrs) < pods {
			return false, fmt.Sprintf("%d of %d new pods have an IP", len(addrs), pods), nil
		}
		return servesEverySlot(ctx, addrs, password, durableConnectTimeout)
	}); err != nil {
		return err
	}
	recovered := time.Since(t0)
	if err := b.waitConverged(ctx, ns, name, converge{nodes: pods, balanced: 3, connectTimeout: durableConnectTimeout}, 3*time.Minute, password); err != nil {
		return err
	}
	logf("durable %s: every slot writable %.1fs after the delete, converged at %.1fs", kind, recovered.Seconds(), time.Since(t0).Seconds())
	if ips, err = b.podIPs(ctx, ns, name); err != nil {
		return err
	}
	if c, err = clusterClient(clientAddrs(ips), password); err != nil {
		return err
	}
	defer c.Close()
	all := make([]int, *durableKeys)
	for i := range all {
		all[i] = i
	}
	mctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	lost, first := loadgen.Missing(mctx, c, prefix, all)
	same, after, err := b.sameNodes(ctx, ns, name, before)
	if err != nil {
		return err
	}
	var counts []string
	for _, n := range after {
		r, err := b.restarts(ctx, ns, n)
		if err != nil {
			return err
		}
		counts = append(counts, fmt.Sprintf("%s=%d", n, r))
	}
	lostEvents, err := b.env.Kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=SlotsLost"})
	if err != nil {
		return err
	}
	logf("durable %s: lost=%d (first: %v); restarts %s; SlotsLost Events: %d; nodes before %v, after %v",
		kind, lost, first, strings.Join(counts, " "), len(lostEvents.Items), before, after)
	fmt.Printf("durable: kind=%s recovered-s=%.1f lost=%d keys=%d same-nodes=%t\n", kind, recovered.Seconds(), lost, *durableKeys, same)
	return nil
}

// restarts is status.restarts of ValkeyNode node, read through kubectl.
func (b *bench) restarts(ctx context.Context, ns, node string) (int64, error) {
	out, err := b.kubectl.In(ns).Run(ctx, "get", "valkeynode", node, "-o", "json")
	if err != nil {
		return 0, err
	}
	return gjson.Get(out, "status.restarts").Int(), nil
}

// nodeNames are the cluster's ValkeyNode names, sorted.
func (b *bench) nodeNames(ctx context.Context, ns, cluster string) ([]string, error) {
	nodes, err := b.valkeyNodes(ctx, ns, cluster)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, n := range nodes {
		names = append(names, n.Name)
	}
	return names, nil
}

// sameNodes says whether the cluster's ValkeyNodes are exactly before (none replaced or
// added), and returns the names it found.
func (b *bench) sameNodes(ctx context.Context, ns, cluster string, before []string) (bool, []string, error) {
	after, err := b.nodeNames(ctx, ns, cluster)
	if err != nil {
		return false, nil, err
	}
	return slices.Equal(before, after), after, nil
}

// podUIDs maps the UIDs of the cluster's pods that are not being deleted to their IPs (""
// before one is assigned): a restarted durable node's pod has its predecessor's name.
func (b *bench) podUIDs(ctx context.Context, ns, cluster string) (map[string]string, error) {
	pods, err := b.livePods(ctx, ns, cluster)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, p := range pods {
		out[string(p.UID)] = p.Status.PodIP
	}
	return out, nil
}
