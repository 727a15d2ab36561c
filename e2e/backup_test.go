//go:build e2e

package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"
	"github.com/valkey-io/valkey-go"

	"github.com/gomomento/valkey-operator/reconciler/backup"
	"github.com/gomomento/valkey-operator/reconciler/render"
	"github.com/gomomento/valkey-operator/valkeyops/model"
)

// Backups to the dev cluster's real object store (SeaweedFS): a ValkeyBackup of an Active
// cluster serving a writer streams every shard's snapshot from an in-sync replica into the
// bucket and writes the manifest last; bad input fails the backup with a message and
// touches nothing.

// applyBackup creates a ValkeyBackup of cluster named name, its storage in the dev object
// store under prefix with the credentials of Secret secret.
func (n *ns) applyBackup(name, cluster, endpoint, bucket, prefix, secret string) {
	n.t.Helper()
	n.kubectlIn(fmt.Sprintf(`apiVersion: valkey.gomomento.com/v1alpha1
kind: ValkeyBackup
metadata:
  name: %s
spec:
  cluster: %s
  storage:
    endpoint: %s
    bucket: %s
    prefix: %s
    credentialsSecretRef:
      name: %s
`, name, cluster, endpoint, bucket, prefix, secret), "apply", "-f", "-")
}

// onServer runs one command on the server at ip of cluster, as the operator's user.
func (n *ns) onServer(ip, cluster string, cmd ...string) {
	n.t.Helper()
	password := n.secretValue(cluster+"-auth", render.AuthOperatorPasswordKey)
	c := newClient(n.t, valkey.ClientOption{InitAddress: []string{ip + ":6379"}, Username: model.OperatorUser, Password: password, ForceSingleClient: true})
	ctx, cancel := ctxTimeout(10 * time.Second)
	defer cancel()
	require.NoError(n.t, c.Do(ctx, c.B().Arbitrary(cmd...).Build()).Error(), "%v on %s", cmd, ip)
}

// waitBackup waits until ValkeyBackup name reaches phase and returns it as JSON.
func (n *ns) waitBackup(name, phase string, timeout time.Duration) gjson.Result {
	n.t.Helper()
	var got gjson.Result
	n.eventually(timeout, 250*time.Millisecond, fmt.Sprintf("ValkeyBackup %s %s", name, phase), func() (bool, string, error) {
		got = gjson.Parse(n.kubectl("get", "valkeybackup", name, "-o", "json"))
		st := got.Get("status")
		return st.Get("phase").String() == phase, fmt.Sprintf("phase %q message %q", st.Get("phase"), st.Get("message")), nil
	})
	return got
}

// TestBackupToObjectStore: a 3x1 cluster holding 30,000 keys and serving a writer is backed
// up with a ValkeyBackup: Completed, one object per shard streamed from a replica, each the
// size and SHA-256 its status says, the key counts adding up to at least what was loaded, the
// slots covering all 16384, and the manifest written last naming the same objects. No
// acknowledged write is lost and the cluster stays Active. Then each bad input fails a
// backup with a message naming it.
func TestBackupToObjectStore(t *testing.T) {
	n := newNamespace(t, "e2e-backup")
	const cluster = "bk"
	w, watch := day2(t, n, cluster, 3, 1)
	password := n.secretValue(cluster+"-auth", "password")
	c := newClusterClient(t, addrsOf(n.podIPs(cluster)), password, nil)
	ctx, cancel := ctxTimeout(2 * time.Minute)
	defer cancel()
	const loaded = 30000
	for i := 0; i < loaded; i += 500 {
		var cmds valkey.Commands
		for j := i; j < i+500; j++ {
			cmds = append(cmds, c.B().Set().Key(fmt.Sprintf("pre:%d", j)).Value(strings.Repeat("v", 64)).Build())
		}
		for _, r := range c.DoMulti(ctx, cmds...) {
			require.NoError(t, r.Error())
		}
	}

	store, err := suite.env.ObjectStore(ctx)
	require.NoError(t, err)
	n.kubectl("create", "secret", "generic", "s3", "--from-literal=accessKey="+store.AccessKey, "--from-literal=secretKey="+store.SecretKey)
	prefix := "e2e/" + n.name
	start := time.Now()
	n.applyBackup("first", cluster, store.Endpoint, store.Bucket, prefix, "s3")
	got := n.waitBackup("first", "Completed", 3*time.Minute)
	t.Logf("e2e: backup of 3 shards Completed %.1fs after kubectl apply (%d bytes)", time.Since(start).Seconds(), got.Get("status.bytes").Int())
	st := got.Get("status")

	cl, err := store.Client()
	require.NoError(t, err)
	keys := n.requireBackupInBucket(cl, store.Bucket, prefix, cluster, "first", 3, st)
	assert.GreaterOrEqual(t, keys, int64(loaded), "every key loaded before the backup is in it")
	events := n.kubectl("get", "events", "--field-selector", "involvedObject.name=first", "-o", "jsonpath={range .items[*]}{.reason}{\"\\n\"}{end}")
	assert.Contains(t, events, backup.ReasonStarted)
	assert.Contains(t, events, backup.ReasonCompleted)
	assert.NotContains(t, events, backup.ReasonFromPrimary, "every shard had an in-sync replica")
	columns := n.kubectl("get", "vkb", "first")
	assert.Contains(t, columns, "Completed")

	// Slow snapshots (rdb-key-save-delay: µs per key) keep the next backups running long
	// enough to interrupt them.
	n.eachServer(cluster, "CONFIG", "SET", "rdb-key-save-delay", "300")
	defer n.eachServer(cluster, "CONFIG", "SET", "rdb-key-save-delay", "0")
	waitRunning := func(name string) {
		t.Helper()
		n.eventually(time.Minute, 20*time.Millisecond, name+" Running", func() (bool, string, error) {
			phase := gjson.Get(n.kubectl("get", "valkeybackup", name, "-o", "json"), "status.phase").String()
			return phase == "Running", "phase " + phase, nil
		})
	}

	// The operator killed mid-backup: its successor resumes the backup, which completes
	// whole, its manifest naming objects that match their checksums.
	start = time.Now()
	n.applyBackup("resumed", cluster, store.Endpoint, store.Bucket, prefix, "s3")
	waitRunning("resumed")
	crashAndRestart(t)
	t.Logf("e2e: operator SIGKILLed %.1fs into backup resumed", time.Since(start).Seconds())
	got = n.waitBackup("resumed", "Completed", 3*time.Minute)
	t.Logf("e2e: backup resumed by the new operator, Completed %.1fs after kubectl apply", time.Since(start).Seconds())
	assert.GreaterOrEqual(t, n.requireBackupInBucket(cl, store.Bucket, prefix, cluster, "resumed", 3, got.Get("status")), int64(loaded))
	// The restarted operator serves the latest completed backup's time.
	completed, err := time.Parse(time.RFC3339, got.Get("status.completedAt").String())
	require.NoError(t, err)
	n.eventually(30*time.Second, 250*time.Millisecond, "valkey_backup_last_success_timestamp_seconds", func() (bool, string, error) {
		v, found, err := suite.operator.metric("valkey_backup_last_success_timestamp_seconds", map[string]string{"namespace": n.name, "cluster": cluster})
		if err != nil {
			return false, err.Error(), nil
		}
		return found && int64(v) == completed.Unix(), fmt.Sprintf("found %v value %v, want %d", found, v, completed.Unix()), nil
	})

	// Progress, then a retry: a slower snapshot shows the bytes of a shard still streaming
	// in its status (and SIZE); then the connection its source serves the stream on is killed
	// mid-stream, and the shard is streamed again from its next copy, the primary.
	n.eachServer(cluster, "CONFIG", "SET", "rdb-key-save-delay", "600")
	start = time.Now()
	n.applyBackup("progress", cluster, store.Endpoint, store.Bucket, prefix, "s3")
	var streaming gjson.Result
	n.eventually(time.Minute, 50*time.Millisecond, "a Running backup showing the bytes of a shard still streaming", func() (bool, string, error) {
		b := gjson.Parse(n.kubectl("get", "valkeybackup", "progress", "-o", "json"))
		if phase := b.Get("status.phase").String(); phase != "Running" && phase != "Pending" && phase != "" {
			return false, "", fmt.Errorf("backup %s before any progress was seen: %s", phase, b.Get("status.message"))
		}
		for _, s := range b.Get("status.shards").Array() {
			if s.Get("bytes").Int() > 0 && s.Get("sha256").String() == "" {
				streaming = b
				return true, "", nil
			}
		}
		return false, b.Get("status").Raw, nil
	})
	var victim gjson.Result
	for _, s := range streaming.Get("status.shards").Array() {
		if s.Get("bytes").Int() > 0 && s.Get("sha256").String() == "" {
			victim = s
			break
		}
	}
	t.Logf("e2e: %.1fs after kubectl apply, Running with %d bytes: shard %d at %d bytes from %s", time.Since(start).Seconds(),
		streaming.Get("status.bytes").Int(), victim.Get("index").Int(), victim.Get("bytes").Int(), victim.Get("node").String())
	assert.Positive(t, streaming.Get("status.bytes").Int())
	source := victim.Get("node").String()
	n.onServer(n.kubectl("get", "pod", source, "-o", "jsonpath={.status.podIP}"), cluster, "CLIENT", "KILL", "USER", model.BackupUser)
	got = n.waitBackup("progress", "Completed", 2*time.Minute)
	t.Logf("e2e: backup with one shard retried Completed %.1fs after kubectl apply", time.Since(start).Seconds())
	retried := int(victim.Get("index").Int())
	assert.GreaterOrEqual(t, n.requireBackupInBucket(cl, store.Bucket, prefix, cluster, "progress", 3, got.Get("status"), retried), int64(loaded))
	switched := n.kubectl("get", "events", "--field-selector", "involvedObject.name=progress,reason="+backup.ReasonSourceSwitched, "-o", "jsonpath={range .items[*]}{.message}{\"\\n\"}{end}")
	assert.Contains(t, switched, fmt.Sprintf("streaming shard %d again from %s", retried, got.Get(fmt.Sprintf("status.shards.%d.node", retried)).String()))
	assert.Contains(t, switched, source, "the Event names the copy that failed")
	assert.NotContains(t, switched, password)
	n.eachServer(cluster, "CONFIG", "SET", "rdb-key-save-delay", "300")

	// A backup deleted while it runs: its transfer stops, and nothing of it is left named
	// complete, nor any upload open.
	ctx, cancel = ctxTimeout(2 * time.Minute)
	defer cancel()
	n.applyBackup("gone", cluster, store.Endpoint, store.Bucket, prefix, "s3")
	waitRunning("gone")
	n.kubectl("delete", "valkeybackup", "gone")
	goneDir := fmt.Sprintf("%s/%s/%s/gone/", prefix, n.name, cluster)
	n.eventually(time.Minute, 250*time.Millisecond, "no open upload under the deleted backup", func() (bool, string, error) {
		var open []string
		for u := range cl.ListIncompleteUploads(ctx, store.Bucket, goneDir, true) {
			if u.Err != nil {
				return false, u.Err.Error(), nil
			}
			open = append(open, u.Key)
		}
		return len(open) == 0, fmt.Sprintf("open uploads %v", open), nil
	})
	_, err = cl.StatObject(ctx, store.Bucket, goneDir+backup.ManifestName, minio.StatObjectOptions{})
	assert.Error(t, err, "no manifest for a deleted backup")

	// A backup running past --backup-timeout (counted from its startedAt, so across a
	// restart): an operator started with a short one fails it, with no manifest and no
	// upload left open. The suite's operator is then restarted with its usual flags.
	ctx, cancel = ctxTimeout(2 * time.Minute)
	defer cancel()
	n.applyBackup("late", cluster, store.Endpoint, store.Bucket, prefix, "s3")
	waitRunning("late")
	crashAndRestart(t, "--backup-timeout", "2s")
	got = n.waitBackup("late", "Failed", time.Minute)
	crashAndRestart(t)
	assert.Contains(t, got.Get("status.message").String(), "--backup-timeout")
	lateDir := fmt.Sprintf("%s/%s/%s/late/", prefix, n.name, cluster)
	for u := range cl.ListIncompleteUploads(ctx, store.Bucket, lateDir, true) {
		t.Errorf("upload %s left open by a timed-out backup (%v)", u.Key, u.Err)
	}
	_, err = cl.StatObject(ctx, store.Bucket, lateDir+backup.ManifestName, minio.StatObjectOptions{})
	assert.Error(t, err, "no manifest for a timed-out backup")
	finishDay2(t, w, watch, "five backups: one resumed by a new operator, one with a shard retried, one deleted, one timed out")

	// Bad input: each fails its backup with a message, and nothing is written for it.
	n.kubectl("create", "secret", "generic", "s3-wrong", "--from-literal=accessKey="+store.AccessKey, "--from-literal=secretKey=not-the-secret")
	bad := []struct {
		name, cluster, bucket, secret, want string
	}{
		{"no-cluster", "nope", store.Bucket, "s3", `ValkeyCluster "nope" not found`},
		{"wrong-secret", cluster, store.Bucket, "s3-wrong", "refused the credentials"},
		{"no-bucket", cluster, "no-such-bucket", "s3", "bucket does not exist"},
		{"no-secret", cluster, store.Bucket, "absent", `Secret "absent" not found`},
	}
	ctx, cancel = ctxTimeout(2 * time.Minute)
	defer cancel()
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			n.applyBackup(tc.name, tc.cluster, store.Endpoint, tc.bucket, prefix, tc.secret)
			got := n.waitBackup(tc.name, "Failed", time.Minute)
			assert.Contains(t, got.Get("status.message").String(), tc.want)
			assert.NotContains(t, got.Get("status.message").String(), store.SecretKey)
			for o := range cl.ListObjects(ctx, store.Bucket, minio.ListObjectsOptions{Prefix: fmt.Sprintf("%s/%s/%s/%s/", prefix, n.name, tc.cluster, tc.name), Recursive: true}) {
				t.Errorf("object %s written for a failed backup (%v)", o.Key, o.Err)
			}
		})
	}
}

// requireBackupInBucket checks a Completed backup's objects against its status st: one per
// shard under {prefix}/{namespace}/{cluster}/{name}/, streamed from a replica, of the size and
// SHA-256 recorded, the slots covering the cluster, and the manifest naming the same objects.
// The shards listed in fromPrimary were streamed from their primary instead. It returns the
// keys the shards hold.
func (n *ns) requireBackupInBucket(cl *minio.Client, bucket, prefix, cluster, name string, shardCount int, st gjson.Result, fromPrimary ...int) int64 {
	t := n.t
	t.Helper()
	ctx, cancel := ctxTimeout(2 * time.Minute)
	defer cancel()
	roles := map[string]string{}
	for _, s := range n.mustNodes(cluster) {
		roles[s.Name] = s.Role
	}
	dir := fmt.Sprintf("%s/%s/%s/%s/", prefix, n.name, cluster, name)
	shards := st.Get("shards").Array()
	require.Len(t, shards, shardCount)
	var keys, total int64
	slots := 0
	for i, s := range shards {
		assert.EqualValues(t, i, s.Get("index").Int())
		object := s.Get("object").String()
		assert.Equal(t, fmt.Sprintf("%sshard-%d.rdb", dir, i), object)
		if slices.Contains(fromPrimary, i) {
			assert.Equal(t, "primary", roles[s.Get("node").String()], "shard %d streamed from its primary", i)
		} else {
			assert.Equal(t, "replica", roles[s.Get("node").String()], "shard %d streamed from a replica, not its primary", i)
		}
		o, err := cl.GetObject(ctx, bucket, object, minio.GetObjectOptions{})
		require.NoError(t, err)
		h := sha256.New()
		size, err := io.Copy(h, o)
		require.NoError(t, o.Close())
		require.NoError(t, err, "object %s", object)
		assert.Equal(t, s.Get("bytes").Int(), size, "shard %d: the object is the size the status says", i)
		assert.Equal(t, s.Get("sha256").String(), hex.EncodeToString(h.Sum(nil)), "shard %d: the object is what was hashed", i)
		assert.NotEmpty(t, s.Get("valkeyVersion").String())
		assert.EqualValues(t, 11, s.Get("rdbVersion").Int())
		keys += s.Get("keys").Int()
		total += size
		for _, r := range s.Get("slots").Array() {
			var a, b int
			if _, err := fmt.Sscanf(r.String(), "%d-%d", &a, &b); err == nil {
				slots += b - a + 1
			} else {
				slots++
			}
		}
	}
	assert.Equal(t, 16384, slots, "the shards' slots cover the cluster")
	assert.Equal(t, total, st.Get("bytes").Int())
	mo, err := cl.GetObject(ctx, bucket, dir+backup.ManifestName, minio.GetObjectOptions{})
	require.NoError(t, err)
	body, err := io.ReadAll(mo)
	require.NoError(t, mo.Close())
	require.NoError(t, err)
	m, err := backup.DecodeManifest(body)
	require.NoError(t, err, "the manifest reads back: %s", body)
	require.Len(t, m.Shards, shardCount)
	for i, s := range m.Shards {
		assert.Equal(t, shards[i].Get("object").String(), s.Object)
		assert.Equal(t, shards[i].Get("sha256").String(), s.SHA256)
	}
	return keys
}
