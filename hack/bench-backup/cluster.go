package main

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/gomomento/valkey-operator/reconciler/render"
	"github.com/gomomento/valkey-operator/valkeyops/model"
)

// cluster is an Active cluster and clients to it.
type cluster struct {
	ns, name   string
	operatorPw string
	client     valkey.Client // cluster mode, default user
	seed       string        // one server's address
	tls        *tls.Config   // nil: plain TCP
	closing    sync.Once
}

// close closes the client, once: a cluster is closed before it is deleted and again by a
// deferred close on the way out.
func (c *cluster) close() { c.closing.Do(c.client.Close) }

// activeCluster applies the cluster of spec and waits until it is Active, then connects
// (TLS verified by m unless m is nil). It returns how long it took from kubectl apply to
// Active: the connecting is the bench's, not the cluster's, and is left out.
func (b *bench) activeCluster(ctx context.Context, ns string, spec clusterSpec, m *tlsMaterial) (*cluster, time.Duration, error) {
	start := time.Now()
	if err := b.applyCluster(ctx, ns, spec); err != nil {
		return nil, 0, err
	}
	if _, err := b.waitStatus(ctx, clusterGVR, ns, spec.name, "state", "Active", *stepTimeout); err != nil {
		return nil, 0, err
	}
	took := time.Since(start)
	c, err := b.connect(ctx, ns, spec.name, m)
	return c, took, err
}

// connect opens clients to the Active cluster name of ns.
func (b *bench) connect(ctx context.Context, ns, name string, m *tlsMaterial) (*cluster, error) {
	password, err := b.secret(ctx, ns, name+"-auth", render.AuthPasswordKey)
	if err != nil {
		return nil, err
	}
	operatorPw, err := b.secret(ctx, ns, name+"-auth", render.AuthOperatorPasswordKey)
	if err != nil {
		return nil, err
	}
	ips, err := b.podIPs(ctx, ns, name)
	if err != nil {
		return nil, err
	}
	if len(ips) == 0 {
		return nil, fmt.Errorf("%s/%s is Active without pod IPs", ns, name)
	}
	addrs := make([]string, len(ips))
	for i, ip := range ips {
		addrs[i] = net.JoinHostPort(ip, "6379")
	}
	c, err := valkey.NewClient(valkey.ClientOption{InitAddress: addrs, Password: password, DisableCache: true,
		TLSConfig: m.clientConfig(), Dialer: net.Dialer{Timeout: 5 * time.Second}})
	if err != nil {
		return nil, err
	}
	return &cluster{ns: ns, name: name, operatorPw: operatorPw, client: c, seed: addrs[0], tls: m.clientConfig()}, nil
}

// nodes is the cluster's CLUSTER NODES, asked as the operator's user.
func (c *cluster) nodes(ctx context.Context) ([]model.ClusterNode, error) {
	nc, err := c.nodeClient(c.seed)
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	text, err := nc.Do(ctx, nc.B().ClusterNodes().Build()).ToString()
	if err != nil {
		return nil, err
	}
	return model.ParseClusterNodes(text)
}

func (c *cluster) nodeClient(addr string) (valkey.Client, error) {
	return valkey.NewClient(valkey.ClientOption{InitAddress: []string{addr}, Username: model.OperatorUser, Password: c.operatorPw,
		ForceSingleClient: true, DisableCache: true, TLSConfig: c.tls, Dialer: net.Dialer{Timeout: 5 * time.Second}})
}

// digest is the number of keys starting with prefix and a SHA-256 over every such key and
// its value, sorted by key: the keys come from SCAN MATCH on every primary holding slots,
// the values from pipelined GETs.
func (c *cluster) digest(ctx context.Context, prefix string) (int, string, error) {
	view, err := c.nodes(ctx)
	if err != nil {
		return 0, "", err
	}
	var all []string
	for _, n := range view {
		if !n.IsPrimary() || len(n.Slots) == 0 {
			continue
		}
		nc, err := c.nodeClient(n.Addr())
		if err != nil {
			return 0, "", err
		}
		cursor := uint64(0)
		for {
			e, err := nc.Do(ctx, nc.B().Scan().Cursor(cursor).Match(prefix+"*").Count(10000).Build()).AsScanEntry()
			if err != nil {
				nc.Close()
				return 0, "", fmt.Errorf("SCAN on %s: %w", n.Addr(), err)
			}
			all = append(all, e.Elements...)
			if cursor = e.Cursor; cursor == 0 {
				break
			}
		}
		nc.Close()
	}
	slices.Sort(all)
	all = slices.Compact(all)
	h := sha256.New()
	const batch = 5000
	for i := 0; i < len(all); i += batch {
		part := all[i:min(len(all), i+batch)]
		cmds := make(valkey.Commands, len(part))
		for j, k := range part {
			cmds[j] = c.client.B().Get().Key(k).Build()
		}
		for j, r := range c.client.DoMulti(ctx, cmds...) {
			v, err := r.ToString()
			if err != nil {
				return 0, "", fmt.Errorf("GET %s: %w", part[j], err)
			}
			h.Write([]byte(part[j]))
			h.Write([]byte{0})
			h.Write([]byte(v))
			h.Write([]byte{0})
		}
	}
	return len(all), hex.EncodeToString(h.Sum(nil)), nil
}

// primarySlots is the slot ranges each primary serves as CLUSTER NODES shows them: one
// sorted list of "N-M" per primary holding slots, the lists sorted.
func (c *cluster) primarySlots(ctx context.Context) ([][]string, error) {
	view, err := c.nodes(ctx)
	if err != nil {
		return nil, err
	}
	var out [][]string
	for _, n := range view {
		if !n.IsPrimary() || len(n.Slots) == 0 {
			continue
		}
		var rs []string
		for _, r := range model.CompactSlots(model.ExpandSlots(n.Slots)) {
			rs = append(rs, r.String())
		}
		out = append(out, rs)
	}
	sortRangeLists(out)
	return out, nil
}

func sortRangeLists(l [][]string) {
	slices.SortFunc(l, func(a, b []string) int { return strings.Compare(strings.Join(a, " "), strings.Join(b, " ")) })
}

// balanced says why the slots of l (from primarySlots) are not shared out among shards
// primaries, each within one of 16384/shards and all 16384 covered; "" when they are.
func balanced(l [][]string, shards int) string {
	if len(l) != shards {
		return fmt.Sprintf("%d primaries hold slots, want %d: %v", len(l), shards, l)
	}
	covered := map[int]bool{}
	for _, s := range l {
		rs, err := model.ParseRanges(s)
		if err != nil {
			return err.Error()
		}
		n := model.CountSlots(rs)
		if d := n - model.SlotCount/shards; d < -1 || d > 1 {
			return fmt.Sprintf("a primary holds %d slots, not %d±1: %v", n, model.SlotCount/shards, l)
		}
		for _, slot := range model.ExpandSlots(rs) {
			covered[slot] = true
		}
	}
	if len(covered) != model.SlotCount {
		return fmt.Sprintf("%d of %d slots covered: %v", len(covered), model.SlotCount, l)
	}
	return ""
}
