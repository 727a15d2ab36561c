package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/tidwall/gjson"

	"github.com/gomomento/valkey-operator/internal/loadgen"
	"github.com/gomomento/valkey-operator/internal/poll"
	"github.com/gomomento/valkey-operator/reconciler/backup"
	"github.com/gomomento/valkey-operator/reconciler/render"
)

// scheduleKeep is spec.backup.keep of the schedule check.
const scheduleKeep = 2

// checkSchedule proves "a schedule of every minute keeps exactly keep completed backups and
// their objects": a small 3x1 cluster of version with spec.backup every minute, keep 2.
// Once -schedule-runs scheduled backups have completed, the schedule is suspended so the set
// holds still; then exactly keep are Completed, the newest ones, each with every shard object
// and its manifest in the bucket, and every object of the pruned ones is gone.
func (b *bench) checkSchedule(ctx context.Context, version string, tlsOn bool) error {
	const ns, name = "bench-backup-schedule", "sched"
	fmt.Printf("== schedule: valkey %s tls=%s every minute keep=%d ==\n", version, onOff(tlsOn), scheduleKeep)
	defer b.deleteNamespace(context.WithoutCancel(ctx), ns)
	config := "bench-sched-" + strings.ReplaceAll(version, ".", "-")
	if err := b.applyConfig(ctx, config, version); err != nil {
		return err
	}
	var m *tlsMaterial
	spec := clusterSpec{name: name, config: config, shards: 3}
	if tlsOn {
		var err error
		if m, err = b.setupTLS(ctx, ns, []string{name}); err != nil {
			return err
		}
		spec.tlsSecret = tlsSecretName
	}
	store, err := b.env.ObjectStore(ctx)
	if err != nil {
		return err
	}
	cl, err := store.Client()
	if err != nil {
		return err
	}
	if err := b.env.EnsureNamespace(ctx, ns); err != nil {
		return err
	}
	if _, err := b.kubectl.In(ns).Run(ctx, "create", "secret", "generic", "s3",
		"--from-literal=accessKey="+store.AccessKey, "--from-literal=secretKey="+store.SecretKey); err != nil {
		return err
	}
	prefix := "bench/" + ns
	c, _, err := b.activeCluster(ctx, ns, spec, m)
	if err != nil {
		return err
	}
	err = loadgen.Fill(ctx, c.client, keyPrefix, 10000, 5000, fillValue)
	c.close()
	if err != nil {
		return err
	}
	spec.backupYAML = fmt.Sprintf("    schedule: \"* * * * *\"\n    keep: %d\n    storage:\n      endpoint: %s\n      bucket: %s\n      prefix: %s\n      credentialsSecretRef:\n        name: s3\n",
		scheduleKeep, store.Endpoint, store.Bucket, prefix)
	start := time.Now()
	if err := b.applyCluster(ctx, ns, spec); err != nil {
		return err
	}

	// Every scheduled backup seen Completed, as last seen: pruned ones leave the list.
	completed := map[string]gjson.Result{}
	var kept []string
	wait := time.Duration(*scheduleRuns+2) * time.Minute
	err = poll.Until(ctx, time.Second, wait, fmt.Sprintf("%d scheduled backups completed, %d kept", *scheduleRuns, scheduleKeep), func(ctx context.Context) (bool, string, error) {
		l, err := b.scheduledBackups(ctx, ns, name)
		if err != nil {
			return false, err.Error(), nil
		}
		kept = kept[:0]
		for n, bk := range l {
			if bk.Get("status.phase").String() == "Completed" {
				completed[n] = bk
				kept = append(kept, n)
			}
		}
		return len(completed) >= *scheduleRuns && len(kept) == scheduleKeep, fmt.Sprintf("%d completed so far, %d Completed now", len(completed), len(kept)), nil
	})
	if err != nil {
		return err
	}
	logf("%s: %d scheduled backups completed %.0fs after spec.backup was set, %d Completed now", ns, len(completed), time.Since(start).Seconds(), len(kept))

	// Suspended, then settled: a run made just before finishes (and prunes), then nothing moves.
	if _, err := b.kubectl.In(ns).Run(ctx, "patch", "valkeycluster", name, "--type=merge", "-p", `{"spec":{"backup":{"suspend":true}}}`); err != nil {
		return err
	}
	err = poll.Until(ctx, time.Second, 2*time.Minute, "no scheduled backup Pending or Running, keep applied", func(ctx context.Context) (bool, string, error) {
		l, err := b.scheduledBackups(ctx, ns, name)
		if err != nil {
			return false, err.Error(), nil
		}
		kept = kept[:0]
		for n, bk := range l {
			switch p := bk.Get("status.phase").String(); p {
			case "Completed":
				completed[n] = bk
				kept = append(kept, n)
			case "Failed":
			default:
				return false, n + " " + p, nil
			}
		}
		return len(kept) == scheduleKeep, fmt.Sprintf("%d Completed", len(kept)), nil
	})
	if err != nil {
		return err
	}
	var all []string
	for n := range completed {
		all = append(all, n)
	}
	slices.Sort(all) // the names end in their due time: oldest first
	slices.Sort(kept)
	if !slices.Equal(all[len(all)-scheduleKeep:], kept) {
		return fmt.Errorf("kept %v, not the newest %d of %v", kept, scheduleKeep, all)
	}
	for _, n := range kept {
		if err := b.backupInBucket(ctx, cl, store.Bucket, prefix, completed[n]); err != nil {
			return fmt.Errorf("kept %s: %w", n, err)
		}
	}
	for _, n := range all[:len(all)-scheduleKeep] {
		dir := prefix + "/" + completed[n].Get("status.path").String() + "/"
		if left := listObjects(ctx, cl, store.Bucket, dir); len(left) > 0 {
			return fmt.Errorf("pruned %s: objects left under %s: %v", n, dir, left)
		}
		if _, err := b.kubectl.In(ns).Run(ctx, "get", "valkeybackup", n); err == nil {
			return fmt.Errorf("the pruned ValkeyBackup %s is still there", n)
		}
	}
	logf("%s: scheduled backups %v, kept %v with their objects; the pruned ones' objects gone", ns, all, kept)
	fmt.Printf("schedule: runs=%d kept=%d objects-ok=true\n", len(all), len(kept))
	return nil
}

// scheduledBackups is the scheduled ValkeyBackups of cluster by name, as JSON.
func (b *bench) scheduledBackups(ctx context.Context, ns, cluster string) (map[string]gjson.Result, error) {
	out, err := b.kubectl.In(ns).Run(ctx, "get", "valkeybackups", "-o", "json",
		"-l", fmt.Sprintf("%s=%s,%s=true", render.LabelCluster, cluster, backup.LabelScheduled))
	if err != nil {
		return nil, err
	}
	l := map[string]gjson.Result{}
	for _, bk := range gjson.Get(out, "items").Array() {
		l[bk.Get("metadata.name").String()] = bk
	}
	return l, nil
}

// backupInBucket fails unless every shard object of the backup bk and its manifest are in
// the bucket under the backup's path.
func (b *bench) backupInBucket(ctx context.Context, cl *minio.Client, bucket, prefix string, bk gjson.Result) error {
	dir := prefix + "/" + bk.Get("status.path").String() + "/"
	have := listObjects(ctx, cl, bucket, dir)
	want := []string{dir + backup.ManifestName}
	for _, s := range bk.Get("status.shards").Array() {
		want = append(want, s.Get("object").String())
	}
	if len(want) != 4 {
		return fmt.Errorf("status names %d shard objects, want 3", len(want)-1)
	}
	for _, k := range want {
		if !slices.Contains(have, k) {
			return fmt.Errorf("%s is not in the bucket (under %s: %v)", k, dir, have)
		}
	}
	return nil
}

// listObjects is the keys under prefix in bucket; a listing error is returned as a key, so
// that the checks above fail with it.
func listObjects(ctx context.Context, cl *minio.Client, bucket, prefix string) []string {
	var keys []string
	for o := range cl.ListObjects(ctx, bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if o.Err != nil {
			return append(keys, "listing error: "+o.Err.Error())
		}
		keys = append(keys, o.Key)
	}
	return keys
}
