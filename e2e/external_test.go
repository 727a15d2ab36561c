//go:build e2e

package e2e

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valkey-io/valkey-go"

	"github.com/gomomento/valkey-operator/devcluster/loadbalancer"
	"github.com/gomomento/valkey-operator/internal/loadgen"
)

// TestExternalAccess: a cluster with spec.externalAccess (LoadBalancer, served by the dev
// cluster's load balancer) serves a cluster-mode client whose dialer refuses every address
// but the load balancer's, so it reaches the servers only through the external addresses
// CLUSTER SHARDS and MOVED give it: a continuous writer loses no acknowledged write, and is
// never given a pod address, through a planned failover (a primary's pod deleted), a 3 -> 4
// shard scale-out and a 4 -> 3 scale-in, and each new
// node's address is announced (and named in an Event) without any pod being replaced for it.
func TestExternalAccess(t *testing.T) {
	n := newNamespace(t, "e2e-external")
	const cluster = "ext"
	applyMenu(n)
	n.kubectlIn(fmt.Sprintf(`apiVersion: valkey.gomomento.com/v1alpha1
kind: ValkeyCluster
metadata:
  name: %s
spec:
  configRef: %s
  shards: 3
  replicasPerShard: 1
  externalAccess:
    type: LoadBalancer
    serviceAnnotations:
      example.com/team: payments
`, cluster, exampleConfig), "apply", "-f", "-")
	n.waitState(cluster, "Active", 3*time.Minute)
	n.waitConverged(cluster, 6, 2*time.Minute)
	password := n.secretValue(cluster+"-auth", "password")
	external := &externalDialer{allowed: loadbalancer.Prefix(suite.env.Instance)}
	addrs := n.waitExternal(cluster, 6, password, external)

	c := newExternalClient(t, addrs, password, external)
	w := &day2Writer{c: c, Writer: loadgen.Start(c, loadgen.Options{Prefix: "day2:", Pace: time.Millisecond})}
	w.reader = func() valkey.Client { return newExternalClient(t, n.externalAddrs(cluster), password, external) }
	n.eventually(30*time.Second, 100*time.Millisecond, "writer running through the external addresses", func() (bool, string, error) {
		return w.Acked() >= 200, fmt.Sprintf("%d acknowledged", w.Acked()), nil
	})
	watch := n.watchState(cluster)

	// step runs one operation and waits until the cluster has converged on nodes servers,
	// each announcing its external address, logging when it began and how long it took.
	step := func(what string, nodes int, do func()) {
		start := time.Now()
		t.Logf("e2e: external access: %s from %s", what, start.Format("15:04:05.000"))
		do()
		n.waitConverged(cluster, nodes, 3*time.Minute)
		n.waitExternal(cluster, nodes, password, external)
		t.Logf("e2e: external access: %s in %.1fs", what, time.Since(start).Seconds())
	}
	step("failover and replacement", 6, func() {
		victim := n.nodeWithRole(cluster, "primary")
		n.kubectl("delete", "pod", victim, "--wait=false")
		n.waitRetired(cluster, victim)
	})
	step("scale-out 3->4 shards", 8, func() { n.patchTopology(cluster, 4, 1) })
	step("scale-in 4->3 shards", 6, func() { n.patchTopology(cluster, 3, 1) })

	events := n.kubectl("get", "events", "--field-selector", "reason=ClientAddressAnnounced", "-o", "jsonpath={range .items[*]}{.note}{.message}{\"\\n\"}{end}")
	assert.GreaterOrEqual(t, strings.Count(events, " to clients"), 8, "an Event per announced address:\n%s", events)
	annotations := n.kubectl("get", "svc", "-l", "valkey.gomomento.com/node", "-o", `jsonpath={range .items[*]}{.metadata.annotations.example\.com/team}{"\n"}{end}`)
	assert.Equal(t, 6, strings.Count(annotations, "payments"), "every node's Service carries the annotation, and the retired nodes' went with them")
	// kubectl valkey status, as a user with the example viewer role, shows each node's
	// external address: the ones the Services offer and CLUSTER SHARDS names (waitExternal).
	report := newPluginUser(t, n).status(cluster)
	var shown []string
	for _, node := range report.Nodes {
		shown = append(shown, node.External)
	}
	sort.Strings(shown)
	assert.Equal(t, n.externalAddrs(cluster), shown, "kubectl valkey status: every node's external address")
	t.Logf("e2e: external access: the client's dialer refused %d pod-network dials: %s", external.refused.Load(), external.refusals())
	const what = "failover, scale-out and scale-in through external addresses"
	assert.True(t, w.keepsAcknowledging(30*time.Second), "writes are still acknowledged after %s", what)
	res := w.Stop()
	// No write was rejected: a departing server is forgotten only once it has exited (plan
	// retireLeaving), so its redirects keep its peers' client addresses (before that rule,
	// 12 to 1,120 writes per run failed dialling pod IPs). A rare dial to a pod address on a
	// map refresh, which fails no write, is logged above, not asserted.
	assert.Zero(t, res.Failed, "writes rejected; why: %v", res.Errors)
	finishDay2Stopped(t, w, res, watch, what)
}

// externalDialer lets a client dial only the dev cluster's load-balancer addresses: anything
// else (a pod IP) is refused, as a client outside the pod network would find it.
type externalDialer struct {
	allowed netip.Prefix
	refused atomic.Int64
	mu      sync.Mutex
	// spans is when dials to each refused address were made, first and last.
	spans map[string][2]time.Time
}

func (d *externalDialer) dial(ctx context.Context, dst string, nd *net.Dialer, _ *tls.Config) (net.Conn, error) {
	ap, err := netip.ParseAddrPort(dst)
	if err != nil || !d.allowed.Contains(ap.Addr()) {
		d.refused.Add(1)
		now := time.Now()
		d.mu.Lock()
		if d.spans == nil {
			d.spans = map[string][2]time.Time{}
		}
		s, ok := d.spans[dst]
		if !ok {
			s[0] = now
		}
		s[1] = now
		d.spans[dst] = s
		d.mu.Unlock()
		return nil, fmt.Errorf("refused: %s is not an external address", dst)
	}
	return nd.DialContext(ctx, "tcp", dst)
}

// refusals describes, per refused address, when dials to it were refused.
func (d *externalDialer) refusals() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []string
	for addr, s := range d.spans {
		out = append(out, fmt.Sprintf("%s %s..%s", addr, s[0].Format("15:04:05.000"), s[1].Format("15:04:05.000")))
	}
	sort.Strings(out)
	return strings.Join(out, "; ")
}

// newExternalClient is a cluster-mode client seeded with external addresses only, dialling
// through d.
func newExternalClient(t *testing.T, addrs []string, password string, d *externalDialer) valkey.Client {
	t.Helper()
	c, err := valkey.NewClient(valkey.ClientOption{InitAddress: addrs, Password: password, DisableCache: true,
		Dialer: dialer(), DialCtxFn: d.dial})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

// externalAddrs are the ingress addresses (port 6379) of the cluster's node Services.
func (n *ns) externalAddrs(cluster string) []string {
	n.t.Helper()
	var list struct {
		Items []struct {
			Status struct {
				LoadBalancer struct {
					Ingress []struct {
						IP string `json:"ip"`
					} `json:"ingress"`
				} `json:"loadBalancer"`
			} `json:"status"`
		} `json:"items"`
	}
	out := n.kubectl("get", "svc", "-l", "valkey.gomomento.com/cluster="+cluster+",valkey.gomomento.com/node", "-o", "json")
	require.NoError(n.t, json.Unmarshal([]byte(out), &list))
	var addrs []string
	for _, s := range list.Items {
		for _, in := range s.Status.LoadBalancer.Ingress {
			if in.IP != "" {
				addrs = append(addrs, net.JoinHostPort(in.IP, "6379"))
			}
		}
	}
	sort.Strings(addrs)
	return addrs
}

// waitExternal waits until each of the cluster's want nodes has a Service with an external
// address and CLUSTER SHARDS, asked through each of them, names exactly those addresses.
func (n *ns) waitExternal(cluster string, want int, password string, d *externalDialer) []string {
	n.t.Helper()
	var addrs []string
	n.eventually(time.Minute, 200*time.Millisecond, fmt.Sprintf("%d servers announce their external addresses", want), func() (bool, string, error) {
		addrs = n.externalAddrs(cluster)
		if len(addrs) != want {
			return false, fmt.Sprintf("external addresses %v", addrs), nil
		}
		for _, addr := range addrs {
			named, err := shardsThrough(addr, password, d)
			if err != nil {
				return false, err.Error(), nil
			}
			if strings.Join(named, ",") != strings.Join(addrs, ",") {
				return false, fmt.Sprintf("CLUSTER SHARDS through %s names %v, the Services offer %v", addr, named, addrs), nil
			}
		}
		return true, "", nil
	})
	return addrs
}

// shardsThrough is CLUSTER SHARDS asked through the external address addr: the address of
// every online server it names, sorted.
func shardsThrough(addr, password string, d *externalDialer) ([]string, error) {
	c, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{addr}, Password: password, DisableCache: true,
		ForceSingleClient: true, Dialer: dialer(), DialCtxFn: d.dial})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	ctx, cancel := ctxTimeout(5 * time.Second)
	defer cancel()
	shards, err := c.Do(ctx, c.B().Arbitrary("CLUSTER", "SHARDS").Build()).ToArray()
	if err != nil {
		return nil, err
	}
	var named []string
	for _, s := range shards {
		m, _ := s.AsMap()
		list := m["nodes"]
		nodes, _ := list.ToArray()
		for _, nd := range nodes {
			f, _ := nd.AsMap()
			ipMsg, portMsg, healthMsg := f["ip"], f["port"], f["health"]
			ip, _ := ipMsg.ToString()
			port, _ := portMsg.AsInt64()
			if health, _ := healthMsg.ToString(); health == "online" {
				named = append(named, net.JoinHostPort(ip, strconv.FormatInt(port, 10)))
			}
		}
	}
	sort.Strings(named)
	return named, nil
}
