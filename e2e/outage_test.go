//go:build e2e

package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gomomento/valkey-operator/reconciler/render"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valkey-io/valkey-go"
)

// TestOutage deletes every pod of a 3x1 cluster at once (no persistence: every copy of the
// data goes with them). The cluster comes back by itself, still Active: its replacements form
// the empty topology in one Join (no Rebalance afterwards), every slot serves and takes
// writes, and a Warning Event says the data was lost and when.
func TestOutage(t *testing.T) {
	n := newNamespace(t, "e2e-outage")
	const cluster = "outage"
	n.formCluster(cluster, exampleConfig, 3, 1)
	password := n.secretValue(cluster+"-auth", "password")
	before := newClusterClient(t, addrsOf(n.podIPs(cluster)), password, nil)
	ctx, cancel := ctxTimeout(10 * time.Second)
	require.NoError(t, before.Do(ctx, before.B().Set().Key("outage:before").Value("v").Build()).Error())
	cancel()
	watch := n.watchState(cluster)

	start := time.Now()
	n.kubectl("delete", "pod", "-l", render.LabelCluster+"="+cluster, "--wait=false")
	n.eventually(90*time.Second, 250*time.Millisecond, "every slot served and writable again", func() (bool, string, error) {
		ips := n.livePodIPs(cluster)
		if len(ips) != 6 {
			return false, fmt.Sprintf("%d new pods ready", len(ips)), nil
		}
		return writable(ips, password)
	})
	recovered := time.Since(start)
	t.Logf("e2e: outage: recovered-s=%.1f (every pod of a 3x1 cluster deleted; all 16384 slots served and writable again)", recovered.Seconds())
	n.waitConverged(cluster, 6, 2*time.Minute)
	t.Logf("e2e: outage: converged (all six new nodes Active) %.1fs after the deletion", time.Since(start).Seconds())

	lost := n.waitWarning("SlotsLost", "every copy of the cluster's data was lost at ", 30*time.Second)
	t.Logf("e2e: outage: warning: %s", lost)
	assert.Regexp(t, `lost at 20\d\d-\d\d-\d\dT\d\d:\d\d:\d\dZ \(all 6 nodes gone\)`, lost, "the Warning says when, and how many nodes went")
	events := n.kubectl("get", "events", "--field-selector", "reason=TopologyAction", "-o", "jsonpath={range .items[*]}{.message}{\"\\n\"}{end}")
	assert.NotContains(t, events, "Rebalance", "the empty topology is formed directly, nothing moved afterwards")
	assert.NotContains(t, events, "AssignSlots", "no node is given every slot")
	assert.Contains(t, events, "Join: no server holds or knows any slot")

	c := newClusterClient(t, addrsOf(n.livePodIPs(cluster)), password, nil)
	ctx, cancel = ctxTimeout(10 * time.Second)
	defer cancel()
	err := c.Do(ctx, c.B().Get().Key("outage:before").Build()).Error()
	assert.True(t, valkey.IsValkeyNil(err), "the key written before the outage is gone with the data (got %v)", err)
	assert.Equal(t, []string{"Active"}, watch.states(), "the cluster reports Active throughout")
}

// livePodIPs are the IPs of the cluster's pods that are not being deleted and whose server
// container is ready (it answers; the pod's own readiness may wait for more).
func (n *ns) livePodIPs(cluster string) []string {
	var ips []string
	for _, p := range n.podsByName(cluster) {
		if p.DeletionTimestamp != nil || p.Status.PodIP == "" {
			continue
		}
		for _, c := range p.Status.ContainerStatuses {
			if c.Name == render.ContainerName && c.Ready {
				ips = append(ips, p.Status.PodIP)
			}
		}
	}
	return ips
}

// writable reports whether the servers at ips serve every slot (valkey-cli --cluster check)
// and a cluster-mode client writes and reads back keys across every shard.
func writable(ips []string, password string) (bool, string, error) {
	out, err := clusterCheck(ips[0]+":6379", password)
	if err != nil || !strings.Contains(out, "[OK] All 16384 slots covered.") || strings.Contains(out, "[ERR]") {
		return false, "cluster check: " + stripANSI(out), nil
	}
	c, err := valkey.NewClient(valkey.ClientOption{InitAddress: addrsOf(ips), Password: password, DisableCache: true, Dialer: dialer()})
	if err != nil {
		return false, err.Error(), nil
	}
	defer c.Close()
	ctx, cancel := ctxTimeout(10 * time.Second)
	defer cancel()
	for i := 0; i < 100; i++ {
		key := fmt.Sprintf("outage:after:%d", i)
		if err := c.Do(ctx, c.B().Set().Key(key).Value(key).Build()).Error(); err != nil {
			return false, fmt.Sprintf("write %s: %v", key, err), nil
		}
		if v, err := c.Do(ctx, c.B().Get().Key(key).Build()).ToString(); err != nil || v != key {
			return false, fmt.Sprintf("read %s: %q %v", key, v, err), nil
		}
	}
	return true, "", nil
}
