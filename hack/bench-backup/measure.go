package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/valkey-io/valkey-go"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/gomomento/valkey-operator/devcluster/objectstore"
	"github.com/gomomento/valkey-operator/internal/loadgen"
	"github.com/gomomento/valkey-operator/reconciler/render"
	"github.com/gomomento/valkey-operator/valkeyops/model"
)

const keyPrefix = "k:"

func fillValue(i int) string {
	s := strconv.Itoa(i)
	for len(s) < *valueBytes {
		s = "0" + s
	}
	return s
}

// measure runs the backup and restore comparisons on one Valkey version and prints them.
func (b *bench) measure(ctx context.Context, version string) error {
	slug := strings.ReplaceAll(version, ".", "-")
	ns, config := "bench-backup-"+slug, "bench-"+slug
	defer b.deleteNamespace(context.WithoutCancel(ctx), ns)
	if err := b.applyConfig(ctx, config, version); err != nil {
		return err
	}

	// The source cluster, filled.
	src, err := b.activeCluster(ctx, ns, "src", config, "")
	if err != nil {
		return err
	}
	defer src.close()
	start := time.Now()
	if err := loadgen.Fill(ctx, src.client, keyPrefix, *keys, 5000, fillValue); err != nil {
		return err
	}
	logf("%s: %d keys written in %.1fs", ns, *keys, time.Since(start).Seconds())
	srcKeys, srcDigest, err := src.digest(ctx)
	if err != nil {
		return fmt.Errorf("source digest: %w", err)
	}
	if srcKeys != *keys {
		return fmt.Errorf("the source holds %d keys, %d were written", srcKeys, *keys)
	}

	// The operator's backup.
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
	logf("%s: backup Completed in %.2fs (%d bytes)", ns, backupS, bytes)

	// Its baseline: valkey-cli --rdb of every replica, then rclone to the same store.
	baseBackupS, err := src.rdbAndUpload(ctx, store.Endpoint, store.Bucket, prefix+"/baseline", store.AccessKey, store.SecretKey)
	if err != nil {
		return fmt.Errorf("backup baseline: %w", err)
	}
	logf("%s: valkey-cli --rdb + rclone in %.2fs", ns, baseBackupS)

	// The operator's restore into a new cluster, checked key by key.
	start = time.Now()
	restored, err := b.activeCluster(ctx, ns, "restored", config, "snap")
	if err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	defer restored.close()
	restoreS := time.Since(start).Seconds()
	gotKeys, gotDigest, err := restored.digest(ctx)
	if err != nil {
		return fmt.Errorf("restored digest: %w", err)
	}
	if gotKeys != srcKeys || gotDigest != srcDigest {
		return fmt.Errorf("restored cluster differs from its source: %d keys digest %s, source %d keys digest %s", gotKeys, gotDigest, srcKeys, srcDigest)
	}
	logf("%s: restore Active in %.2fs, %d keys, digest %s matches", ns, restoreS, gotKeys, gotDigest[:16])

	// Its baseline: the same keys re-written through a pipelined cluster client into an empty
	// cluster of the same shape (formed before the clock starts).
	start = time.Now()
	empty, err := b.activeCluster(ctx, ns, "rewrite", config, "")
	if err != nil {
		return err
	}
	defer empty.close()
	// For reading restore-s against baseline-s: the operator's restore includes forming
	// the cluster, which the baseline's clock leaves out.
	logf("%s: an empty 3x1 cluster Active in %.2fs (not in baseline-s)", ns, time.Since(start).Seconds())
	start = time.Now()
	if err := loadgen.Fill(ctx, empty.client, keyPrefix, *keys, 5000, fillValue); err != nil {
		return fmt.Errorf("restore baseline: %w", err)
	}
	baseRestoreS := time.Since(start).Seconds()

	fmt.Printf("backup: keys=%d bytes=%d seconds=%.2f mb-per-s=%.1f baseline-s=%.2f\n", srcKeys, bytes, backupS, float64(bytes)/1e6/backupS, baseBackupS)
	fmt.Printf("backup: ratio=%.2f (target <= 1.5)\n", backupS/baseBackupS)
	fmt.Printf("restore: keys=%d seconds=%.2f baseline-s=%.2f\n", gotKeys, restoreS, baseRestoreS)
	fmt.Printf("restore: ratio=%.2f (target < 1)\n", restoreS/baseRestoreS)
	return nil
}

// cluster is an Active 3x1 cluster and clients to it.
type cluster struct {
	ns, name   string
	operatorPw string
	client     valkey.Client // cluster mode, default user
	seed       string        // one server's address
}

func (c *cluster) close() { c.client.Close() }

// activeCluster applies a 3x1 cluster (restored from backup restoreFrom unless "") and waits
// until it is Active, then connects.
func (b *bench) activeCluster(ctx context.Context, ns, name, config, restoreFrom string) (*cluster, error) {
	if err := b.applyCluster(ctx, ns, name, config, restoreFrom); err != nil {
		return nil, err
	}
	if _, err := b.waitStatus(ctx, clusterGVR, ns, name, "state", "Active", *stepTimeout); err != nil {
		return nil, err
	}
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
		Dialer: net.Dialer{Timeout: 5 * time.Second}})
	if err != nil {
		return nil, err
	}
	return &cluster{ns: ns, name: name, operatorPw: operatorPw, client: c, seed: addrs[0]}, nil
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
		ForceSingleClient: true, DisableCache: true, Dialer: net.Dialer{Timeout: 5 * time.Second}})
}

// digest is the number of keys and a SHA-256 over every key and its value, sorted by key:
// the keys come from SCAN on every primary holding slots, the values from pipelined GETs.
func (c *cluster) digest(ctx context.Context) (int, string, error) {
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
			e, err := nc.Do(ctx, nc.B().Scan().Cursor(cursor).Count(10000).Build()).AsScanEntry()
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

// rdbAndUpload times `valkey-cli --rdb` of every replica (in parallel) and then an rclone
// upload of the files to bucket/prefix. Passwords and keys go through the environment only.
func (c *cluster) rdbAndUpload(ctx context.Context, endpoint, bucket, prefix, accessKey, secretKey string) (float64, error) {
	view, err := c.nodes(ctx)
	if err != nil {
		return 0, err
	}
	var replicas []string
	for _, n := range view {
		if n.IsReplica() && !n.Failing() {
			replicas = append(replicas, n.Addr())
		}
	}
	if len(replicas) != 3 {
		return 0, fmt.Errorf("want 3 healthy replicas, CLUSTER NODES shows %d", len(replicas))
	}
	dir, err := os.MkdirTemp("", "bench-backup-rdb-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)

	start := time.Now()
	errs := make([]error, len(replicas))
	var wg sync.WaitGroup
	for i, addr := range replicas {
		wg.Add(1)
		go func() {
			defer wg.Done()
			host, port, _ := net.SplitHostPort(addr)
			cmd := exec.CommandContext(ctx, "valkey-cli", "-h", host, "-p", port, "--user", model.OperatorUser,
				"--rdb", filepath.Join(dir, fmt.Sprintf("shard-%d.rdb", i)))
			cmd.Env = append(os.Environ(), "REDISCLI_AUTH="+c.operatorPw)
			if out, err := cmd.CombinedOutput(); err != nil {
				errs[i] = fmt.Errorf("valkey-cli --rdb of %s: %v: %s", addr, err, out)
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return 0, err
		}
	}
	rdbDone := time.Since(start)
	cmd := exec.CommandContext(ctx, "rclone", "copy", "--s3-no-check-bucket", dir, "benchstore:"+bucket+"/"+prefix)
	cmd.Env = append(rcloneEnviron(),
		"RCLONE_CONFIG_BENCHSTORE_TYPE=s3",
		"RCLONE_CONFIG_BENCHSTORE_PROVIDER=Other",
		"RCLONE_CONFIG_BENCHSTORE_ENDPOINT="+endpoint,
		"RCLONE_CONFIG_BENCHSTORE_REGION="+objectstore.Region,
		"RCLONE_CONFIG_BENCHSTORE_ACCESS_KEY_ID="+accessKey,
		"RCLONE_CONFIG_BENCHSTORE_SECRET_ACCESS_KEY="+secretKey)
	if out, err := cmd.CombinedOutput(); err != nil {
		return 0, fmt.Errorf("rclone copy: %v: %s", err, strings.ReplaceAll(string(out), secretKey, "<secret>"))
	}
	total := time.Since(start)
	logf("%s/%s baseline: --rdb of 3 replicas %.2fs, upload %.2fs", c.ns, c.name, rdbDone.Seconds(), (total - rdbDone).Seconds())
	return total.Seconds(), nil
}

// rcloneEnviron is this process's environment without AWS_* and RCLONE_* variables: the
// host's own (an AWS_CA_BUNDLE, say) would otherwise steer, or break, the baseline's client,
// which is configured for the dev store alone.
func rcloneEnviron() []string {
	return slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, "AWS_") || strings.HasPrefix(kv, "RCLONE_")
	})
}
