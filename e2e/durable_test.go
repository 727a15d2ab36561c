//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gomomento/valkey-operator/internal/clusterview"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"
)

// Durable clusters: with spec.persistence each node keeps its data on a claim of its own,
// bound by the dev cluster's real provisioner (a size-limited loop-mounted filesystem per
// volume), and day 2 goes on as without persistence while the claims follow reclaim.

// durableConfig applies a ValkeyConfig named after the namespace with persistence mode AOF
// and the given reclaim, on the example menu's image, and returns its name.
func (n *ns) durableConfig(reclaim string) string {
	n.t.Helper()
	return n.durableConfigSized(reclaim, "64Mi")
}

// durableConfigSized is durableConfig with volumes of size.
func (n *ns) durableConfigSized(reclaim, size string) string {
	n.t.Helper()
	name := n.name
	n.kubectlIn(fmt.Sprintf(`apiVersion: valkey.gomomento.com/v1alpha1
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
    size: %s
    reclaim: %s
`, name, size, reclaim), "apply", "-f", "-")
	n.t.Cleanup(func() { _, _ = kubectlRun("", "delete", "valkeyconfig", name, "--wait=false") })
	return name
}

// claim is one data claim as kubectl shows it.
type claim struct {
	name, node, reclaim, phase, owner string
}

// claims lists the cluster's data claims that are not being deleted, by name.
func (n *ns) claims(cluster string) map[string]claim {
	n.t.Helper()
	out := map[string]claim{}
	list := n.kubectl("get", "pvc", "-l", "valkey.gomomento.com/cluster="+cluster, "-o", "json")
	gjson.Get(list, "items").ForEach(func(_, c gjson.Result) bool {
		if c.Get("metadata.deletionTimestamp").Exists() {
			return true
		}
		cl := claim{
			name:    c.Get("metadata.name").String(),
			node:    c.Get(`metadata.labels.valkey\.gomomento\.com/node`).String(),
			reclaim: c.Get(`metadata.labels.valkey\.gomomento\.com/reclaim`).String(),
			phase:   c.Get("status.phase").String(),
		}
		c.Get("metadata.ownerReferences").ForEach(func(_, o gjson.Result) bool {
			if o.Get("controller").Bool() {
				cl.owner = o.Get("kind").String() + "/" + o.Get("name").String()
			}
			return true
		})
		out[cl.name] = cl
		return true
	})
	return out
}

// waitClaims waits until the cluster's claims are exactly those of want (node names), each
// Bound, labelled with its node, and owned as reclaim says; retained are claims of nodes
// gone that must stay (Retain).
func (n *ns) waitClaims(cluster string, want []string, reclaim string, retained []string) {
	n.t.Helper()
	n.eventually(2*time.Minute, time.Second, fmt.Sprintf("claims of %d nodes (%s) and %d retained", len(want), reclaim, len(retained)), func() (bool, string, error) {
		have := n.claims(cluster)
		var names []string
		for name := range have {
			names = append(names, name)
		}
		sort.Strings(names)
		var expect []string
		for _, node := range slices.Concat(want, retained) {
			expect = append(expect, node+"-data")
		}
		sort.Strings(expect)
		if !slices.Equal(names, expect) {
			return false, fmt.Sprintf("claims %v, want %v", names, expect), nil
		}
		for _, node := range slices.Concat(want, retained) {
			c := have[node+"-data"]
			owner := ""
			if reclaim == "Delete" {
				owner = "ValkeyNode/" + node
			}
			if c.node != node || c.reclaim != reclaim || c.owner != owner || c.phase != "Bound" {
				return false, fmt.Sprintf("claim %+v", c), nil
			}
		}
		return true, "", nil
	})
}

// TestDurableScaleAndRoll: a 3x1 cluster with AOF on volumes serves a writer while it scales
// 3->4->3 shards and rolls every node on a config edit that also turns reclaim to Retain: no
// acknowledged write is lost, the state never leaves Active, every server writes its AOF on
// its own bound volume, and no claim is orphaned: a retired node's claim goes with it under
// Delete and stays, unowned and labelled, under Retain.
func TestDurableScaleAndRoll(t *testing.T) {
	n := newNamespace(t, "e2e-durable")
	const cluster = "durable"
	cfg := n.durableConfig("Delete")
	start := time.Now()
	w, watch := day2Of(t, n, cluster, cfg, 3, 1)
	t.Logf("e2e: durable 3x1 formed in %.1fs (volumes provisioned and bound)", time.Since(start).Seconds())
	n.waitClaims(cluster, n.nodeNames(cluster), "Delete", nil)

	aof := n.eachServer(cluster, "CONFIG", "GET", "appendonly")
	require.Len(t, aof, 6)
	for ip, got := range aof {
		assert.Contains(t, got, "appendonly yes", "server %s writes an AOF", ip)
	}
	// Each volume is the server's data directory: a filesystem of its own, of the claim's
	// size, holding the AOF and nodes.conf (read on the dev cluster's host, where the
	// provisioner mounted it).
	for name, c := range n.claims(cluster) {
		pv := strings.TrimSpace(n.kubectl("get", "pvc", name, "-o", "jsonpath={.spec.volumeName}"))
		path := strings.TrimSpace(n.kubectl("get", "pv", pv, "-o", "jsonpath={.spec.local.path}"))
		var fs syscall.Statfs_t
		require.NoError(t, syscall.Statfs(path, &fs), "claim %s: volume %s at %s", name, pv, path)
		size := int64(fs.Blocks) * fs.Bsize
		assert.True(t, size > 48<<20 && size <= 64<<20, "claim %s: a 64Mi filesystem of its own, not the host's (%d bytes)", name, size)
		entries, err := os.ReadDir(path)
		require.NoError(t, err)
		var files []string
		for _, e := range entries {
			files = append(files, e.Name())
		}
		assert.Contains(t, files, "appendonlydir", "node %s keeps its AOF on its volume", c.node)
		assert.Contains(t, files, "nodes.conf", "node %s keeps its identity on its volume", c.node)
	}

	start = time.Now()
	n.patchTopology(cluster, 4, 1)
	n.waitConverged(cluster, 8, 3*time.Minute)
	n.waitClaims(cluster, n.nodeNames(cluster), "Delete", nil)
	t.Logf("e2e: durable scale-out 3->4 shards in %.1fs", time.Since(start).Seconds())
	start = time.Now()
	n.patchTopology(cluster, 3, 1)
	n.waitConverged(cluster, 6, 3*time.Minute)
	n.waitClaims(cluster, n.nodeNames(cluster), "Delete", nil)
	t.Logf("e2e: durable scale-in 4->3 shards in %.1fs, retired nodes' claims deleted", time.Since(start).Seconds())

	old := n.nodeNames(cluster)
	start = time.Now()
	n.kubectl("patch", "valkeyconfig", cfg, "--type=merge", "-p",
		`{"spec":{"valkey":{"maxmemory-policy":"volatile-lru"},"persistence":{"reclaim":"Retain"}}}`)
	n.waitRolled(cluster, old, 6, 5*time.Minute)
	t.Logf("e2e: durable roll of 3 shards in %.1fs", time.Since(start).Seconds())
	n.waitClaims(cluster, n.nodeNames(cluster), "Retain", old)
	for ip, got := range n.eachServer(cluster, "CONFIG", "GET", "maxmemory-policy") {
		assert.Contains(t, got, "volatile-lru", "server %s runs the edited config", ip)
	}
	events := n.kubectl("get", "events", "--field-selector", "reason=VolumeCreated", "-o", "jsonpath={range .items[*]}{.message}{\"\\n\"}{end}")
	assert.GreaterOrEqual(t, strings.Count(events, "Created PersistentVolumeClaim"), 1, "an Event names each claim made")
	finishDay2(t, w, watch, "durable scaling 3->4->3 and a roll")
}

// restarts is status.restarts of ValkeyNode name.
func (n *ns) restarts(name string) int64 {
	n.t.Helper()
	out := n.kubectl("get", "valkeynode", name, "-o", "json")
	return gjson.Get(out, "status.restarts").Int()
}

// waitRestartedInPlace waits until ValkeyNode name was restarted on its volume (its restart
// count above before) and the cluster has converged again on the same nodes, and returns how
// long that took from start.
func (n *ns) waitRestartedInPlace(cluster, name string, before int64, nodes []string, start time.Time) time.Duration {
	n.t.Helper()
	n.eventually(2*time.Minute, 250*time.Millisecond, name+" restarted on its volume", func() (bool, string, error) {
		r := n.restarts(name)
		return r > before, fmt.Sprintf("restarts=%d", r), nil
	})
	n.waitConverged(cluster, len(nodes), 2*time.Minute)
	took := time.Since(start)
	after := n.nodeNames(cluster)
	sort.Strings(after)
	assert.Equal(n.t, nodes, after, "the same ValkeyNodes: restarted in place, none replaced")
	return took
}

// TestDurableRestarts: in a durable 3x1 (AOF) serving a writer, a primary whose container is
// killed comes back in place (the same ValkeyNode and claim) as a replica of its promoted
// replica, and a primary whose pod is deleted comes back at a new pod IP and is found again:
// no acknowledged write is lost and the state never leaves Active. Then every pod is deleted
// at once: every node comes back on its volume, the servers are introduced again at their new
// addresses, and the cluster is back to 3x1 Active with every key acknowledged before the
// deletion, no data declared lost.
func TestDurableRestarts(t *testing.T) {
	n := newNamespace(t, "e2e-restart")
	const cluster = "restart"
	cfg := n.durableConfig("Delete")
	w, watch := day2Of(t, n, cluster, cfg, 3, 1)
	nodes := n.nodeNames(cluster)
	sort.Strings(nodes)

	crashed := n.nodeWithRole(cluster, "primary")
	start := time.Now()
	n.killContainer(crashed)
	took := n.waitRestartedInPlace(cluster, crashed, 0, nodes, start)
	t.Logf("e2e: durable: kind=crash-in-place converged-s=%.1f", took.Seconds())
	assert.Equal(t, "replica", n.roleOf(cluster, crashed), "the crashed primary came back as its promoted replica's replica")
	assert.Equal(t, int64(1), n.restarts(crashed), "one restart, counted once")

	var deleted string
	for _, s := range n.mustNodes(cluster) {
		if s.Role == "primary" && s.Name != crashed {
			deleted = s.Name
			break
		}
	}
	require.NotEmpty(t, deleted)
	oldIP := n.podsByName(cluster)[deleted].Status.PodIP
	start = time.Now()
	n.kubectl("delete", "pod", deleted, "--wait=false")
	took = n.waitRestartedInPlace(cluster, deleted, 0, nodes, start)
	newIP := n.podsByName(cluster)[deleted].Status.PodIP
	t.Logf("e2e: durable: kind=deleted-pod converged-s=%.1f (%s -> %s)", took.Seconds(), oldIP, newIP)
	assert.NotEqual(t, oldIP, newIP, "the restarted pod has a new IP, and the cluster found it there (cluster check clean)")
	finishDay2(t, w, watch, "a crash in place and a deleted primary pod")

	// Every pod at once: nothing is left running that knows where anyone is.
	password := n.secretValue(cluster+"-auth", "password")
	c := newClusterClient(t, addrsOf(n.podIPs(cluster)), password, nil)
	const keys = 2000
	ctx, cancel := ctxTimeout(time.Minute)
	for i := range keys {
		require.NoError(t, c.Do(ctx, c.B().Set().Key(fmt.Sprintf("full:%d", i)).Value(fmt.Sprint(i)).Build()).Error())
	}
	cancel()
	c.Close()
	watch = n.watchState(cluster)
	counted := map[string]int64{}
	for _, name := range nodes {
		counted[name] = n.restarts(name)
	}
	start = time.Now()
	n.kubectl("delete", "pod", "-l", "valkey.gomomento.com/cluster="+cluster, "--wait=false")
	n.eventually(3*time.Minute, 250*time.Millisecond, "every slot served and writable again", func() (bool, string, error) {
		ips := n.livePodIPs(cluster)
		if len(ips) != 6 {
			return false, fmt.Sprintf("%d pods ready", len(ips)), nil
		}
		return writable(ips, password)
	})
	recovered := time.Since(start)
	n.waitConverged(cluster, 6, 2*time.Minute)
	after := n.nodeNames(cluster)
	sort.Strings(after)
	assert.Equal(t, nodes, after, "every node came back in place")
	for _, name := range nodes {
		assert.Equal(t, counted[name]+1, n.restarts(name), "%s: one more restart, counted once", name)
	}
	c = newClusterClient(t, addrsOf(n.podIPs(cluster)), password, nil)
	ctx, cancel = ctxTimeout(time.Minute)
	defer cancel()
	missing := 0
	for i := range keys {
		if v, err := c.Do(ctx, c.B().Get().Key(fmt.Sprintf("full:%d", i)).Build()).ToString(); err != nil || v != fmt.Sprint(i) {
			missing++
		}
	}
	t.Logf("e2e: durable: kind=full-restart recovered-s=%.1f lost=%d of %d", recovered.Seconds(), missing, keys)
	assert.Zero(t, missing, "every key acknowledged before the deletion is there after a full restart")
	events := n.kubectl("get", "events", "--field-selector", "reason=SlotsLost", "-o", "name")
	assert.Empty(t, strings.TrimSpace(events), "no data is declared lost")
	reintroduced := n.kubectl("get", "events", "--field-selector", "reason=TopologyAction", "-o", "jsonpath={range .items[*]}{.message}{\"\\n\"}{end}")
	assert.Contains(t, reintroduced, "Reintroduce: members know each other at old addresses", "the servers were introduced again")
	assert.Equal(t, []string{"Active"}, watch.states(), "the cluster reports Active throughout the full restart")
}

// mustNodes lists the cluster's ValkeyNodes with their status.
func (n *ns) mustNodes(cluster string) []clusterview.Node {
	n.t.Helper()
	nodes, err := n.nodeStatuses(cluster)
	require.NoError(n.t, err)
	return nodes
}

// roleOf is status.role of ValkeyNode name.
func (n *ns) roleOf(cluster, name string) string {
	n.t.Helper()
	for _, s := range n.mustNodes(cluster) {
		if s.Name == name {
			return s.Role
		}
	}
	return ""
}

// TestDurableFullVolumeIsNamed: a durable server whose volume fills up (its AOF cannot grow)
// refuses writes rather than acknowledge what it cannot keep, and a Warning Event names the
// node and the cause.
func TestDurableFullVolumeIsNamed(t *testing.T) {
	n := newNamespace(t, "e2e-fullvol")
	const cluster = "full"
	cfg := n.durableConfigSized("Delete", "16Mi")
	n.formCluster(cluster, cfg, 1, 0)
	password := n.secretValue(cluster+"-auth", "password")
	c := newClusterClient(t, addrsOf(n.podIPs(cluster)), password, nil)
	ctx, cancel := ctxTimeout(time.Minute)
	defer cancel()
	// One key overwritten: memory holds one value while the AOF grows by one per write.
	value := strings.Repeat("x", 1<<20)
	var refused error
	acked := 0
	for i := 0; i < 40 && refused == nil; i++ {
		if refused = c.Do(ctx, c.B().Set().Key("full:big").Value(value).Build()).Error(); refused == nil {
			acked++
		}
	}
	require.Error(t, refused, "writes are refused once the 16Mi volume is full")
	assert.Contains(t, refused.Error(), "MISCONF", "the server says it cannot write its AOF")
	t.Logf("e2e: full volume: %d 1 MiB writes acknowledged before the server refused: %v", acked, refused)
	node := n.nodeNames(cluster)[0]
	msg := n.waitWarning("PersistenceFailing", node+" (aof_last_write_status: err)", time.Minute)
	t.Logf("e2e: full volume: warning: %s", msg)
	assert.Contains(t, msg, "is the volume full?")
}

// TestDurableBadStorageIsNamed: a ValkeyConfig naming a StorageClass that does not exist holds
// the cluster's nodes back with a Warning naming the class (no claim, no pod is made), and a
// class whose provisioner never answers leaves the claims Pending, named with their nodes in
// a Warning after the slow-start time; nothing of either cluster pretends to run.
func TestDurableBadStorageIsNamed(t *testing.T) {
	n := newNamespace(t, "e2e-badstorage")
	applyMenu(n)
	class := n.name + "-nobody"
	n.kubectlIn(fmt.Sprintf("apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata:\n  name: %s\nprovisioner: example.com/nobody-runs-this\nvolumeBindingMode: WaitForFirstConsumer\n", class), "apply", "-f", "-")
	t.Cleanup(func() { _, _ = kubectlRun("", "delete", "storageclass", class, "--wait=false") })
	for _, c := range []struct{ name, class string }{{"missing", "no-such-class"}, {"unbound", class}} {
		n.kubectlIn(fmt.Sprintf(`apiVersion: valkey.gomomento.com/v1alpha1
kind: ValkeyConfig
metadata:
  name: %[1]s-%[2]s
spec:
  baseRef: standard
  persistence: {mode: AOF, size: 16Mi, storageClassName: %[3]s}
`, n.name, c.name, c.class), "apply", "-f", "-")
		cfg := n.name + "-" + c.name
		t.Cleanup(func() { _, _ = kubectlRun("", "delete", "valkeyconfig", cfg, "--wait=false") })
		n.applyCluster(c.name, cfg, 1, 0)
	}

	msg := n.waitWarning("StorageClassMissing", `StorageClass "no-such-class" of spec.persistence.storageClassName does not exist`, time.Minute)
	t.Logf("e2e: bad storage: %s", msg)
	assert.Empty(t, n.podsByName("missing"), "no pod is made without its claim")
	assert.Empty(t, n.claims("missing"), "no claim is made in a class that does not exist")

	msg = n.waitWarning("VolumeNotBound", "of ValkeyNode unbound-", time.Minute)
	t.Logf("e2e: bad storage: %s", msg)
	assert.Contains(t, msg, `(StorageClass "`+class+`")`)
	for name, c := range n.claims("unbound") {
		assert.Equal(t, "Pending", c.phase, "claim %s never binds", name)
	}
	for _, cluster := range []string{"missing", "unbound"} {
		state := strings.TrimSpace(n.kubectl("get", "valkeycluster", cluster, "-o", "jsonpath={.status.state}"))
		assert.Equal(t, "Creating", state, "cluster %s waits in Creating", cluster)
	}
}
