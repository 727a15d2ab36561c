//go:build e2e

package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"
	"github.com/valkey-io/valkey-go"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/gomomento/valkey-operator/internal/loadgen"
	"github.com/gomomento/valkey-operator/reconciler"
	"github.com/gomomento/valkey-operator/reconciler/backup"
	"github.com/gomomento/valkey-operator/reconciler/metrics/series"
	"github.com/gomomento/valkey-operator/valkeyops/model"
)

// applyRestoredCluster applies a ValkeyCluster of shards x replicas on config created from
// source, the YAML of spec.restoreFrom (indented under it).
func (n *ns) applyRestoredCluster(name, config string, shards, replicas int, source string) {
	n.t.Helper()
	n.kubectlIn(fmt.Sprintf("apiVersion: valkey.gomomento.com/v1alpha1\nkind: ValkeyCluster\nmetadata:\n  name: %s\nspec:\n  configRef: %s\n  shards: %d\n  replicasPerShard: %d\n  restoreFrom:\n%s",
		name, config, shards, replicas, source), "apply", "-f", "-")
}

// holdCluster makes the API server refuse, until releaseCluster, every status write to the
// cluster's ValkeyNodes and every creation of its pods (a ValidatingAdmissionPolicy, as
// admin, scoped to this namespace): the operator can create nodes but never write their
// status nor start their servers, as when it stops between those writes. The same policy
// refuses updates of a labelled probe ConfigMap, which tells when it is in force.
func (n *ns) holdCluster(cluster string) {
	n.t.Helper()
	name := "e2e-hold-" + n.name
	n.kubectlIn(fmt.Sprintf(`apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: %[1]s
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - apiGroups: ["valkey.gomomento.com"]
      apiVersions: ["*"]
      operations: ["UPDATE"]
      resources: ["valkeynodes/status"]
    - apiGroups: [""]
      apiVersions: ["v1"]
      operations: ["CREATE"]
      resources: ["pods"]
    - apiGroups: [""]
      apiVersions: ["v1"]
      operations: ["UPDATE"]
      resources: ["configmaps"]
  validations:
  - expression: "object.kind != 'ConfigMap' || !has(object.metadata.labels) || !('e2e-probe' in object.metadata.labels)"
    message: "e2e: held (probe)"
  - expression: "object.kind == 'ConfigMap' || !has(object.metadata.labels) || !('valkey.gomomento.com/cluster' in object.metadata.labels) || object.metadata.labels['valkey.gomomento.com/cluster'] != '%[2]s'"
    message: "e2e: held (node status writes and pods of cluster %[2]s are refused)"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: %[1]s
spec:
  policyName: %[1]s
  validationActions: [Deny]
  matchResources:
    namespaceSelector:
      matchLabels:
        kubernetes.io/metadata.name: %[3]s
`, name, cluster, n.name), "apply", "-f", "-")
	n.t.Cleanup(func() { n.releaseCluster() })
	n.kubectlIn("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: e2e-probe\n  labels:\n    e2e-probe: \"yes\"\n", "create", "-f", "-")
	n.eventually(time.Minute, 100*time.Millisecond, "the policy holding "+cluster+" in force", func() (bool, string, error) {
		out, err := kubectlRun("", "annotate", "--overwrite", "configmap", "e2e-probe", "probe="+strconv.FormatInt(time.Now().UnixNano(), 10), "-n", n.name)
		if err == nil {
			return false, out, nil
		}
		return strings.Contains(err.Error(), "e2e: held (probe)"), err.Error(), nil
	})
}

// releaseCluster removes holdCluster's policy.
func (n *ns) releaseCluster() {
	n.t.Helper()
	n.kubectl("delete", "validatingadmissionpolicybinding,validatingadmissionpolicy", "e2e-hold-"+n.name, "--ignore-not-found")
}

// failedPodPasses is how many reconcile passes of the suite's operator have failed at its
// ensure-pods step so far.
func failedPodPasses() (float64, error) {
	v, _, err := suite.operator.metric(series.ReconcileErrors, map[string]string{"step": "ensure-pods"})
	return v, err
}

// primarySlots is the slot ranges each primary of the cluster serves, as CLUSTER SLOTS reports
// them, one sorted list of "N-M" per primary, the lists sorted.
func primarySlots(t *testing.T, c valkey.Client) [][]string {
	t.Helper()
	ctx, cancel := ctxTimeout(10 * time.Second)
	defer cancel()
	entries, err := c.Do(ctx, c.B().ClusterSlots().Build()).ToArray()
	require.NoError(t, err)
	byPrimary := map[string][]model.SlotRange{}
	for _, e := range entries {
		f, err := e.ToArray()
		require.NoError(t, err)
		require.GreaterOrEqual(t, len(f), 3)
		start, err := f[0].AsInt64()
		require.NoError(t, err)
		end, err := f[1].AsInt64()
		require.NoError(t, err)
		primary, err := f[2].ToArray()
		require.NoError(t, err)
		require.GreaterOrEqual(t, len(primary), 3)
		id, err := primary[2].ToString()
		require.NoError(t, err)
		byPrimary[id] = append(byPrimary[id], model.SlotRange{Start: int(start), End: int(end)})
	}
	var out [][]string
	for _, ranges := range byPrimary {
		out = append(out, rangeStrings(model.CompactSlots(model.ExpandSlots(ranges))))
	}
	sort.Slice(out, func(i, j int) bool { return strings.Join(out[i], " ") < strings.Join(out[j], " ") })
	return out
}

func rangeStrings(rs []model.SlotRange) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.String()
	}
	return out
}

// hashValue is the content of the test's hash h:<i>.
func hashValue(i int) map[string]string {
	return map[string]string{"a": "x" + strconv.Itoa(i), "b": strings.Repeat("y", i%50)}
}

// TestRestoreFromBackup: a 3x1 cluster holding 100,000 strings and 1,000 hashes, serving a
// writer, is backed up; the cluster is deleted; two clusters are created from the backup at
// once, one with the same shard count that keeps its data in an AOF on volumes, and one
// with 2 shards, and the operator is SIGKILLed
// while the 2-shard one has nodes whose status was never written and no pods (its successor
// finishes both). Each turns Active only with its
// data loaded: every pre-loaded key byte-identical and every write acknowledged before the
// backup's startedAt present. The same-count one serves exactly the slot ranges the backup
// recorded, with one RestoreShardLoaded Event per shard; the 2-shard one ends balanced. A
// backup that does not exist, and one whose object differs from its manifest's checksum, are
// refused with their messages while the cluster waits in Creating.
func TestRestoreFromBackup(t *testing.T) {
	n := newNamespace(t, "e2e-restore")
	const src = "src"
	n.formCluster(src, exampleConfig, 3, 1)
	c := newClusterClient(t, addrsOf(n.podIPs(src)), n.secretValue(src+"-auth", "password"), nil)
	ctx, cancel := ctxTimeout(5 * time.Minute)
	defer cancel()
	const strings100k, hashes = 100000, 1000
	start := time.Now()
	require.NoError(t, loadgen.Fill(ctx, c, "pre:", strings100k, 5000, nil))
	var cmds valkey.Commands
	for i := range hashes {
		h := hashValue(i)
		cmds = append(cmds, c.B().Hset().Key("h:"+strconv.Itoa(i)).FieldValue().FieldValue("a", h["a"]).FieldValue("b", h["b"]).Build())
	}
	for _, r := range c.DoMulti(ctx, cmds...) {
		require.NoError(t, r.Error())
	}
	t.Logf("e2e: %d strings and %d hashes loaded in %.1fs", strings100k, hashes, time.Since(start).Seconds())
	w := loadgen.Start(c, loadgen.Options{Prefix: "live:", Pace: time.Millisecond, Record: true})
	n.eventually(30*time.Second, 100*time.Millisecond, "writer running", func() (bool, string, error) {
		return w.Acked() >= 200, fmt.Sprintf("%d acknowledged", w.Acked()), nil
	})
	// status.startedAt has whole seconds: the writes this test expects in the backup are
	// those acknowledged before it, so some must be acknowledged in an earlier second.
	acked := time.Now()
	n.eventually(5*time.Second, 50*time.Millisecond, "a second boundary after writes were acknowledged", func() (bool, string, error) {
		return time.Now().Truncate(time.Second).After(acked), "", nil
	})

	store, err := suite.env.ObjectStore(ctx)
	require.NoError(t, err)
	cl, err := store.Client()
	require.NoError(t, err)
	n.kubectl("create", "secret", "generic", "s3", "--from-literal=accessKey="+store.AccessKey, "--from-literal=secretKey="+store.SecretKey)
	prefix := "e2e/" + n.name
	start = time.Now()
	n.applyBackup("snap", src, store.Endpoint, store.Bucket, prefix, "s3")
	bk := n.waitBackup("snap", "Completed", 3*time.Minute)
	t.Logf("e2e: backup Completed %.1fs after kubectl apply (%d bytes)", time.Since(start).Seconds(), bk.Get("status.bytes").Int())
	res := w.Stop()
	startedAt, err := time.Parse(time.RFC3339, bk.Get("status.startedAt").String())
	require.NoError(t, err)
	before := res.AckedBefore(startedAt)
	require.NotEmpty(t, before, "the writer was acknowledged before the backup started")
	var recorded [][]string
	for _, s := range bk.Get("status.shards").Array() {
		var slots []string
		for _, r := range s.Get("slots").Array() {
			slots = append(slots, r.String())
		}
		recorded = append(recorded, slots)
	}
	sort.Slice(recorded, func(i, j int) bool { return strings.Join(recorded[i], " ") < strings.Join(recorded[j], " ") })
	assert.Equal(t, recorded, primarySlots(t, c), "the backup recorded the slots the source served")

	// The source goes; its backup stays.
	n.kubectl("delete", "valkeycluster", src, "--wait=true")
	assert.Equal(t, "Completed", gjson.Get(n.kubectl("get", "vkb", "snap", "-o", "json"), "status.phase").String())

	// Two clusters from the backup at once: the same shard count, and 2 shards. The 2-shard
	// one is held (a policy refuses its node status writes and its pods): the operator
	// creates a node, cannot write its status, and cannot make its pod, as when it stops
	// between those writes. It is SIGKILLed once it has tried; its successor, with nothing of
	// either restore in memory, makes the held cluster's pods from nodes whose status was
	// never written: they must still fetch their shard's snapshot (the verify below).
	failedBefore, err := failedPodPasses()
	require.NoError(t, err)
	n.holdCluster("fewer")
	start = time.Now()
	n.applyRestoredCluster("same", n.durableConfig("Delete"), 3, 1, "    backup: snap\n")
	n.applyRestoredCluster("fewer", exampleConfig, 2, 1, "    backup: snap\n")
	sameWatch, fewerWatch := n.watchState("same"), n.watchState("fewer")
	n.eventually(2*time.Minute, 100*time.Millisecond, "the held restore with a node, no status written, no pod, and a refused pod", func() (bool, string, error) {
		nodes, err := n.valkeyNodes("fewer")
		if err != nil {
			return false, "", err
		}
		pods, err := n.pods("fewer")
		if err != nil {
			return false, "", err
		}
		failed, err := failedPodPasses()
		if err != nil {
			return false, "", err
		}
		written := 0
		for _, u := range nodes {
			if _, ok, _ := unstructured.NestedString(u.Object, "status", "lifecycle"); ok {
				written++
			}
		}
		status := fmt.Sprintf("%d nodes (%d with a status), %d pods, %.0f failed pod passes", len(nodes), written, len(pods), failed-failedBefore)
		if written > 0 || len(pods) > 0 {
			return false, "", fmt.Errorf("the policy let a write through: %s", status)
		}
		return len(nodes) > 0 && failed > failedBefore, status, nil
	})
	require.NoError(t, suite.operator.Kill())
	n.releaseCluster()
	restartKilledOperator(t)
	t.Logf("e2e: operator SIGKILLed %.1fs into the restores", time.Since(start).Seconds())
	verify := func(cluster string) valkey.Client {
		t.Helper()
		rc := newClusterClient(t, addrsOf(n.podIPs(cluster)), n.secretValue(cluster+"-auth", "password"), nil)
		vctx, vcancel := ctxTimeout(2 * time.Minute)
		defer vcancel()
		missing, first := loadgen.Missing(vctx, rc, "pre:", seq(strings100k))
		assert.Zero(t, missing, "%s: pre-loaded strings missing or different; first: %v", cluster, first)
		missing, first = loadgen.Missing(vctx, rc, "live:", before)
		assert.Zero(t, missing, "%s: of %d writes acknowledged before the backup started, missing; first: %v", cluster, len(before), first)
		var hcmds valkey.Commands
		for i := range hashes {
			hcmds = append(hcmds, rc.B().Hgetall().Key("h:"+strconv.Itoa(i)).Build())
		}
		differ := 0
		for i, r := range rc.DoMulti(vctx, hcmds...) {
			if got, err := r.AsStrMap(); err != nil || !maps.Equal(got, hashValue(i)) {
				differ++
			}
		}
		assert.Zero(t, differ, "%s: hashes missing or different", cluster)
		return rc
	}

	n.waitState("same", "Active", 4*time.Minute)
	t.Logf("e2e: restore into 3 shards Active %.1fs after kubectl apply", time.Since(start).Seconds())
	same := verify("same")
	assert.Equal(t, recorded, primarySlots(t, same), "the restored cluster serves the slot ranges the backup recorded")
	// It keeps an AOF (its config's persistence): the snapshot was placed as the AOF's base,
	// which a server with appendonly on loads instead of dump.rdb.
	ictx, icancel := ctxTimeout(10 * time.Second)
	info, err := same.Do(ictx, same.B().Info().Section("persistence").Build()).ToString()
	icancel()
	require.NoError(t, err)
	assert.Contains(t, info, "aof_enabled:1", "the 3-shard restore keeps an AOF")
	loaded := n.kubectl("get", "events", "--field-selector", "involvedObject.name=same,reason="+reconciler.ReasonRestoreShardLoaded, "-o", "jsonpath={range .items[*]}{.message}{\"\\n\"}{end}")
	assert.Equal(t, 3, strings.Count(loaded, "restored on"), "one RestoreShardLoaded Event per shard: %s", loaded)
	assert.Subset(t, []string{"", "Creating", "Active"}, sameWatch.states(), "a restore reports Creating, then Active once loaded")

	n.waitState("fewer", "Active", 4*time.Minute)
	n.waitConverged("fewer", 4, 4*time.Minute)
	t.Logf("e2e: restore into 2 shards converged %.1fs after kubectl apply", time.Since(start).Seconds())
	fewer := verify("fewer")
	slots := primarySlots(t, fewer)
	require.Len(t, slots, 2, "two primaries serve the slots")
	for _, s := range slots {
		ranges, err := model.ParseRanges(s)
		require.NoError(t, err)
		assert.InDelta(t, model.SlotCount/2, model.CountSlots(ranges), 1, "balanced: %v", slots)
	}
	assert.Subset(t, []string{"", "Creating", "Active"}, fewerWatch.states())

	// Bad input: a backup that does not exist, and one whose object differs from its
	// manifest. Each waits in Creating with its message.
	n.applyRestoredCluster("nobackup", exampleConfig, 1, 0, "    backup: nope\n")
	n.waitWarning(reconciler.ReasonRestoreRefused, `ValkeyBackup "nope": it does not exist`, time.Minute)
	nodes, err := n.valkeyNodes("nobackup")
	require.NoError(t, err)
	assert.Empty(t, nodes, "nothing is created for a backup that cannot be restored")

	corruptPath := n.corruptCopy(cl, store.Bucket, prefix, bk.Get("status.path").String(), "corrupt")
	n.applyRestoredCluster("corrupt", exampleConfig, 3, 0, fmt.Sprintf("    storage:\n      endpoint: %s\n      bucket: %s\n      prefix: %s\n      credentialsSecretRef:\n        name: s3\n    path: %s\n",
		store.Endpoint, store.Bucket, prefix, corruptPath))
	msg := n.waitWarning(reconciler.ReasonRestoreFailed, "SHA-256", 2*time.Minute)
	assert.Contains(t, msg, "shard 0")
	assert.NotContains(t, msg, store.SecretKey)
	for _, name := range []string{"nobackup", "corrupt"} {
		st, _, err := n.state(name)
		require.NoError(t, err)
		assert.Equal(t, "Creating", st, name)
	}
}

// corruptCopy copies the backup at path (under prefix) to {prefix}/{dir}/, its shard 0
// object with one byte changed (same size) and its manifest naming the copies, and returns
// the copy's path.
func (n *ns) corruptCopy(cl *minio.Client, bucket, prefix, path, dir string) string {
	t := n.t
	t.Helper()
	ctx, cancel := ctxTimeout(time.Minute)
	defer cancel()
	read := func(key string) []byte {
		o, err := cl.GetObject(ctx, bucket, key, minio.GetObjectOptions{})
		require.NoError(t, err)
		defer o.Close()
		b, err := io.ReadAll(o)
		require.NoError(t, err)
		return b
	}
	m, err := backup.DecodeManifest(read(prefix + "/" + path + "/" + backup.ManifestName))
	require.NoError(t, err)
	copyPath := n.name + "/" + dir
	for i, s := range m.Shards {
		b := read(s.Object)
		if i == 0 {
			b[len(b)/2] ^= 0xff
		}
		key := prefix + "/" + copyPath + "/" + fmt.Sprintf("shard-%d.rdb", i)
		_, err := cl.PutObject(ctx, bucket, key, bytes.NewReader(b), int64(len(b)), minio.PutObjectOptions{})
		require.NoError(t, err)
		m.Shards[i].Object = key
	}
	b, err := json.Marshal(m)
	require.NoError(t, err)
	_, err = cl.PutObject(ctx, bucket, prefix+"/"+copyPath+"/"+backup.ManifestName, bytes.NewReader(b), int64(len(b)), minio.PutObjectOptions{})
	require.NoError(t, err)
	return copyPath
}

func seq(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}
