package main

import (
	"context"
	"fmt"
	"net"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gomomento/valkey-operator/internal/poll"
	"github.com/gomomento/valkey-operator/reconciler/render"
)

// outage deletes every pod of a 3x1 cluster at once (no persistence: the data goes with
// them) and measures how soon the cluster serves every slot and takes writes again, by
// itself; the data-loss Warning must be there. It prints
//
//	outage: shards=3 replicas=1 recovered-s=<x> converged-s=<y> warning=<SlotsLost message>
func (b *bench) outage(ctx context.Context) error {
	const ns, name, shards, replicas = "bench-outage", "outage", 3, 1
	if err := b.env.EnsureNamespace(ctx, ns); err != nil {
		return err
	}
	password, err := b.waitNewCluster(ctx, ns, name, exampleConfig, shards, replicas)
	if err != nil {
		return err
	}
	old, err := b.podIPs(ctx, ns, name)
	if err != nil {
		return err
	}
	t0 := time.Now()
	if _, err := b.kubectl.In(ns).Run(ctx, "delete", "pod", "-l", render.LabelCluster+"="+name, "--wait=false"); err != nil {
		return err
	}
	if err := poll.Until(ctx, 100*time.Millisecond, 3*time.Minute, "every slot served and writable again", func(ctx context.Context) (bool, string, error) {
		return b.writableAgain(ctx, ns, name, password, old, shards*(1+replicas))
	}); err != nil {
		return err
	}
	recovered := time.Since(t0)
	if err := b.waitConverged(ctx, ns, name, converge{nodes: shards * (1 + replicas), balanced: shards}, 3*time.Minute, password); err != nil {
		return err
	}
	converged := time.Since(t0)
	var warning string
	if err := poll.Until(ctx, 250*time.Millisecond, 30*time.Second, "the SlotsLost Warning", func(ctx context.Context) (bool, string, error) {
		l, err := b.env.Kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=SlotsLost"})
		if err != nil {
			return false, err.Error(), nil
		}
		for _, e := range l.Items {
			if e.Type == corev1.EventTypeWarning && strings.Contains(e.Message, "every copy of the cluster's data was lost at ") {
				warning = e.Message
				return true, "", nil
			}
		}
		return false, fmt.Sprintf("%d SlotsLost Events, none saying the data was lost", len(l.Items)), nil
	}); err != nil {
		return err
	}
	fmt.Printf("outage: shards=%d replicas=%d recovered-s=%.1f converged-s=%.1f warning=%q\n", shards, replicas, recovered.Seconds(), converged.Seconds(), warning)
	return b.deleteCluster(ctx, ns, name)
}

// writableAgain reports whether the cluster's pods are all new (none of a name in old) and
// the cluster serves every slot again (servesEverySlot).
func (b *bench) writableAgain(ctx context.Context, ns, name, password string, old map[string]string, pods int) (bool, string, error) {
	ips, err := b.podIPs(ctx, ns, name)
	if err != nil {
		return false, err.Error(), nil
	}
	var addrs []string
	for pod, ip := range ips {
		if _, was := old[pod]; was {
			return false, pod + " not gone yet", nil
		}
		addrs = append(addrs, net.JoinHostPort(ip, "6379"))
	}
	if len(addrs) < pods {
		return false, fmt.Sprintf("%d of %d new pods have an IP", len(addrs), pods), nil
	}
	return servesEverySlot(ctx, addrs, password, 0)
}

// servesEverySlot reports whether `valkey-cli --cluster check` at the first of addrs finds
// every slot covered and a fresh cluster-mode client on addrs writes and reads back keys on
// every shard; connectTimeout is clusterCheck's.
func servesEverySlot(ctx context.Context, addrs []string, password string, connectTimeout time.Duration) (bool, string, error) {
	out, err := clusterCheck(ctx, addrs[0], password, connectTimeout)
	if err != nil || !strings.Contains(out, "[OK] All 16384 slots covered.") || strings.Contains(out, "[ERR]") {
		return false, "cluster check: " + firstLine(out), nil
	}
	c, err := clusterClient(addrs, password)
	if err != nil {
		return false, err.Error(), nil
	}
	defer c.Close()
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	// 64 keys land on every one of 3 shards with overwhelming likelihood; a key that
	// cannot be written means a shard does not serve yet.
	for i := range 64 {
		key := fmt.Sprintf("outage:after:%d", i)
		if err := c.Do(wctx, c.B().Set().Key(key).Value(key).Build()).Error(); err != nil {
			return false, fmt.Sprintf("write %s: %v", key, err), nil
		}
		if v, err := c.Do(wctx, c.B().Get().Key(key).Build()).ToString(); err != nil || v != key {
			return false, fmt.Sprintf("read %s: %q %v", key, v, err), nil
		}
	}
	return true, "", nil
}
