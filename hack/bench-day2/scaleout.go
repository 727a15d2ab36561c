package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/gomomento/valkey-operator/internal/poll"
	"github.com/gomomento/valkey-operator/reconciler/render"
	"github.com/gomomento/valkey-operator/valkeyops/model"
	"github.com/tidwall/gjson"
)

// serverShape is what the operator's pods run with, copied onto the valkey-cli side's
// containers so both move keys with the same CPU, memory and eviction settings.
type serverShape struct {
	nanoCPUs, memory, memorySwap int64
	settings                     []string // valkey-server arguments: --maxmemory ... etc.
}

// mirroredSettings are the valkey.conf parameters read from a pod and given to the plain
// containers (the rest of their command lines already match: node timeout, no AOF).
var mirroredSettings = []string{"maxmemory", "maxmemory-policy", "save", "appendonly", "cluster-allow-replica-migration"}

// scaleoutRate is ours' side of the scale-out: keys moved per second from two starting points.
type scaleoutRate struct {
	// fromMoveStart starts when the operator begins its Rebalance action (its "topology
	// action" log line), on a cluster whose new shard has joined and passed the operator's
	// health check, the check valkey-cli's side passes (waitHealthy) before its clock starts
	// and valkey-cli is launched: this is the like-for-like figure (ours=).
	fromMoveStart float64
	// fromPatch starts at `kubectl patch`: it adds creating, scheduling, starting and joining
	// the new shard's pods (ours-from-patch=).
	fromPatch float64
}

// scaleoutOurs fills a 3x1 cluster, patches it to 4 shards and returns keys moved per second
// until converged (8 Active nodes, check clean, slots even within 1%).
func (b *bench) scaleoutOurs(ctx context.Context) (scaleoutRate, serverShape, error) {
	var rate scaleoutRate
	const ns, name = "bench-scaleout", "scale"
	var shape serverShape
	password, err := b.waitNewCluster(ctx, ns, name, exampleConfig, 3, 1)
	if err != nil {
		return rate, shape, err
	}
	ips, err := b.podIPs(ctx, ns, name)
	if err != nil {
		return rate, shape, err
	}
	var addrs []string
	var anyPod, anyAddr string
	for pod, ip := range ips {
		addrs = append(addrs, net.JoinHostPort(ip, "6379"))
		anyPod, anyAddr = pod, net.JoinHostPort(ip, "6379")
	}
	// CONFIG GET is the operator's: the default user administers nothing.
	operatorPassword, err := b.secret(ctx, ns, render.AuthSecretName(name), render.AuthOperatorPasswordKey)
	if err != nil {
		return rate, shape, err
	}
	if shape, err = b.podShape(ctx, ns, anyPod, anyAddr, operatorPassword); err != nil {
		return rate, shape, err
	}
	logf("scaleout: pods run with cpus=%g memory=%d and %v", float64(shape.nanoCPUs)/1e9, shape.memory, shape.settings)

	c, err := clusterClient(addrs, password)
	if err != nil {
		return rate, shape, err
	}
	defer c.Close()
	start := time.Now()
	if err := fill(ctx, c, *keys); err != nil {
		return rate, shape, err
	}
	logf("scaleout ours: wrote %d keys in %.1fs", *keys, time.Since(start).Seconds())
	view, err := clusterNodes(ctx, anyAddr, password)
	if err != nil {
		return rate, shape, err
	}
	if total, err := sumDBSize(ctx, view, password); err != nil {
		return rate, shape, err
	} else if total != int64(*keys) {
		return rate, shape, fmt.Errorf("scaleout ours: the primaries hold %d keys after the fill, not %d", total, *keys)
	}
	// The new shard's primary is the slot-holding primary at an address none of the six
	// original pods has (pods keep their IPs; a replica promoted meanwhile does not count).
	oldAddrs := map[string]bool{}
	for _, a := range addrs {
		oldAddrs[a] = true
	}
	var before []string
	for _, n := range view {
		if n.IsPrimary() {
			before = append(before, n.Addr())
		}
	}
	logf("scaleout ours: primaries before the patch: %v", before)
	isNew := func(n model.ClusterNode) bool { return n.IsPrimary() && len(n.Slots) > 0 && !oldAddrs[n.Addr()] }

	t0 := time.Now()
	if _, err := b.kubectl.In(ns).Run(ctx, "patch", "valkeycluster", name, "--type=merge", "-p", `{"spec":{"shards":4}}`); err != nil {
		return rate, shape, err
	}
	// Until the first slot moves, CLUSTER NODES is read every 50 ms so that the start of the
	// like-for-like clock (joined) is known within 50 ms; the convergence check that follows
	// is heavier and runs every 250 ms.
	var joined, firstSlot, lastLog time.Time
	watchStart := func(ctx context.Context) {
		v, err := clusterNodes(ctx, anyAddr, password)
		if err != nil {
			return
		}
		now := time.Now()
		if replica := newShardReplica(v, oldAddrs); joined.IsZero() && replica != "" && replicaSynced(ctx, replica, password) {
			joined = now
			logf("scaleout ours: the new shard joined, its replica synced, %.1fs after the patch", joined.Sub(t0).Seconds())
		}
		for _, n := range v {
			if isNew(n) && firstSlot.IsZero() {
				firstSlot = now
				if joined.IsZero() {
					joined = now // moving before its replica joined: the clock starts here
				}
				logf("scaleout ours: first slot on the new shard %.1fs after the patch", firstSlot.Sub(t0).Seconds())
			}
		}
	}
	err = poll.Until(ctx, 50*time.Millisecond, *scaleTimeout, "scale-out 3->4: first slot moved", func(ctx context.Context) (bool, string, error) {
		watchStart(ctx)
		return !firstSlot.IsZero(), "no slot on a new primary yet", nil
	})
	if err != nil {
		return rate, shape, err
	}
	err = poll.Until(ctx, 250*time.Millisecond, *scaleTimeout, "scale-out 3->4 converged", func(ctx context.Context) (bool, string, error) {
		ok, status := b.convergedNow(ctx, ns, name, converge{nodes: 8, balanced: 4}, password)
		if !ok && time.Since(lastLog) > 20*time.Second {
			lastLog = time.Now()
			logf("scaleout ours: +%.0fs %s", time.Since(t0).Seconds(), firstLine(status))
		}
		return ok, status, nil
	})
	if err != nil {
		return rate, shape, err
	}
	done := time.Now()

	view, err = clusterNodes(ctx, anyAddr, password)
	if err != nil {
		return rate, shape, err
	}
	var moved int64
	var roles []string
	for _, n := range view {
		role := "replica"
		if n.IsPrimary() {
			role = fmt.Sprintf("primary(%d slots)", model.CountSlots(n.Slots))
		}
		roles = append(roles, n.Addr()+"="+role)
	}
	logf("scaleout ours: after: %s", strings.Join(roles, " "))
	for _, n := range view {
		if isNew(n) {
			k, err := dbsize(ctx, n.Addr(), password)
			if err != nil {
				return rate, shape, err
			}
			moved += k
		}
	}
	if total, err := sumDBSize(ctx, view, password); err != nil {
		return rate, shape, err
	} else if total != int64(*keys) {
		return rate, shape, fmt.Errorf("scaleout ours: the primaries hold %d keys after the scale-out, not %d", total, *keys)
	}
	moveStart, err := b.actionStart(ns, name, "Rebalance", t0)
	if err != nil {
		return rate, shape, err
	}
	logf("scaleout ours: moved %d keys in %.1fs from the patch, %.1fs from the new shard joined, %.1fs from the Rebalance's start (%.1fs after the patch), %.1fs from the first slot moved",
		moved, done.Sub(t0).Seconds(), done.Sub(joined).Seconds(), done.Sub(moveStart).Seconds(), moveStart.Sub(t0).Seconds(), done.Sub(firstSlot).Seconds())
	if err := b.deleteCluster(ctx, ns, name); err != nil {
		return rate, shape, err
	}
	rate.fromMoveStart = float64(moved) / done.Sub(moveStart).Seconds()
	rate.fromPatch = float64(moved) / done.Sub(t0).Seconds()
	return rate, shape, nil
}

// newShardReplica returns the address of a replica of a primary at none of oldAddrs (the
// new shard), neither still in handshake, or "" while there is none.
func newShardReplica(view []model.ClusterNode, oldAddrs map[string]bool) string {
	primaries := map[string]bool{}
	for _, n := range view {
		if n.IsPrimary() && !oldAddrs[n.Addr()] && !n.InHandshake() && n.ID != "" {
			primaries[n.ID] = true
		}
	}
	for _, n := range view {
		if !n.IsPrimary() && primaries[n.PrimaryID] && !n.InHandshake() {
			return n.Addr()
		}
	}
	return ""
}

// replicaSynced: the replica at addr has its replication link up and no sync in progress,
// the condition valkey-cli's side waits for (model.Health) before its clock starts.
func replicaSynced(ctx context.Context, addr, password string) bool {
	c, err := nodeClient(addr, password)
	if err != nil {
		return false
	}
	defer c.Close()
	qctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	info, err := c.Do(qctx, c.B().Info().Section("replication").Build()).ToString()
	return err == nil && strings.Contains(info, "master_link_status:up\r\n") && strings.Contains(info, "master_sync_in_progress:0\r\n")
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}

// podShape reads a pod container's CPU and memory limits (docker inspect) and its server's
// mirrored settings (CONFIG GET).
func (b *bench) podShape(ctx context.Context, ns, pod, addr, operatorPassword string) (serverShape, error) {
	var s serverShape
	ids, err := b.containers(ctx, ns, pod)
	if err != nil {
		return s, err
	}
	if len(ids) != 1 {
		return s, fmt.Errorf("want one container for pod %s, found %v", pod, ids)
	}
	out, err := docker(ctx, "inspect", "--format", "{{.HostConfig.NanoCpus}} {{.HostConfig.Memory}} {{.HostConfig.MemorySwap}}", ids[0])
	if err != nil {
		return s, err
	}
	if _, err := fmt.Sscan(out, &s.nanoCPUs, &s.memory, &s.memorySwap); err != nil {
		return s, fmt.Errorf("docker inspect %s: %q: %w", ids[0], out, err)
	}
	for _, p := range mirroredSettings {
		v, err := configGet(ctx, addr, operatorPassword, p)
		if err != nil {
			return s, err
		}
		s.settings = append(s.settings, "--"+p)
		if f := strings.Fields(v); len(f) > 0 {
			s.settings = append(s.settings, f...)
		} else {
			s.settings = append(s.settings, "")
		}
	}
	return s, nil
}

// actionStart is when the operator logged the start of its first topology action of kind on
// cluster ns/name after since (the operator runs on this host and logs sub-second times).
func (b *bench) actionStart(ns, name, kind string, since time.Time) (time.Time, error) {
	data, err := os.ReadFile(b.opLog)
	if err != nil {
		return time.Time{}, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if gjson.Get(line, "msg").String() != "topology action" || gjson.Get(line, "action").String() != kind ||
			gjson.Get(line, "ValkeyCluster.namespace").String() != ns || gjson.Get(line, "ValkeyCluster.name").String() != name {
			continue
		}
		if t, ok := logTime(line); ok && !t.Before(since) {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("the operator's log shows no %s of %s/%s after %s", kind, ns, name, since.Format(time.RFC3339Nano))
}
