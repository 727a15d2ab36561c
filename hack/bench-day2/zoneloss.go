package main

import (
	"context"
	"fmt"
	"net"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gomomento/valkey-operator/devcluster/dockernet"
	"github.com/gomomento/valkey-operator/internal/loadgen"
	"github.com/gomomento/valkey-operator/internal/poll"
	"github.com/gomomento/valkey-operator/reconciler/render"
	"github.com/gomomento/valkey-operator/valkeyops/model"
)

// zoneLoss runs the zone-loss scenario and prints its line.
func (b *bench) zoneLoss(ctx context.Context) error {
	const ns, name = "bench-zoneloss", "zone"
	if err := b.env.EnsureNamespace(ctx, ns); err != nil {
		return err
	}
	if _, err := b.kubectl.In(ns).RunWithInput(ctx, fmt.Sprintf("apiVersion: valkey.gomomento.com/v1alpha1\nkind: ValkeyCluster\nmetadata:\n  name: %s\nspec:\n  configRef: %s\n  shards: 3\n  replicasPerShard: 1\n  placement:\n    zoneSpread: required\n",
		name, exampleConfig), "apply", "-f", "-"); err != nil {
		return err
	}
	var password string
	if err := poll.Until(ctx, 500*time.Millisecond, 3*time.Minute, "Secret "+name+"-auth", func(ctx context.Context) (bool, string, error) {
		p, err := b.secret(ctx, ns, name+"-auth", "password")
		password = p
		return err == nil, fmt.Sprint(err), nil
	}); err != nil {
		return err
	}
	if err := b.waitConverged(ctx, ns, name, converge{nodes: 6, balanced: 3}, 4*time.Minute, password); err != nil {
		return err
	}
	operatorPw, err := b.secret(ctx, ns, render.AuthSecretName(name), render.AuthOperatorPasswordKey)
	if err != nil {
		return err
	}
	zone, primaries, err := b.gatherPrimaries(ctx, ns, name, operatorPw)
	if err != nil {
		return err
	}

	ips, err := b.podIPs(ctx, ns, name)
	if err != nil {
		return err
	}
	zoneOf, err := b.zoneOfPods(ctx, ns, name)
	if err != nil {
		return err
	}
	var deadAddrs []string
	survivor := ""
	for pod, ip := range ips {
		if zoneOf[pod].zone == zone {
			deadAddrs = append(deadAddrs, net.JoinHostPort(ip, "6379"))
		} else {
			survivor = net.JoinHostPort(ip, "6379")
		}
	}
	ac, err := clusterClient(clientAddrs(ips), password)
	if err != nil {
		return err
	}
	defer ac.Close()
	sc, err := clusterClient(clientAddrs(ips), password)
	if err != nil {
		return err
	}
	defer sc.Close()
	const prefix = "zone:"
	acked := loadgen.Start(ac, loadgen.Options{Prefix: prefix, Replicas: 1, Pace: *pace})
	served := loadgen.Start(sc, loadgen.Options{Prefix: "served:", Pace: *pace, Record: true})
	stopped := false
	defer func() {
		if !stopped {
			acked.Stop()
			served.Stop()
		}
	}()
	if err := poll.Until(ctx, 100*time.Millisecond, 30*time.Second, "writers running", func(context.Context) (bool, string, error) {
		return acked.Acked() >= 200 && served.Acked() >= 200, fmt.Sprintf("%d and %d acknowledged", acked.Acked(), served.Acked()), nil
	}); err != nil {
		return err
	}

	nodes, err := b.env.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	var lostNodes, ids []string
	for _, n := range nodes.Items {
		if n.Labels[corev1.LabelTopologyZone] != zone {
			continue
		}
		lostNodes = append(lostNodes, n.Name)
		out, err := docker(ctx, "ps", "-q", "--filter", "label="+dockernet.LabelInstance+"="+b.env.Instance,
			"--filter", "label="+dockernet.LabelNode+"="+n.Name)
		if err != nil {
			return err
		}
		ids = append(ids, strings.Fields(out)...)
	}
	if len(ids) == 0 {
		return fmt.Errorf("no container on the nodes of %s (%v)", zone, lostNodes)
	}
	var deadPods []string
	for pod, p := range zoneOf {
		if p.zone == zone {
			deadPods = append(deadPods, pod)
		}
	}
	t0 := time.Now()
	owned := watchOwners(ctx, survivor, operatorPw, deadAddrs, t0)
	defer owned()
	reported := b.watchExited(ctx, ns, deadPods, t0)
	defer reported()
	if _, err := docker(ctx, append([]string{"kill", "--signal", "KILL"}, ids...)...); err != nil {
		return err
	}
	for _, node := range lostNodes {
		if _, err := b.kubectl.Run(ctx, "cordon", node); err != nil {
			return err
		}
	}
	defer func() {
		for _, node := range lostNodes {
			_, _ = b.kubectl.Run(context.Background(), "uncordon", node)
		}
	}()
	logf("zone-loss: killed %d containers on %v (%s, %d primaries) and cordoned them", len(ids), lostNodes, zone, primaries)

	if err := b.waitConverged(ctx, ns, name, converge{nodes: 6, balanced: 3}, *healTimeout, password); err != nil {
		return err
	}
	topology := time.Since(t0)
	if err := poll.Until(ctx, 100*time.Millisecond, time.Minute, "every write taken again", func(context.Context) (bool, string, error) {
		rs := served.Outcomes()
		n := 0
		for i := len(rs) - 1; i >= 0 && rs[i].Acked; i-- {
			n++
		}
		return n >= 100, fmt.Sprintf("%d writes, the last %d taken", len(rs), n), nil
	}); err != nil {
		return err
	}
	res := acked.Stop()
	outcomes := served.Stop()
	stopped = true
	resumed, gap, failed, err := loadgen.Outage(outcomes.Outcomes, t0)
	if err != nil {
		return err
	}
	after, err := b.zoneOfPods(ctx, ns, name)
	if err != nil {
		return err
	}
	for pod, p := range after {
		if p.zone == zone {
			return fmt.Errorf("%s placed in the lost zone %s", pod, zone)
		}
	}
	ips, err = b.podIPs(ctx, ns, name)
	if err != nil {
		return err
	}
	rc, err := clusterClient(clientAddrs(ips), password)
	if err != nil {
		return err
	}
	defer rc.Close()
	mctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	lost, first := loadgen.Missing(mctx, rc, prefix, res.Acked)
	if at := reported(); at > 0 {
		logf("zone-loss: the API showed every killed server exited %.2fs after the kill", at.Seconds())
	}
	if at := owned(); at > 0 {
		logf("zone-loss: a surviving server saw every slot owned by a live primary %.2fs after the kill", at.Seconds())
	}
	logf("zone-loss: replica-acknowledged=%d unconfirmed=%d rejected=%d lost=%d (first: %v); served writes failed after the kill=%d, outage %.2fs ending %.2fs after the kill (%v); topology %.1fs",
		len(res.Acked), res.Unconfirmed, res.Failed, lost, first, failed, gap.Seconds(), resumed.Seconds(), outcomes.Errors, topology.Seconds())
	fmt.Printf("zone-loss: primaries-lost=%d writes-resumed-s=%.2f lost-replica-acked=%d\n", primaries, gap.Seconds(), lost)
	return b.deleteCluster(ctx, ns, name)
}

// placed is where a pod runs.
type placed struct{ node, zone string }

// zoneOfPods maps the cluster's pods (not being deleted) to their node and its zone.
func (b *bench) zoneOfPods(ctx context.Context, ns, cluster string) (map[string]placed, error) {
	nodes, err := b.env.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	zones := map[string]string{}
	for _, n := range nodes.Items {
		zones[n.Name] = n.Labels[corev1.LabelTopologyZone]
	}
	l, err := b.env.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: render.LabelCluster + "=" + cluster})
	if err != nil {
		return nil, err
	}
	out := map[string]placed{}
	for _, p := range l.Items {
		if p.Spec.NodeName != "" && p.DeletionTimestamp == nil {
			out[p.Name] = placed{node: p.Spec.NodeName, zone: zones[p.Spec.NodeName]}
		}
	}
	return out, nil
}

// gatherPrimaries picks the zone hosting pods of the most shards and fails over (CLUSTER
// FAILOVER on a replica: a graceful hand-over) until it holds the primaries of exactly
// min(2, those shards); it returns the zone and how many primaries it holds. Roles are read
// from the servers themselves (ROLE), not from the ValkeyNodes' status.
func (b *bench) gatherPrimaries(ctx context.Context, ns, cluster, operatorPw string) (string, int, error) {
	nodes, err := b.valkeyNodes(ctx, ns, cluster)
	if err != nil {
		return "", 0, err
	}
	ips, err := b.podIPs(ctx, ns, cluster)
	if err != nil {
		return "", 0, err
	}
	where, err := b.zoneOfPods(ctx, ns, cluster)
	if err != nil {
		return "", 0, err
	}
	primary := map[string]bool{}
	for _, n := range nodes {
		role, err := serverRole(ctx, ips[n.Name], operatorPw)
		if err != nil {
			return "", 0, err
		}
		primary[n.Name] = role == "master"
	}
	covered := map[string]map[int]bool{}
	primariesIn := map[string]int{}
	for _, n := range nodes {
		z := where[n.Name].zone
		if covered[z] == nil {
			covered[z] = map[int]bool{}
		}
		covered[z][n.Shard] = true
		if primary[n.Name] {
			primariesIn[z]++
		}
	}
	var zones []string
	for z := range covered {
		zones = append(zones, z)
	}
	sort.Slice(zones, func(i, j int) bool {
		a, c := zones[i], zones[j]
		if len(covered[a]) != len(covered[c]) {
			return len(covered[a]) > len(covered[c])
		}
		if primariesIn[a] != primariesIn[c] {
			return primariesIn[a] > primariesIn[c]
		}
		return a < c
	})
	zone := zones[0]
	want, have := min(2, len(covered[zone])), primariesIn[zone]
	logf("zone-loss: %s hosts pods of %d shard(s) and %d primaries", zone, len(covered[zone]), have)
	for shard := 0; shard < 3; shard++ {
		if !covered[zone][shard] {
			continue
		}
		inZone := false
		for _, n := range nodes {
			if n.Shard == shard && primary[n.Name] {
				inZone = where[n.Name].zone == zone
			}
		}
		promote, demote := !inZone && have < want, inZone && have > want
		if !promote && !demote {
			continue
		}
		for _, n := range nodes {
			if n.Shard == shard && !primary[n.Name] && (where[n.Name].zone == zone) == promote {
				if err := failoverTo(ctx, ips[n.Name], operatorPw); err != nil {
					return "", 0, fmt.Errorf("failover to %s: %w", n.Name, err)
				}
				logf("zone-loss: %s (%s) promoted", n.Name, where[n.Name].zone)
				if promote {
					have++
				} else {
					have--
				}
				break
			}
		}
	}
	// Let the operator's records follow the servers (a ValkeyNode's role is what its
	// server says) before anything is lost.
	err = poll.Until(ctx, 250*time.Millisecond, time.Minute, "ValkeyNode roles follow the servers", func(ctx context.Context) (bool, string, error) {
		now, err := b.valkeyNodes(ctx, ns, cluster)
		if err != nil {
			return false, err.Error(), nil
		}
		for _, n := range now {
			role, err := serverRole(ctx, ips[n.Name], operatorPw)
			if err != nil {
				return false, err.Error(), nil
			}
			if (role == "master") != (n.Role == "primary") {
				return false, fmt.Sprintf("%s: status %s, server %s", n.Name, n.Role, role), nil
			}
		}
		return true, "", nil
	})
	return zone, have, err
}

// watchOwners polls CLUSTER NODES on the server at addr every 50 ms (for the log: how much of
// the outage is the servers', how much the client's); the returned function stops the watch
// and says when, since t0, that server first saw every slot owned by a primary at none of
// the dead addresses (0: not seen).
func watchOwners(ctx context.Context, addr, operatorPw string, dead []string, t0 time.Time) func() time.Duration {
	stop := make(chan struct{})
	done := make(chan time.Duration, 1)
	host, _, _ := net.SplitHostPort(addr)
	go func() {
		var at time.Duration
		defer func() { done <- at }()
		c, err := operatorClient(host, operatorPw)
		if err != nil {
			return
		}
		defer c.Close()
		for {
			qctx, cancel := context.WithTimeout(ctx, time.Second)
			text, err := c.Do(qctx, c.B().ClusterNodes().Build()).ToString()
			cancel()
			if view, perr := model.ParseClusterNodes(text); err == nil && perr == nil {
				owners, live := 0, true
				for _, n := range view {
					if len(n.Slots) > 0 {
						owners++
						for _, d := range dead {
							live = live && n.Addr() != d
						}
					}
				}
				if owners > 0 && live {
					at = time.Since(t0)
					return
				}
			}
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
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

// watchExited polls the pods every 50 ms (for the log: how long the kubelet takes to report
// a dead server); the returned function stops the watch and says when, since t0, the API
// first showed the server container of every one of pods terminated (0: not seen).
func (b *bench) watchExited(ctx context.Context, ns string, pods []string, t0 time.Time) func() time.Duration {
	stop := make(chan struct{})
	done := make(chan time.Duration, 1)
	go func() {
		var at time.Duration
		defer func() { done <- at }()
		for {
			exited := 0
			for _, name := range pods {
				p, err := b.env.Kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					exited++ // gone already
					continue
				}
				for _, c := range p.Status.ContainerStatuses {
					if c.Name == render.ContainerName && c.State.Terminated != nil {
						exited++
					}
				}
			}
			if exited == len(pods) {
				at = time.Since(t0)
				return
			}
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
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
