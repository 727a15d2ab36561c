package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gomomento/valkey-operator/devcluster/objectstore"
	"github.com/gomomento/valkey-operator/internal/loadgen"
	"github.com/gomomento/valkey-operator/internal/valkeycli"
	"github.com/gomomento/valkey-operator/valkeyops/model"
)

// rdbAndUpload times `valkey-cli --rdb` of every replica (all at once, with TLS when m is
// not nil) and then an rclone upload of the files to the store's bucket under prefix.
// Passwords and keys go through the environment only.
func (c *cluster) rdbAndUpload(ctx context.Context, store objectstore.Access, prefix string, m *tlsMaterial) (float64, error) {
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
			args := append([]string{"-h", host, "-p", port, "--user", model.OperatorUser}, m.cliArgs()...)
			args = append(args, "--rdb", filepath.Join(dir, fmt.Sprintf("shard-%d.rdb", i)))
			if out, err := valkeycli.Command(ctx, c.operatorPw, args...).CombinedOutput(); err != nil {
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
	cmd := exec.CommandContext(ctx, "rclone", "copy", "--s3-no-check-bucket", dir, "benchstore:"+store.Bucket+"/"+prefix)
	cmd.Env = append(rcloneEnviron(),
		"RCLONE_CONFIG_BENCHSTORE_TYPE=s3",
		"RCLONE_CONFIG_BENCHSTORE_PROVIDER=Other",
		"RCLONE_CONFIG_BENCHSTORE_ENDPOINT="+store.Endpoint,
		"RCLONE_CONFIG_BENCHSTORE_REGION="+objectstore.Region,
		"RCLONE_CONFIG_BENCHSTORE_ACCESS_KEY_ID="+store.AccessKey,
		"RCLONE_CONFIG_BENCHSTORE_SECRET_ACCESS_KEY="+store.SecretKey)
	if out, err := cmd.CombinedOutput(); err != nil {
		return 0, fmt.Errorf("rclone copy: %v: %s", err, strings.ReplaceAll(string(out), store.SecretKey, "<secret>"))
	}
	total := time.Since(start)
	logf("%s/%s baseline: --rdb of 3 replicas at once %.2fs, upload %.2fs", c.ns, c.name, rdbDone.Seconds(), (total - rdbDone).Seconds())
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

// rewriteBaseline is the restore's baseline over the same span as the restore's clock: from
// kubectl apply of an empty cluster of spec through Active, then every keyPrefix key
// re-written through a pipelined cluster client. The bench's own connecting between the two
// is left out, as it is from the restore. It returns the two parts, and deletes the cluster.
func (b *bench) rewriteBaseline(ctx context.Context, ns string, spec clusterSpec, m *tlsMaterial) (form, rewrite time.Duration, err error) {
	empty, form, err := b.activeCluster(ctx, ns, spec, m)
	if err != nil {
		return 0, 0, err
	}
	start := time.Now()
	err = loadgen.Fill(ctx, empty.client, keyPrefix, *keys, 5000, fillValue)
	rewrite = time.Since(start)
	empty.close()
	if err != nil {
		return 0, 0, err
	}
	logf("%s: restore baseline: an empty %dx1 cluster Active %.2fs after kubectl apply, then %d keys re-written in %.2fs",
		ns, spec.shards, form.Seconds(), *keys, rewrite.Seconds())
	return form, rewrite, b.deleteCluster(ctx, ns, spec.name)
}
