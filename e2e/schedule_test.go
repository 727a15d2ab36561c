//go:build e2e

package e2e

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"
	"github.com/valkey-io/valkey-go"

	"github.com/gomomento/valkey-operator/reconciler/backup"
)

// scheduledBackups lists the namespace's scheduled ValkeyBackups of cluster by name.
func (n *ns) scheduledBackups(cluster string) map[string]gjson.Result {
	n.t.Helper()
	out := map[string]gjson.Result{}
	l := gjson.Parse(n.kubectl("get", "valkeybackups", "-l", fmt.Sprintf("valkey.gomomento.com/cluster=%s,%s=true", cluster, backup.LabelScheduled), "-o", "json"))
	for _, b := range l.Get("items").Array() {
		out[b.Get("metadata.name").String()] = b
	}
	return out
}

// clusterEventReasons lists the reasons of the Events on ValkeyCluster name, one per line.
func (n *ns) clusterEventReasons(name string) string {
	n.t.Helper()
	return n.kubectl("get", "events", "--field-selector", "involvedObject.kind=ValkeyCluster,involvedObject.name="+name,
		"-o", "jsonpath={range .items[*]}{.reason}{\"\\n\"}{end}")
}

// TestScheduledBackups: spec.backup on a 1x1 cluster. A schedule the cron parser refuses is
// reported (BackupScheduleInvalid) and makes nothing. Then "@every 15s" with keep: 2, beside
// a backup made by hand: once at least four scheduled backups have completed, exactly the two
// newest remain, their manifests and objects in the bucket; every object of the pruned ones
// is gone; the hand-made backup is untouched. suspend: true stops the runs; deleting the
// cluster keeps its backups and their objects.
//
// The proof is "a schedule of every minute keeps exactly keep completed backups":
// at one minute four runs would cost over three minutes of e2e, so the schedule here is
// every 15 s (the same code path: a constant-delay schedule from robfig/cron, whose due times
// come from the newest run's name the same way), which keeps the test under two minutes.
func TestScheduledBackups(t *testing.T) {
	n := newNamespace(t, "e2e-schedule")
	const cluster = "sched"
	const keep = 2
	const interval = 15 * time.Second
	n.formCluster(cluster, exampleConfig, 1, 1)
	password := n.secretValue(cluster+"-auth", "password")
	c := newClusterClient(t, addrsOf(n.podIPs(cluster)), password, nil)
	ctx, cancel := ctxTimeout(3 * time.Minute)
	defer cancel()
	var cmds valkey.Commands
	for i := 0; i < 1000; i++ {
		cmds = append(cmds, c.B().Set().Key(fmt.Sprintf("k:%d", i)).Value(strings.Repeat("v", 64)).Build())
	}
	for _, r := range c.DoMulti(ctx, cmds...) {
		require.NoError(t, r.Error())
	}

	store, err := suite.env.ObjectStore(ctx)
	require.NoError(t, err)
	cl, err := store.Client()
	require.NoError(t, err)
	n.kubectl("create", "secret", "generic", "s3", "--from-literal=accessKey="+store.AccessKey, "--from-literal=secretKey="+store.SecretKey)
	prefix := "e2e/" + n.name
	patchBackup := func(fields string) {
		t.Helper()
		n.kubectl("patch", "valkeycluster", cluster, "--type=merge", "-p", `{"spec":{"backup":{`+fields+`}}}`)
	}
	storage := fmt.Sprintf(`"storage":{"endpoint":%q,"bucket":%q,"prefix":%q,"credentialsSecretRef":{"name":"s3"}}`, store.Endpoint, store.Bucket, prefix)
	objectsUnder := func(name string) []string {
		t.Helper()
		var keys []string
		for o := range cl.ListObjects(ctx, store.Bucket, minio.ListObjectsOptions{Prefix: fmt.Sprintf("%s/%s/%s/%s/", prefix, n.name, cluster, name), Recursive: true}) {
			require.NoError(t, o.Err)
			keys = append(keys, o.Key)
		}
		return keys
	}

	// A range the schema's shape check lets through and the cron parser refuses.
	patchBackup(`"schedule":"0 5-1 * * *","keep":2,` + storage)
	n.eventually(30*time.Second, 250*time.Millisecond, "BackupScheduleInvalid on the cluster", func() (bool, string, error) {
		reasons := n.clusterEventReasons(cluster)
		return strings.Contains(reasons, backup.ReasonScheduleInvalid), reasons, nil
	})
	assert.Empty(t, n.scheduledBackups(cluster), "an invalid schedule makes no backup")

	// A backup made by hand, older than every scheduled one: keep must not count it.
	n.applyBackup("by-hand", cluster, store.Endpoint, store.Bucket, prefix, "s3")
	hand := n.waitBackup("by-hand", "Completed", 2*time.Minute)

	start := time.Now()
	patchBackup(`"schedule":"@every 15s"`)
	n.eventually(30*time.Second, 250*time.Millisecond, "valkey_backup_scheduled 1", func() (bool, string, error) {
		v, found, err := suite.operator.metric("valkey_backup_scheduled", map[string]string{"namespace": n.name, "cluster": cluster})
		if err != nil {
			return false, err.Error(), nil
		}
		return found && v == 1, fmt.Sprintf("found %v value %v", found, v), nil
	})

	// Every scheduled backup seen Completed, as last seen: pruned ones vanish from the list.
	completed := map[string]gjson.Result{}
	var remaining []string
	n.eventually(150*time.Second, 250*time.Millisecond, fmt.Sprintf("4 scheduled backups completed, %d kept", keep), func() (bool, string, error) {
		remaining = remaining[:0]
		for name, b := range n.scheduledBackups(cluster) {
			if b.Get("status.phase").String() == "Completed" {
				completed[name] = b
				remaining = append(remaining, name)
			}
		}
		return len(completed) >= 4 && len(remaining) == keep, fmt.Sprintf("%d completed so far, %d Completed now", len(completed), len(remaining)), nil
	})
	t.Logf("e2e: %d scheduled backups completed %.1fs after the schedule was set, %d kept", len(completed), time.Since(start).Seconds(), len(remaining))

	// Suspended at once, so that the set checked below holds still: a run made just before
	// finishes (and may prune), then nothing moves.
	patchBackup(`"suspend":true`)
	n.eventually(30*time.Second, 250*time.Millisecond, "valkey_backup_scheduled 0", func() (bool, string, error) {
		v, found, err := suite.operator.metric("valkey_backup_scheduled", map[string]string{"namespace": n.name, "cluster": cluster})
		if err != nil {
			return false, err.Error(), nil
		}
		return found && v == 0, fmt.Sprintf("found %v value %v", found, v), nil
	})
	var before map[string]gjson.Result
	n.eventually(time.Minute, 250*time.Millisecond, "no scheduled backup Pending or Running, keep applied", func() (bool, string, error) {
		before = n.scheduledBackups(cluster)
		remaining = remaining[:0]
		for name, b := range before {
			switch p := b.Get("status.phase").String(); p {
			case "Completed":
				completed[name] = b
				remaining = append(remaining, name)
			case "Failed":
			default:
				return false, name + " " + p, nil
			}
		}
		return len(remaining) == keep, fmt.Sprintf("%d Completed", len(remaining)), nil
	})
	t.Logf("e2e: suspended %.1fs after the schedule was set: %d scheduled backups completed in all, %d kept", time.Since(start).Seconds(), len(completed), len(remaining))

	var all []string
	for name := range completed {
		all = append(all, name)
	}
	sort.Strings(all) // the names end in their due time: oldest first
	sort.Strings(remaining)
	assert.Equal(t, all[len(all)-keep:], remaining, "the newest %d scheduled backups are the ones kept", keep)
	for _, name := range all {
		b := completed[name]
		created, _ := time.Parse(time.RFC3339, b.Get("metadata.creationTimestamp").String())
		started, _ := time.Parse(time.RFC3339, b.Get("status.startedAt").String())
		done, _ := time.Parse(time.RFC3339, b.Get("status.completedAt").String())
		due, ok := backup.RunTime(cluster, name)
		require.True(t, ok, "%s is named after its due time", name)
		t.Logf("e2e: %s: created %.0fs after its due time, Running→Completed in %.0fs, %d bytes", name,
			created.Sub(due).Seconds(), done.Sub(started).Seconds(), b.Get("status.bytes").Int())
		assert.Equal(t, cluster, b.Get("metadata.labels.valkey\\.gomomento\\.com/cluster").String())
		assert.False(t, b.Get("metadata.ownerReferences").Exists(), "%s is not owned by its cluster", name)
		assert.Equal(t, store.Bucket, b.Get("spec.storage.bucket").String(), "%s: storage copied from spec.backup", name)
	}
	for _, name := range remaining {
		n.requireBackupInBucket(cl, store.Bucket, prefix, cluster, name, 1, completed[name].Get("status"))
	}
	for _, name := range all[:len(all)-keep] {
		assert.Empty(t, objectsUnder(name), "every object of the pruned backup %s is gone", name)
		_, err := kubectlRun("", "get", "valkeybackup", name, "-n", n.name)
		assert.Error(t, err, "the pruned ValkeyBackup %s is deleted", name)
	}
	assert.Equal(t, "Completed", gjson.Parse(n.kubectl("get", "valkeybackup", "by-hand", "-o", "json")).Get("status.phase").String(), "the backup made by hand is never pruned")
	n.requireBackupInBucket(cl, store.Bucket, prefix, cluster, "by-hand", 1, hand.Get("status"))
	reasons := n.clusterEventReasons(cluster)
	assert.Contains(t, reasons, backup.ReasonScheduled)
	assert.Contains(t, reasons, backup.ReasonPruned)

	// Suspended: no run is made over one interval plus a margin. This is a bounded wait
	// asserting an absence, polled, not a stand-in for a condition.
	quiet := interval + 5*time.Second
	for deadline := time.Now().Add(quiet); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		for name := range n.scheduledBackups(cluster) {
			if _, ok := before[name]; !ok {
				t.Fatalf("scheduled backup %s made while the schedule is suspended", name)
			}
		}
	}
	t.Logf("e2e: suspended: no scheduled backup made in %s", quiet)

	// The cluster deleted: its backups, which it does not own, stay with their objects,
	// also once the garbage collector has removed what it did own.
	kept := n.scheduledBackups(cluster)
	require.Len(t, kept, keep)
	n.kubectl("delete", "valkeycluster", cluster)
	n.eventually(90*time.Second, 500*time.Millisecond, "the cluster's ValkeyNodes gone", func() (bool, string, error) {
		out := strings.TrimSpace(n.kubectl("get", "valkeynodes", "-l", "valkey.gomomento.com/cluster="+cluster, "-o", "name"))
		return out == "", out, nil
	})
	after := n.scheduledBackups(cluster)
	for name := range kept {
		assert.Contains(t, after, name, "the scheduled backup %s survives its cluster", name)
		assert.Contains(t, objectsUnder(name), fmt.Sprintf("%s/%s/%s/%s/%s", prefix, n.name, cluster, name, backup.ManifestName))
	}
	assert.Equal(t, "Completed", gjson.Parse(n.kubectl("get", "valkeybackup", "by-hand", "-o", "json")).Get("status.phase").String())
	assert.NotEmpty(t, objectsUnder("by-hand"))
	t.Logf("e2e: scheduled backups whole test %.1fs after the schedule was set", time.Since(start).Seconds())
}
