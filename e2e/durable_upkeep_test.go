//go:build e2e

package e2e

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"

	"github.com/gomomento/valkey-operator/internal/loadgen"
	"github.com/gomomento/valkey-operator/internal/testcerts"
)

// Upkeep of a durable cluster: the day-2 operations that do not change its shape (a larger
// volume, a re-issued certificate, a new operator password, a restarted pod, a node drained
// for maintenance) go on with persistence on as without it, and leave each server on a claim
// of the size asked.

// volumeSize is what one data claim says about its size, and where its volume is mounted on
// the dev cluster's host.
type volumeSize struct {
	node, requested, capacity, volume string
	resizePending                     bool
	path                              string
}

// volumeSizes lists the cluster's data claims (not being deleted) with their size as the
// claim asks for it, as the claim reports it, and as its volume has it.
func (n *ns) volumeSizes(cluster string) map[string]volumeSize {
	n.t.Helper()
	out := map[string]volumeSize{}
	pvs := gjson.Parse(n.kubectl("get", "pv", "-o", "json"))
	list := n.kubectl("get", "pvc", "-l", "valkey.gomomento.com/cluster="+cluster, "-o", "json")
	gjson.Get(list, "items").ForEach(func(_, c gjson.Result) bool {
		if c.Get("metadata.deletionTimestamp").Exists() {
			return true
		}
		v := volumeSize{
			node:      c.Get(`metadata.labels.valkey\.gomomento\.com/node`).String(),
			requested: c.Get("spec.resources.requests.storage").String(),
			capacity:  c.Get("status.capacity.storage").String(),
		}
		c.Get("status.conditions").ForEach(func(_, cond gjson.Result) bool {
			if cond.Get("type").String() == "FileSystemResizePending" && cond.Get("status").String() == "True" {
				v.resizePending = true
			}
			return true
		})
		pv := c.Get("spec.volumeName").String()
		pvs.Get("items").ForEach(func(_, p gjson.Result) bool {
			if p.Get("metadata.name").String() == pv {
				v.volume, v.path = p.Get("spec.capacity.storage").String(), p.Get("spec.local.path").String()
			}
			return true
		})
		out[c.Get("metadata.name").String()] = v
		return true
	})
	return out
}

// filesystemSize is the size of the filesystem mounted at path on this host.
func filesystemSize(t *testing.T, path string) int64 {
	t.Helper()
	var fs syscall.Statfs_t
	require.NoError(t, syscall.Statfs(path, &fs), "volume at %s", path)
	return int64(fs.Blocks) * fs.Bsize
}

// TestDurableUpkeep: a durable 2x1 TLS cluster (AOF) serves a writer through a size increase,
// a certificate re-issue and an operator password rotation, none of which replaces a pod;
// then a replica's pod deleted comes back on its claim, whose filesystem has grown to the new
// size by then; then the dev node of a primary is drained, and the operator moves its servers
// to new nodes with claims of the new size. No acknowledged write is lost and the state never
// leaves Active.
func TestDurableUpkeep(t *testing.T) {
	n := newNamespace(t, "e2e-upkeep")
	const cluster, secret = "upkeep", "upkeep-tls"
	applyMenu(n)
	cfg := n.durableConfig("Delete")
	ca, err := testcerts.NewCA("e2e upkeep CA")
	require.NoError(t, err)
	leaf := func(serial int64) testcerts.Pair {
		p, err := ca.Issue(testcerts.Leaf{CommonName: "valkey", DNSNames: testcerts.ForCluster(cluster, n.name), Server: true, Client: true, Serial: serial})
		require.NoError(t, err)
		return p
	}
	serverName := testcerts.ForCluster(cluster, n.name)[0]
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	n.serverTLS = &tls.Config{RootCAs: roots, ServerName: serverName, MinVersion: tls.VersionTLS12}
	first := leaf(1001)
	dir := t.TempDir()
	for name, data := range map[string][]byte{"tls.crt": first.CertPEM, "tls.key": first.KeyPEM, "ca.crt": ca.CertPEM} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), data, 0o600))
	}
	n.kubectl("create", "secret", "generic", secret, "--type=kubernetes.io/tls",
		"--from-file=tls.crt="+filepath.Join(dir, "tls.crt"), "--from-file=tls.key="+filepath.Join(dir, "tls.key"),
		"--from-file=ca.crt="+filepath.Join(dir, "ca.crt"))
	n.kubectlIn(fmt.Sprintf("apiVersion: valkey.gomomento.com/v1alpha1\nkind: ValkeyCluster\nmetadata:\n  name: %s\nspec:\n  configRef: %s\n  shards: 2\n  replicasPerShard: 1\n  tls:\n    secretRef: %s\n",
		cluster, cfg, secret), "apply", "-f", "-")
	n.waitState(cluster, "Active", 3*time.Minute)
	n.waitTLSConverged(cluster, 4, roots, serverName)
	n.waitClaims(cluster, n.nodeNames(cluster), "Delete", nil)

	password := n.secretValue(cluster+"-auth", "password")
	c := newClusterClient(t, addrsOf(n.podIPs(cluster)), password, n.serverTLS)
	w := loadgen.Start(c, loadgen.Options{Prefix: "upkeep:", Pace: time.Millisecond})
	n.eventually(30*time.Second, 100*time.Millisecond, "writer running", func() (bool, string, error) {
		return w.Acked() >= 200, fmt.Sprintf("%d acknowledged", w.Acked()), nil
	})
	watch := n.watchState(cluster)
	podsBefore := n.podIdentities(cluster)

	// 1. A larger size: every claim asks for it and every volume grows, in place. Where the
	// host cannot grow a mounted filesystem (this machine), the claim reports
	// FileSystemResizePending until its next mount.
	start := time.Now()
	n.kubectl("patch", "valkeyconfig", cfg, "--type=merge", "-p", `{"spec":{"persistence":{"size":"96Mi"}}}`)
	n.eventually(time.Minute, 250*time.Millisecond, "every claim and volume at 96Mi", func() (bool, string, error) {
		sizes := n.volumeSizes(cluster)
		for name, v := range sizes {
			if v.requested != "96Mi" || v.volume != "96Mi" || (v.capacity != "96Mi" && !v.resizePending) {
				return false, fmt.Sprintf("%s: %+v", name, v), nil
			}
		}
		return len(sizes) == 4, fmt.Sprintf("%d claims", len(sizes)), nil
	})
	t.Logf("e2e: durable upkeep: 4 volumes grown to 96Mi %.1fs after the patch", time.Since(start).Seconds())
	expanding := n.kubectl("get", "events", "--field-selector", "reason=VolumeExpanding", "-o", "jsonpath={range .items[*]}{.message}{\"\\n\"}{end}")
	assert.Equal(t, 4, strings.Count(expanding, "from 64Mi to 96Mi"), "an Event per claim: %s", expanding)

	// 2. The certificate re-issued by the same CA: served everywhere, in the same pods.
	second := leaf(2002)
	took := n.rotateSecret(cluster, secret, map[string][]byte{"tls.crt": second.CertPEM, "tls.key": second.KeyPEM}, "every node serves serial 2002",
		func(ip string) (bool, string) { return servesSerial(ip, roots, "2002") })
	t.Logf("e2e: durable upkeep: re-issued certificate served by every node %.1fs after the patch", took.Seconds())

	// 3. The operator password rotated: every node, the operator's login and the replicas'
	// masterauth move onto it live.
	oldOp, newOp := n.secretValue(cluster+"-auth", "operator-password"), randomPassword(t)
	edited := n.patchSecret(cluster+"-auth", "operator-password", newOp)
	n.waitOperatorRotated(cluster, oldOp, newOp)
	n.requireReplicasReauthenticate(cluster, newOp)
	t.Logf("e2e: durable upkeep: operator password rotated on every node %.1fs after the patch", time.Since(edited).Seconds())
	assert.Equal(t, podsBefore, n.podIdentities(cluster), "a volume growth and two rotations replace no pod")

	// A backup of this TLS cluster right after the rotation: the backup user's password
	// moved with the operator's, and the snapshots stream over TLS.
	ctx, cancel := ctxTimeout(time.Minute)
	defer cancel()
	store, err := suite.env.ObjectStore(ctx)
	require.NoError(t, err)
	n.kubectl("create", "secret", "generic", "s3", "--from-literal=accessKey="+store.AccessKey, "--from-literal=secretKey="+store.SecretKey)
	cl, err := store.Client()
	require.NoError(t, err)
	start = time.Now()
	n.applyBackup("after-rotation", cluster, store.Endpoint, store.Bucket, "e2e", "s3")
	got := n.waitBackup("after-rotation", "Completed", 2*time.Minute)
	t.Logf("e2e: durable upkeep: backup over TLS after the rotation Completed %.1fs after kubectl apply", time.Since(start).Seconds())
	assert.Positive(t, n.requireBackupInBucket(cl, store.Bucket, "e2e", cluster, "after-rotation", 2, got.Get("status")))

	// 4. A replica's pod deleted: it comes back on its claim, and this mount finishes the
	// filesystem's growth.
	nodes := n.nodeNames(cluster)
	replica := n.nodeWithRole(cluster, "replica")
	before := n.restarts(replica)
	start = time.Now()
	n.kubectl("delete", "pod", replica, "--wait=false")
	n.eventually(2*time.Minute, 250*time.Millisecond, replica+" restarted on its volume", func() (bool, string, error) {
		r := n.restarts(replica)
		return r > before, fmt.Sprintf("restarts=%d", r), nil
	})
	n.waitTLSConverged(cluster, 4, roots, serverName)
	assert.ElementsMatch(t, nodes, n.nodeNames(cluster), "restarted in place, no node replaced")
	t.Logf("e2e: durable upkeep: replica %s restarted in place, converged %.1fs after its pod was deleted", replica, time.Since(start).Seconds())
	n.eventually(time.Minute, 250*time.Millisecond, replica+"'s filesystem grown", func() (bool, string, error) {
		v := n.volumeSizes(cluster)[replica+"-data"]
		return v.capacity == "96Mi" && !v.resizePending, fmt.Sprintf("%+v", v), nil
	})
	grown := n.volumeSizes(cluster)[replica+"-data"]
	assert.Greater(t, filesystemSize(t, grown.path), int64(80<<20), "the restarted replica's filesystem has the new size")

	// 5. The dev node of a primary drained: the operator moves the servers off it (a
	// replacement first, synced, then a graceful failover); each replacement gets a claim of
	// the new size on another node.
	primary := n.nodeWithRole(cluster, "primary")
	host := n.podsByName(cluster)[primary].Spec.NodeName
	var moved []string
	for name, p := range n.podsByName(cluster) {
		if p.Spec.NodeName == host {
			moved = append(moved, name)
		}
	}
	drainNode(t, n, cluster, "node/"+host)
	n.waitTLSConverged(cluster, 4, roots, serverName)
	after := n.nodeNames(cluster)
	for _, name := range moved {
		assert.NotContains(t, after, name, "%s moved off its drained host", name)
	}
	n.waitClaims(cluster, after, "Delete", nil)
	for name, v := range n.volumeSizes(cluster) {
		if !slices.Contains(nodes, v.node) {
			assert.Equal(t, "96Mi", v.capacity, "replacement %s has a claim of the new size", name)
			assert.Greater(t, filesystemSize(t, v.path), int64(80<<20), "replacement %s's filesystem has the new size", name)
		}
	}

	from := w.Acked()
	n.eventually(30*time.Second, 100*time.Millisecond, "writes go on after the drain", func() (bool, string, error) {
		return w.Acked() >= from+100, fmt.Sprintf("%d acknowledged since", w.Acked()-from), nil
	})
	res := w.Stop()
	ctx, cancel = ctxTimeout(2 * time.Minute)
	defer cancel()
	reader := newClusterClient(t, addrsOf(n.podIPs(cluster)), password, n.serverTLS)
	lost, firstLost := loadgen.Missing(ctx, reader, "upkeep:", res.Acked)
	t.Logf("e2e: durable upkeep: writes acknowledged=%d rejected=%d lost=%d longest-pause=%s", len(res.Acked), res.Failed, lost, res.MaxPause.Round(time.Millisecond))
	assert.Zero(t, lost, "acknowledged writes lost; first: %v", firstLost)
	assert.Equal(t, []string{"Active"}, watch.states(), "the cluster reports Active throughout")
}
