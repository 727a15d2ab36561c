package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/valkey-io/valkey-go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gomomento/valkey-operator/internal/loadgen"
	"github.com/gomomento/valkey-operator/internal/poll"
	"github.com/gomomento/valkey-operator/reconciler/render"
)

// The disruption scenarios (issue #23): node maintenance and zone loss. They print exactly
// these lines:
//
//	drain: nodes=<n> data-mib=<m> total-s=<x> longest-drain-s=<y> longest-pause-s=<z> lost=<l>
//	zone-loss: primaries-lost=<n> writes-resumed-s=<x> lost-replica-acked=<n>
//
// drain: a 3x1 cluster of the example `standard-large` ValkeyConfig (1Gi pods, maxmemory
// 900mb) filled with -drain-mib MiB of 64 KiB values that do not compress (so every
// replacement's full sync carries them all), a loadgen writer running through a cluster-mode
// client, then `kubectl drain --ignore-daemonsets --delete-emptydir-data` of every dev node in
// turn (through the eviction API, as an upgrade tool does), each uncordoned as soon as its
// drain returns. total-s runs from the first drain until the cluster converged again (6
// Active nodes, check clean, slots even); longest-drain-s is the longest single `kubectl
// drain`; longest-pause-s is loadgen's longest gap between two acknowledged writes; lost
// counts acknowledged writes and fill keys not read back intact.
//
// zone-loss: a 3x1 cluster with `zoneSpread: required`; replicas are promoted (CLUSTER
// FAILOVER, graceful) until the zone hosting pods of the most shards holds two of the three
// primaries, a majority. Two writers run: loadgen waiting for one replica per write (WAIT 1:
// what must survive) and one counting a write once a primary took it, recording every
// outcome. Then every container on that zone's two nodes is SIGKILLed in one `docker kill`
// (the nodes keep reporting, as dev nodes do), and the nodes are cordoned, as a lost zone's
// nodes become unschedulable. writes-resumed-s is the second writer's outage (loadgen.Outage:
// from its last acknowledged write before its first failure after the kill to its first
// acknowledged write after its last failure, i.e. until every slot took writes again);
// lost-replica-acked counts loadgen's replica-acknowledged writes not read back once the
// cluster converged again in the two surviving zones.

var (
	disruptionOnly = flag.Bool("disruption-only", false, "run only the drain, zone-loss and outage scenarios")
	skipDrain      = flag.Bool("skip-drain", false, "skip the rolling drain of every node")
	skipZoneLoss   = flag.Bool("skip-zone-loss", false, "skip the zone loss")
	skipOutage     = flag.Bool("skip-outage", false, "skip the total outage (every pod deleted)")
	drainMiB       = flag.Int("drain-mib", 1024, "MiB of data in the drained cluster")
	drainTimeout   = flag.Duration("drain-timeout", 5*time.Minute, "bound on each node's `kubectl drain`")
)

// largeConfig is the example menu's ValkeyConfig with 1Gi pods (examples/valkeyconfig.yaml).
const largeConfig = "standard-large"

// drainValue is the size of each fill value.
const drainValue = 64 << 10

// disruptions runs the drain, zone-loss and outage scenarios the flags leave in.
func (b *bench) disruptions(ctx context.Context) error {
	if !*skipDrain {
		if err := b.drain(ctx); err != nil {
			return fmt.Errorf("drain: %w", err)
		}
	}
	if !*skipZoneLoss {
		if err := b.zoneLoss(ctx); err != nil {
			return fmt.Errorf("zone-loss: %w", err)
		}
	}
	if !*skipOutage {
		if err := b.outage(ctx); err != nil {
			return fmt.Errorf("outage: %w", err)
		}
	}
	return nil
}

// fillBlock is one incompressible 64 KiB block; value i is it with i written over its start,
// so every value differs and none compresses (LZF works within a value).
var fillBlock = func() []byte {
	r := rand.New(rand.NewPCG(23, 23))
	b := make([]byte, drainValue)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}()

func drainFillValue(i int) string {
	v := append([]byte(nil), fillBlock...)
	copy(v, strconv.Itoa(i)+":")
	return string(v)
}

func (b *bench) drain(ctx context.Context) error {
	const ns, name = "bench-drain", "drain"
	password, err := b.waitNewCluster(ctx, ns, name, largeConfig, 3, 1)
	if err != nil {
		return err
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
	keys := *drainMiB << 20 / drainValue
	start := time.Now()
	if err := loadgen.Fill(ctx, c, "fill:", keys, 16, drainFillValue); err != nil {
		return err
	}
	operatorPw, err := b.secret(ctx, ns, render.AuthSecretName(name), render.AuthOperatorPasswordKey)
	if err != nil {
		return err
	}
	used, err := b.usedMiB(ctx, ns, name, operatorPw)
	if err != nil {
		return err
	}
	logf("drain: filled %d keys of %d KiB in %.1fs (primaries report %d MiB used)", keys, drainValue>>10, time.Since(start).Seconds(), used)
	// Each pod turns Ready only once in sync: wait until the replicas have caught up with
	// the fill before any drain.
	if err := b.waitConverged(ctx, ns, name, converge{nodes: 6, balanced: 3}, 5*time.Minute, password); err != nil {
		return err
	}
	if err := b.waitPodsReady(ctx, ns, name, 6, 5*time.Minute); err != nil {
		return err
	}

	const prefix = "drain:"
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

	nodes, err := b.env.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	var names []string
	for _, n := range nodes.Items {
		names = append(names, n.Name)
	}
	sort.Strings(names)
	t0 := time.Now()
	var longest time.Duration
	for _, node := range names {
		hosted := b.podsOn(ctx, ns, name, node)
		began := time.Now()
		// kubectl's own --timeout bounds the drain; the runner's (2 min by default) must
		// not cut it shorter.
		runner := b.kubectl
		runner.Timeout = *drainTimeout + time.Minute
		out, err := runner.Run(ctx, "drain", node, "--ignore-daemonsets", "--delete-emptydir-data",
			"--timeout="+drainTimeout.String())
		took := time.Since(began)
		_, uerr := b.kubectl.Run(ctx, "uncordon", node)
		if err != nil {
			return fmt.Errorf("kubectl drain %s after %.1fs: %w: %s", node, took.Seconds(), err, out)
		}
		if uerr != nil {
			return uerr
		}
		logf("drain: %s (%v) drained in %.1fs", node, hosted, took.Seconds())
		longest = max(longest, took)
	}
	if err := b.waitConverged(ctx, ns, name, converge{nodes: 6, balanced: 3}, 5*time.Minute, password); err != nil {
		return err
	}
	total := time.Since(t0)
	res := w.Stop()
	stopped = true

	ips, err = b.podIPs(ctx, ns, name)
	if err != nil {
		return err
	}
	rc, err := clusterClient(clientAddrs(ips), password)
	if err != nil {
		return err
	}
	defer rc.Close()
	mctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	lost, first := loadgen.Missing(mctx, rc, prefix, res.Acked)
	fillLost, fillFirst := missingFill(mctx, rc, keys)
	logf("drain: writes acknowledged=%d rejected=%d lost=%d (first: %v); fill keys lost=%d of %d (first: %v); why writes failed: %v",
		len(res.Acked), res.Failed, lost, first, fillLost, keys, fillFirst, res.Errors)
	fmt.Printf("drain: nodes=%d data-mib=%d total-s=%.1f longest-drain-s=%.1f longest-pause-s=%.3f lost=%d\n",
		len(names), *drainMiB, total.Seconds(), longest.Seconds(), res.MaxPause.Seconds(), lost+fillLost)
	return b.deleteCluster(ctx, ns, name)
}

// missingFill reads back every fill key and counts those gone or changed.
func missingFill(ctx context.Context, c valkey.Client, keys int) (int, error) {
	missing := 0
	var first error
	const batch = 32
	for i := 0; i < keys; i += batch {
		cmds := make(valkey.Commands, 0, batch)
		for j := i; j < min(keys, i+batch); j++ {
			cmds = append(cmds, c.B().Get().Key("fill:"+strconv.Itoa(j)).Build())
		}
		for j, r := range c.DoMulti(ctx, cmds...) {
			if v, err := r.ToString(); err != nil || v != drainFillValue(i+j) {
				missing++
				if first == nil {
					first = fmt.Errorf("fill:%d: %d bytes, %v", i+j, len(v), err)
				}
			}
		}
	}
	return missing, first
}

// usedMiB adds up used_memory over the cluster's primaries (read as the operator's user: the
// default user may not run INFO or ROLE).
func (b *bench) usedMiB(ctx context.Context, ns, name, operatorPw string) (int64, error) {
	ips, err := b.podIPs(ctx, ns, name)
	if err != nil {
		return 0, err
	}
	var total int64
	for _, ip := range ips {
		c, err := operatorClient(ip, operatorPw)
		if err != nil {
			return 0, err
		}
		qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		info, err := c.Do(qctx, c.B().Info().Section("memory").Build()).ToString()
		role, _ := c.Do(qctx, c.B().Role().Build()).ToArray()
		cancel()
		c.Close()
		if err != nil {
			return 0, err
		}
		if len(role) == 0 {
			continue
		}
		if r, _ := role[0].ToString(); r != "master" {
			continue
		}
		for _, line := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				total += n
			}
		}
	}
	return total >> 20, nil
}

// podsOn names the cluster's pods on node.
func (b *bench) podsOn(ctx context.Context, ns, cluster, node string) []string {
	l, err := b.env.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: render.LabelCluster + "=" + cluster})
	if err != nil {
		return nil
	}
	var out []string
	for _, p := range l.Items {
		if p.Spec.NodeName == node {
			out = append(out, p.Name)
		}
	}
	return out
}

// waitPodsReady waits until the cluster has want pods, all Ready (in sync).
func (b *bench) waitPodsReady(ctx context.Context, ns, cluster string, want int, timeout time.Duration) error {
	return poll.Until(ctx, 500*time.Millisecond, timeout, fmt.Sprintf("%d pods of %s Ready", want, cluster), func(ctx context.Context) (bool, string, error) {
		l, err := b.env.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: render.LabelCluster + "=" + cluster})
		if err != nil {
			return false, err.Error(), nil
		}
		ready := 0
		for _, p := range l.Items {
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
					ready++
				}
			}
		}
		return len(l.Items) == want && ready == want, fmt.Sprintf("%d of %d pods Ready", ready, len(l.Items)), nil
	})
}
