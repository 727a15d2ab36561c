package main

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/valkey-io/valkey-go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/gomomento/valkey-operator/crds"

	"github.com/gomomento/valkey-operator/internal/loadgen"
	"github.com/gomomento/valkey-operator/internal/poll"
	"github.com/gomomento/valkey-operator/internal/valkeycli"
	"github.com/gomomento/valkey-operator/reconciler/render"
	"github.com/gomomento/valkey-operator/reconciler/views"
)

// The fleet scenario (make bench-fleet, issue #14): what many clusters cost one operator and
// the API server. It prints exactly these lines:
//
//	fleet: single-apply-to-active-s=<x>
//	fleet: single-apply-breakdown created=<s> nodes=<s> objects=<s> scheduled=<s> started=<s> listening=<s> ready=<s> formed=<s> active=<s>
//	fleet: clusters=<n> active-p50-s=<x> active-p95-s=<x> active-max-s=<x>
//	fleet: operator-rss-mib formation=<x> idle=<x> cpu-s=<x> container-working-set-mib=<x>
//	fleet: idle-api-writes=<n> lease-writes-per-min=<x> idle-api-reads-per-min=<x>
//	fleet: idle-valkey-cmds-per-node-min=<x>
//	fleet: cross-cluster-delay-s=<x>
//	fleet: teardown-s=<x>
//
// single-apply-to-active: one 3x1 cluster applied alone, from `kubectl apply` to Active;
// single-apply-breakdown: where that time went (see breakdown.go). -fleet-single-only prints
// just these two lines, -fleet-single-runs times each run (a fresh cluster each time).
// clusters/active-*: -fleet-small 1x0 clusters and -fleet-large 3x1 clusters applied in one
// `kubectl apply`, each one's time from then until its status first reads Active. The
// operator is deploy/'s Deployment as shipped (shipped.go; -fleet-host-operator: a host
// process without leader election, as measured before). rss and cpu are read from /proc of
// the leader's process: the largest RSS during formation and during the idle window, and CPU
// seconds (user+system) over formation and idle together; container-working-set-mib is its
// container's memory cgroup at the end of the idle window (usage less inactive file pages, as
// the kubelet reports it; -1 for a host process). idle-api-* are the operator's own client
// requests (controller-runtime's rest_client_requests_total on the metrics endpoints of both
// replicas) over the idle window: writes are POST/PUT/PATCH/DELETE less the Lease's changes,
// which lease-writes-per-min counts (a watch on the Lease: the leader's renewals); reads are
// GET (list and watch included, the standby's Lease reads too). idle-valkey-cmds-per-node-min: INFO commandstats calls on every
// server over the window, less the sampler's own two commands per server, per server per
// minute (REPLCONF left out: replicas acknowledge their primary's stream once a second by
// themselves). cross-cluster-delay: a 1x0 cluster's apply-to-Active while a 3x1 cluster of
// -fleet-keys keys scales out to 4 shards, less the same cluster's time applied while the
// fleet is idle. teardown: from deleting every cluster until no pod, ValkeyNode, Service,
// ConfigMap or Secret the operator made is left in the namespace.

var (
	fleetMode  = flag.Bool("fleet", false, "run the fleet scenario instead of the day-2 ones (make bench-fleet)")
	fleetSmall = flag.Int("fleet-small", 50, "1x0 clusters applied at once")
	fleetLarge = flag.Int("fleet-large", 5, "3x1 clusters applied with them")
	fleetIdle  = flag.Duration("fleet-idle", 5*time.Minute, "idle window measured after formation")
	fleetKeys  = flag.Int("fleet-keys", 1_000_000, "keys in the cluster whose scale-out runs while another cluster forms")
	// The single-apply figure alone takes a minute (dev cluster start included) instead of
	// the fleet's quarter of an hour, so a change to formation latency can be checked on
	// its own.
	fleetSingleOnly = flag.Bool("fleet-single-only", false, "with -fleet: measure only single-apply-to-active (and its breakdown), then stop")
	fleetSingleRuns = flag.Int("fleet-single-runs", 1, "with -fleet: how many times single-apply-to-active is measured (each printed)")
)

const fleetNamespace = "fleet"

var clustersGVR = schema.GroupVersionResource{Group: crds.Group, Version: crds.Version, Resource: "valkeyclusters"}

func (b *bench) fleet(ctx context.Context) error {
	if err := b.env.EnsureNamespace(ctx, fleetNamespace); err != nil {
		return err
	}
	for range max(*fleetSingleRuns, 1) {
		if err := b.singleApply(ctx); err != nil {
			return err
		}
	}
	if *fleetSingleOnly {
		return nil
	}

	pid, err := b.fleetOp.pid(ctx)
	if err != nil {
		return err
	}
	usage := startUsage(pid)
	defer usage.stop()
	names, took, err := b.formFleet(ctx)
	if err != nil {
		return err
	}
	sorted := slices.Sorted(slices.Values(took))
	fmt.Printf("fleet: clusters=%d active-p50-s=%.2f active-p95-s=%.2f active-max-s=%.2f\n", len(names),
		percentile(sorted, 50).Seconds(), percentile(sorted, 95).Seconds(), sorted[len(sorted)-1].Seconds())
	formationRSS := usage.mark()

	if err := b.idleWindow(ctx, names, usage, formationRSS); err != nil {
		return err
	}
	if err := b.crossClusterDelay(ctx); err != nil {
		return err
	}
	start := time.Now()
	if _, err := b.kubectl.In(fleetNamespace).Run(ctx, "delete", "valkeyclusters", "--all", "--wait=false"); err != nil {
		return err
	}
	if err := b.waitNothingOwned(ctx, 5*time.Minute); err != nil {
		return err
	}
	fmt.Printf("fleet: teardown-s=%.2f\n", time.Since(start).Seconds())
	return nil
}

// singleApply times one 3x1 cluster from `kubectl apply` to Active, prints the figure and its
// breakdown, and deletes the cluster again (waiting until its containers are gone).
func (b *bench) singleApply(ctx context.Context) error {
	const name, shards, replicas = "single", 3, 1
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	bd, err := b.watchBreakdown(wctx, fleetNamespace, name, shards*(1+replicas))
	if err != nil {
		return err
	}
	single, err := b.timeToActive(ctx, name, shards, replicas, bd.begin)
	if err != nil {
		return err
	}
	fmt.Printf("fleet: single-apply-to-active-s=%.2f\n", single.Seconds())
	// The watch may report Active a moment after the poll did.
	_ = poll.Until(ctx, 10*time.Millisecond, 2*time.Second, "breakdown complete", func(context.Context) (bool, string, error) {
		_, ok := bd.reached("active")
		return ok, bd.line(), nil
	})
	logf("single-apply pods: %s", bd.podTimes())
	logf("single-apply containers (docker): %s", b.dockerTimes(ctx, bd, fleetNamespace))
	fmt.Println(bd.line())
	logf("single-apply operator log:\n%s", b.operatorTimeline(ctx, bd.begun(), time.Now()))
	return b.deleteCluster(ctx, fleetNamespace, name)
}

// timeToActive applies one cluster and times it until Active. began, when given, is told
// the start time.
func (b *bench) timeToActive(ctx context.Context, name string, shards, replicas int, began ...func(time.Time)) (time.Duration, error) {
	start := time.Now()
	for _, f := range began {
		f(start)
	}
	if err := b.applyCluster(ctx, fleetNamespace, name, "standard", shards, replicas); err != nil {
		return 0, err
	}
	err := poll.Until(ctx, 50*time.Millisecond, 3*time.Minute, name+" Active", func(ctx context.Context) (bool, string, error) {
		states, err := b.clusterStates(ctx)
		return states[name] == views.StateActive, states[name], err
	})
	return time.Since(start), err
}

// formFleet applies the fleet in one kubectl apply and returns each cluster's time to Active.
func (b *bench) formFleet(ctx context.Context) ([]string, []time.Duration, error) {
	var doc strings.Builder
	var names []string
	add := func(name string, shards, replicas int) {
		names = append(names, name)
		fmt.Fprintf(&doc, "---\napiVersion: valkey.gomomento.com/v1alpha1\nkind: ValkeyCluster\nmetadata:\n  name: %s\nspec:\n  configRef: standard\n  shards: %d\n  replicasPerShard: %d\n", name, shards, replicas)
	}
	for i := range *fleetSmall {
		add(fmt.Sprintf("small-%02d", i), 1, 0)
	}
	for i := range *fleetLarge {
		add(fmt.Sprintf("large-%d", i), 3, 1)
	}
	start := time.Now()
	if _, err := b.kubectl.In(fleetNamespace).RunWithInput(ctx, doc.String(), "apply", "-f", "-"); err != nil {
		return nil, nil, err
	}
	logf("fleet of %d clusters applied", len(names))
	active := map[string]time.Duration{}
	err := poll.Until(ctx, 100*time.Millisecond, 5*time.Minute, "every cluster Active", func(ctx context.Context) (bool, string, error) {
		states, err := b.clusterStates(ctx)
		if err != nil {
			return false, err.Error(), nil
		}
		now := time.Since(start)
		for _, n := range names {
			if _, ok := active[n]; !ok && states[n] == views.StateActive {
				active[n] = now
			}
		}
		return len(active) == len(names), fmt.Sprintf("%d of %d Active", len(active), len(names)), nil
	})
	if err != nil {
		return nil, nil, err
	}
	var took []time.Duration
	for _, n := range names {
		took = append(took, active[n])
	}
	logf("fleet Active after %.1fs", slices.Max(took).Seconds())
	return names, took, nil
}

// clusterStates maps every ValkeyCluster of the fleet namespace to its status.state.
func (b *bench) clusterStates(ctx context.Context) (map[string]string, error) {
	l, err := b.dyn.Resource(clustersGVR).Namespace(fleetNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for i := range l.Items {
		c := views.Cluster{U: &l.Items[i]}
		out[c.U.GetName()] = c.Status().State
	}
	return out, nil
}

// crossClusterDelay times a 1x0 cluster's formation while the fleet is idle, and again while
// a 3x1 cluster full of keys scales out, and prints the difference.
func (b *bench) crossClusterDelay(ctx context.Context) error {
	base, err := b.timeToActive(ctx, "probe-idle", 1, 0)
	if err != nil {
		return err
	}
	const long = "large-0"
	pw, err := b.secret(ctx, fleetNamespace, render.AuthSecretName(long), render.AuthPasswordKey)
	if err != nil {
		return err
	}
	ips, err := b.podIPs(ctx, fleetNamespace, long)
	if err != nil {
		return err
	}
	o := valkey.ClientOption{Password: pw, DisableCache: true}
	for _, ip := range ips {
		o.InitAddress = append(o.InitAddress, ip+":6379")
	}
	c, err := valkey.NewClient(o)
	if err != nil {
		return err
	}
	defer c.Close()
	logf("filling %s with %d keys", long, *fleetKeys)
	if err := loadgen.Fill(ctx, c, "fleet:", *fleetKeys, 2000, nil); err != nil {
		return err
	}
	if _, err := b.kubectl.In(fleetNamespace).Run(ctx, "patch", "valkeycluster", long, "--type=merge", "-p", `{"spec":{"shards":4}}`); err != nil {
		return err
	}
	// Wait until keys are on their way to the new shard, then form another cluster.
	err = poll.Until(ctx, 100*time.Millisecond, 3*time.Minute, long+"'s slot move under way", func(ctx context.Context) (bool, string, error) {
		n, err := b.newShardKeys(ctx, long, pw)
		return n > 0, fmt.Sprintf("%d keys on the new shard", n), err
	})
	if err != nil {
		return err
	}
	during, err := b.timeToActive(ctx, "probe-busy", 1, 0)
	if err != nil {
		return err
	}
	moved, _ := b.newShardKeys(ctx, long, pw)
	logf("probe formed in %.2fs idle, %.2fs during the scale-out (new shard held %d keys then)", base.Seconds(), during.Seconds(), moved)
	fmt.Printf("fleet: cross-cluster-delay-s=%.2f\n", (during - base).Seconds())
	return nil
}

// newShardKeys counts the keys on the primary of shard 3 of cluster (0 until it exists).
func (b *bench) newShardKeys(ctx context.Context, cluster, password string) (int64, error) {
	nodes, err := b.valkeyNodes(ctx, fleetNamespace, cluster)
	if err != nil {
		return 0, err
	}
	ips, err := b.podIPs(ctx, fleetNamespace, cluster)
	if err != nil {
		return 0, err
	}
	var total int64
	for _, n := range nodes {
		ip := ips[n.Name] // a node's pod bears its name
		if n.Shard != 3 || ip == "" {
			continue
		}
		out, err := valkeycli.Command(ctx, password, "-h", ip, "DBSIZE").Output()
		if err != nil {
			continue // not serving yet
		}
		v, _ := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
		total = max(total, v)
	}
	return total, nil
}

// waitNothingOwned waits until the namespace holds nothing the operator made.
func (b *bench) waitNothingOwned(ctx context.Context, timeout time.Duration) error {
	sel := render.LabelManagedBy + "=" + render.ManagedBy
	kinds := []string{"valkeyclusters", "valkeynodes", "pods", "services", "configmaps", "secrets"}
	return poll.Until(ctx, 250*time.Millisecond, timeout, "everything of the fleet gone", func(ctx context.Context) (bool, string, error) {
		left := 0
		for _, k := range kinds {
			args := []string{"get", k, "-o", "name"}
			if k != "valkeyclusters" {
				args = append(args, "-l", sel)
			}
			out, err := b.kubectl.In(fleetNamespace).Run(ctx, args...)
			if err != nil {
				return false, err.Error(), nil
			}
			left += len(strings.Fields(out))
		}
		return left == 0, fmt.Sprintf("%d objects left", left), nil
	})
}
