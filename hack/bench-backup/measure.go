package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tidwall/gjson"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/gomomento/valkey-operator/internal/loadgen"
	"github.com/gomomento/valkey-operator/internal/poll"
)

const keyPrefix = "k:"

func fillValue(i int) string {
	s := strconv.Itoa(i)
	for len(s) < *valueBytes {
		s = "0" + s
	}
	return s
}

// source is what a restore is checked against: the source's keyPrefix keys, the writes
// acknowledged before the backup started and the slot ranges the backup recorded.
type source struct {
	keys     int
	digest   string
	before   []int
	recorded [][]string
}

// measure runs the backup and restore comparisons on one Valkey version and prints them.
func (b *bench) measure(ctx context.Context, version string, tlsOn bool) error {
	fmt.Printf("== valkey %s tls=%s keys=%d ==\n", version, onOff(tlsOn), *keys)
	slug := strings.ReplaceAll(version, ".", "-")
	ns, config := "bench-backup-"+slug, "bench-"+slug
	defer b.deleteNamespace(context.WithoutCancel(ctx), ns)
	if err := b.applyConfig(ctx, config, version); err != nil {
		return err
	}
	var m *tlsMaterial
	spec := func(name string, shards int, restoreFrom string) clusterSpec {
		s := clusterSpec{name: name, config: config, shards: shards, restoreFrom: restoreFrom}
		if m != nil {
			s.tlsSecret = tlsSecretName
		}
		return s
	}
	if tlsOn {
		var err error
		if m, err = b.setupTLS(ctx, ns, []string{"src", "restored-3", "restored-2", "restored-4", "rewrite"}); err != nil {
			return err
		}
	}

	// The source cluster, filled; its digest before the writer starts.
	src, _, err := b.activeCluster(ctx, ns, spec("src", 3, ""), m)
	if err != nil {
		return err
	}
	defer src.close()
	start := time.Now()
	if err := loadgen.Fill(ctx, src.client, keyPrefix, *keys, 5000, fillValue); err != nil {
		return err
	}
	logf("%s: %d keys written in %.1fs", ns, *keys, time.Since(start).Seconds())
	var want source
	if want.keys, want.digest, err = src.digest(ctx, keyPrefix); err != nil {
		return fmt.Errorf("source digest: %w", err)
	}
	if want.keys != *keys {
		return fmt.Errorf("the source holds %d keys, %d were written", want.keys, *keys)
	}
	w, err := startWriter(ctx, src.client)
	if err != nil {
		return err
	}
	writerRunning := true
	defer func() {
		if writerRunning {
			w.Stop()
		}
	}()

	// The operator's backup, with the writer running.
	store, err := b.env.ObjectStore(ctx)
	if err != nil {
		return err
	}
	if _, err := b.kubectl.In(ns).Run(ctx, "create", "secret", "generic", "s3",
		"--from-literal=accessKey="+store.AccessKey, "--from-literal=secretKey="+store.SecretKey); err != nil {
		return err
	}
	prefix := "bench/" + ns
	start = time.Now()
	if _, err := b.kubectl.In(ns).RunWithInput(ctx, fmt.Sprintf(`apiVersion: valkey.gomomento.com/v1alpha1
kind: ValkeyBackup
metadata:
  name: snap
spec:
  cluster: src
  storage:
    endpoint: %s
    bucket: %s
    prefix: %s
    credentialsSecretRef:
      name: s3
`, store.Endpoint, store.Bucket, prefix), "apply", "-f", "-"); err != nil {
		return err
	}
	bk, err := b.waitStatus(ctx, backupGVR, ns, "snap", "phase", "Completed", *stepTimeout)
	if err != nil {
		return err
	}
	backupS := time.Since(start).Seconds()
	bytes, _, _ := unstructured.NestedInt64(bk.Object, "status", "bytes")
	logf("%s: backup Completed in %.2fs (%d bytes), %d writes acknowledged so far; operator peak memory (VmHWM) %s",
		ns, backupS, bytes, w.Acked(), b.peakMemory())
	status, err := bk.MarshalJSON()
	if err != nil {
		return err
	}
	st := gjson.GetBytes(status, "status")
	for _, s := range st.Get("shards").Array() {
		var slots []string
		for _, r := range s.Get("slots").Array() {
			slots = append(slots, r.String())
		}
		want.recorded = append(want.recorded, slots)
	}
	sortRangeLists(want.recorded)
	served, err := src.primarySlots(ctx)
	if err != nil {
		return err
	}
	if !slices.EqualFunc(served, want.recorded, slices.Equal) {
		return fmt.Errorf("the backup recorded slots %v, the source serves %v", want.recorded, served)
	}

	// Its baseline: valkey-cli --rdb of every replica, then rclone to the same store.
	baseBackupS, err := src.rdbAndUpload(ctx, store, prefix+"/baseline", m)
	if err != nil {
		return fmt.Errorf("backup baseline: %w", err)
	}
	logf("%s: valkey-cli --rdb + rclone in %.2fs", ns, baseBackupS)
	fmt.Printf("backup: keys=%d bytes=%d seconds=%.2f mb-per-s=%.1f baseline-s=%.2f\n", want.keys, bytes, backupS, float64(bytes)/1e6/backupS, baseBackupS)
	fmt.Printf("backup: ratio=%.2f (target <= 1.5)\n", backupS/baseBackupS)

	// The writer stopped, the source deleted: a restore starts from the backup alone.
	res := w.Stop()
	writerRunning = false
	startedAt, err := time.Parse(time.RFC3339, st.Get("startedAt").String())
	if err != nil {
		return fmt.Errorf("status.startedAt: %w", err)
	}
	// startedAt has whole seconds: writes acknowledged strictly before that second, never
	// one the backup could have missed.
	want.before = res.AckedBefore(startedAt)
	logf("%s: writer stopped: %d writes acknowledged, %d failed, %d acknowledged before startedAt %s",
		ns, len(res.Acked), res.Failed, len(want.before), startedAt.Format(time.RFC3339))
	if len(want.before) == 0 {
		return fmt.Errorf("no write was acknowledged before the backup started at %s", startedAt)
	}
	src.close()
	if err := b.deleteCluster(ctx, ns, "src"); err != nil {
		return err
	}

	// The restore into the same shard count, timed against the re-write.
	same, err := b.restore(ctx, ns, spec("restored-3", 3, "snap"), m, want)
	if err != nil {
		return err
	}
	restoreS := same.active.Seconds()
	form, rewrite, err := b.rewriteBaseline(ctx, ns, spec("rewrite", 3, ""), m)
	if err != nil {
		return fmt.Errorf("restore baseline: %w", err)
	}
	baseRestoreS := (form + rewrite).Seconds()
	fmt.Printf("restore: keys=%d seconds=%.2f baseline-s=%.2f\n", same.keys, restoreS, baseRestoreS)
	fmt.Printf("restore: ratio=%.2f (target < 1)\n", restoreS/baseRestoreS)

	// Reshaped: the same backup into 2 and into 4 shards.
	for _, shards := range []int{2, 4} {
		r, err := b.restore(ctx, ns, spec(fmt.Sprintf("restored-%d", shards), shards, "snap"), m, want)
		if err != nil {
			return err
		}
		fmt.Printf("restore-reshaped: shards=%d keys=%d seconds=%.2f balanced-s=%.2f writer-keys=%d\n",
			shards, r.keys, r.active.Seconds(), r.balanced.Seconds(), len(want.before))
	}
	return nil
}

// restored is one restore's figures.
type restored struct {
	keys   int
	active time.Duration // kubectl apply to Active
	// balanced is kubectl apply to the slots balanced over the new shard count (a reshaped
	// restore, which can report Active before its slots have moved); active otherwise.
	balanced time.Duration
}

// restore creates the cluster of spec from its backup, times it from kubectl apply to
// Active, checks it against want, and deletes it.
func (b *bench) restore(ctx context.Context, ns string, spec clusterSpec, m *tlsMaterial, want source) (restored, error) {
	start := time.Now()
	c, took, err := b.activeCluster(ctx, ns, spec, m)
	if err != nil {
		return restored{}, fmt.Errorf("restore into %d shards: %w", spec.shards, err)
	}
	defer c.close()
	logf("%s: restore into %d shards Active %.2fs after kubectl apply", ns, spec.shards, took.Seconds())
	r := restored{active: took, balanced: took}
	if err := b.checkSlots(ctx, c, spec.shards, want.recorded); err != nil {
		return restored{}, fmt.Errorf("restore into %d shards: %w", spec.shards, err)
	}
	if spec.shards != len(want.recorded) {
		r.balanced = time.Since(start)
	}
	if r.keys, err = b.checkData(ctx, c, want); err != nil {
		return restored{}, fmt.Errorf("restore into %d shards: %w", spec.shards, err)
	}
	c.close()
	return r, b.deleteCluster(ctx, ns, spec.name)
}

// checkSlots fails unless c serves the slot ranges recorded when it has as many shards as
// recorded lists, else unless its slots are balanced over shards primaries and all covered.
// A reshaped cluster may report Active before its slots have moved: that is polled for (two
// minutes at most), and logged when it happens.
func (b *bench) checkSlots(ctx context.Context, c *cluster, shards int, recorded [][]string) error {
	slots, err := c.primarySlots(ctx)
	if err != nil {
		return err
	}
	if shards == len(recorded) {
		if !slices.EqualFunc(slots, recorded, slices.Equal) {
			return fmt.Errorf("the restored cluster serves slots %v, the backup recorded %v", slots, recorded)
		}
		return nil
	}
	if why := balanced(slots, shards); why != "" {
		logf("%s/%s: Active, not balanced yet: %s", c.ns, c.name, why)
		start := time.Now()
		err := poll.Until(ctx, 250*time.Millisecond, 2*time.Minute, fmt.Sprintf("%s/%s slots balanced over %d primaries", c.ns, c.name, shards), func(ctx context.Context) (bool, string, error) {
			if slots, err = c.primarySlots(ctx); err != nil {
				return false, err.Error(), nil
			}
			why := balanced(slots, shards)
			return why == "", why, nil
		})
		if err != nil {
			return err
		}
		logf("%s/%s: balanced %.1fs after the first check", c.ns, c.name, time.Since(start).Seconds())
	}
	logf("%s/%s: slots %v", c.ns, c.name, slots)
	return nil
}

// checkData fails unless c holds the source's keyPrefix keys byte for byte and every write
// acknowledged before the backup started; it returns how many keyPrefix keys c holds.
func (b *bench) checkData(ctx context.Context, c *cluster, want source) (int, error) {
	n, digest, err := c.digest(ctx, keyPrefix)
	if err != nil {
		return 0, fmt.Errorf("digest: %w", err)
	}
	if n != want.keys || digest != want.digest {
		return 0, fmt.Errorf("the restored %s keys differ from the source's: %d keys digest %s, source %d keys digest %s", keyPrefix, n, digest, want.keys, want.digest)
	}
	if err := checkWriterKeys(ctx, c.client, want.before); err != nil {
		return 0, err
	}
	logf("%s/%s: %d %s keys, digest %s matches; the %d writes acknowledged before the backup started all present",
		c.ns, c.name, n, keyPrefix, digest[:16], len(want.before))
	return n, nil
}
