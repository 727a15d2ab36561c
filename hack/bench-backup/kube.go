package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/gomomento/valkey-operator/devcluster"
	"github.com/gomomento/valkey-operator/devcluster/devtest"
	"github.com/gomomento/valkey-operator/internal/kubectl"
	"github.com/gomomento/valkey-operator/internal/operatorproc"
	"github.com/gomomento/valkey-operator/internal/poll"
	"github.com/gomomento/valkey-operator/reconciler/render"
)

const operatorNamespace = "valkey-operator-bench"

var (
	clusterGVR = schema.GroupVersionResource{Group: "valkey.gomomento.com", Version: "v1alpha1", Resource: "valkeyclusters"}
	backupGVR  = schema.GroupVersionResource{Group: "valkey.gomomento.com", Version: "v1alpha1", Resource: "valkeybackups"}
)

// bench is the dev cluster with the operator running against it on the host.
type bench struct {
	root    string
	env     *devtest.Env
	dyn     dynamic.Interface
	kubectl kubectl.Runner
	logDir  string
	opLog   string
	op      *operatorproc.Process
}

// backupTransfers is the operator's --backup-transfers in this bench: the shard transfers it
// runs at once (its default is 2). The baseline streams the 3 shards of a 3x1 cluster at
// once, so the operator must be allowed as many for the two to compare like with like.
const backupTransfers = 3

// startBench builds the operator, starts a private dev cluster (with its object store),
// installs the CRDs and the example ValkeyImages and runs the operator on the host.
func startBench(ctx context.Context) (*bench, error) {
	root, err := devcluster.FindRoot()
	if err != nil {
		return nil, err
	}
	logDir, err := os.MkdirTemp("", "bench-backup-")
	if err != nil {
		return nil, err
	}
	b := &bench{root: root, logDir: logDir, opLog: filepath.Join(logDir, "manager.log")}
	atExit(func() {
		if runFailed || *keepLogs {
			fmt.Fprintf(os.Stderr, "bench-backup: operator log kept in %s\n", b.opLog)
			return
		}
		_ = os.RemoveAll(logDir)
	})
	bin := filepath.Join(logDir, "manager")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/manager")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("building cmd/manager: %v\n%s", err, out)
	}
	logf("operator built")

	upCtx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	env, stop, err := devtest.New(upCtx, devtest.Options{})
	cancel()
	if err != nil {
		return nil, fmt.Errorf("dev cluster: %w", err)
	}
	atExit(func() {
		logf("stopping the dev cluster %s", env.Instance)
		if err := stop(); err != nil {
			fmt.Fprintln(os.Stderr, "bench-backup: dev cluster teardown:", err)
		}
	})
	logf("dev cluster %s up", env.Instance)
	b.env, b.kubectl = env, env.KubectlRunner()
	if b.dyn, err = dynamic.NewForConfig(env.REST); err != nil {
		return nil, err
	}
	if _, err := b.kubectl.Run(ctx, "apply", "-f", filepath.Join(root, "crds")); err != nil {
		return nil, err
	}
	if _, err := b.kubectl.Run(ctx, "wait", "--for=condition=established", "--timeout=60s", "crd", "--all"); err != nil {
		return nil, err
	}
	if err := b.env.EnsureNamespace(ctx, operatorNamespace); err != nil {
		return nil, err
	}
	if err := b.env.WaitSchedulable(ctx, time.Minute); err != nil {
		return nil, err
	}
	op, err := operatorproc.Start(ctx, operatorproc.Options{
		Bin: bin, Kubeconfig: b.env.Kubeconfig, Namespace: operatorNamespace, LogPath: b.opLog,
		Args: []string{"--zap-time-encoding=rfc3339nano", "--restore-image", *restoreImage,
			fmt.Sprintf("--backup-transfers=%d", backupTransfers)},
	})
	if err != nil {
		return nil, err
	}
	b.op = op
	atExit(func() {
		if op.Running() != nil {
			return
		}
		logf("stopping the operator (pid %d)", op.Pid())
		_ = op.Stop()
	})
	if _, err := b.kubectl.Run(ctx, "apply", "-f", filepath.Join(root, "examples", "valkeyimage.yaml")); err != nil {
		return nil, err
	}
	logf("operator running (pid %d, --backup-transfers=%d: 3 shards streamed at once, as the baseline's 3 valkey-cli --rdb; peak memory (VmHWM) before any backup %s), example ValkeyImages applied",
		op.Pid(), backupTransfers, b.peakMemory())
	return b, nil
}

// explain adds the operator log's tail to an error.
func (b *bench) explain(err error) error {
	return fmt.Errorf("%w\noperator log tail:\n%s", err, operatorproc.Tail(b.opLog, 60, 500))
}

// applyConfig creates ValkeyConfig name on ValkeyImage valkey-<version>, with room for the
// whole data set (no eviction: every key written must be there to back up).
func (b *bench) applyConfig(ctx context.Context, name, version string) error {
	_, err := b.kubectl.RunWithInput(ctx, fmt.Sprintf(`apiVersion: valkey.gomomento.com/v1alpha1
kind: ValkeyConfig
metadata:
  name: %s
spec:
  imageRef: valkey-%s
  resources:
    cpu: 500m
    memory: 1Gi
  valkey:
    maxmemory: 900mb
    maxmemory-policy: noeviction
`, name, version), "apply", "-f", "-")
	return err
}

// clusterSpec is what the bench varies in a ValkeyCluster.
type clusterSpec struct {
	name, config string
	shards       int
	tlsSecret    string // spec.tls.secretRef unless ""
	restoreFrom  string // spec.restoreFrom.backup unless ""
	backupYAML   string // spec.backup (indented under it) unless ""
}

// applyCluster applies a ValkeyCluster of spec in ns with one replica per shard.
func (b *bench) applyCluster(ctx context.Context, ns string, spec clusterSpec) error {
	if err := b.env.EnsureNamespace(ctx, ns); err != nil {
		return err
	}
	y := fmt.Sprintf("apiVersion: valkey.gomomento.com/v1alpha1\nkind: ValkeyCluster\nmetadata:\n  name: %s\nspec:\n  configRef: %s\n  shards: %d\n  replicasPerShard: 1\n",
		spec.name, spec.config, spec.shards)
	if spec.tlsSecret != "" {
		y += fmt.Sprintf("  tls:\n    secretRef: %s\n", spec.tlsSecret)
	}
	if spec.restoreFrom != "" {
		y += fmt.Sprintf("  restoreFrom:\n    backup: %s\n", spec.restoreFrom)
	}
	if spec.backupYAML != "" {
		y += "  backup:\n" + spec.backupYAML
	}
	_, err := b.kubectl.In(ns).RunWithInput(ctx, y, "apply", "-f", "-")
	return err
}

// deleteCluster deletes ValkeyCluster name and waits until its pods are gone, so that the
// next cluster does not share the machine's memory with it.
func (b *bench) deleteCluster(ctx context.Context, ns, name string) error {
	start := time.Now()
	if _, err := b.kubectl.In(ns).Run(ctx, "delete", "valkeycluster", name, "--wait=true"); err != nil {
		return err
	}
	err := poll.Until(ctx, 250*time.Millisecond, 3*time.Minute, fmt.Sprintf("pods of %s/%s gone", ns, name), func(ctx context.Context) (bool, string, error) {
		l, err := b.env.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: render.LabelCluster + "=" + name})
		if err != nil {
			return false, err.Error(), nil
		}
		return len(l.Items) == 0, fmt.Sprintf("%d pods left", len(l.Items)), nil
	})
	if err == nil {
		logf("%s/%s deleted, its pods gone in %.1fs", ns, name, time.Since(start).Seconds())
	}
	return err
}

// peakMemory is the operator process's peak resident set size (VmHWM) as /proc reports it.
func (b *bench) peakMemory() string {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", b.op.Pid()))
	if err != nil {
		return err.Error()
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return "no VmHWM in /proc/<pid>/status"
}

// waitStatus polls the object's status until field (a path under status) equals want; a
// failed phase ends the wait early with its message.
func (b *bench) waitStatus(ctx context.Context, gvr schema.GroupVersionResource, ns, name, field, want string, timeout time.Duration) (*unstructured.Unstructured, error) {
	var got *unstructured.Unstructured
	err := poll.Until(ctx, 100*time.Millisecond, timeout, fmt.Sprintf("%s %s/%s %s=%s", gvr.Resource, ns, name, field, want), func(ctx context.Context) (bool, string, error) {
		u, err := b.dyn.Resource(gvr).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		v, _, _ := unstructured.NestedString(u.Object, "status", field)
		msg, _, _ := unstructured.NestedString(u.Object, "status", "message")
		if v == "Failed" {
			return false, "", fmt.Errorf("%s %s/%s failed: %s", gvr.Resource, ns, name, msg)
		}
		got = u
		return v == want, fmt.Sprintf("%s=%q message=%q", field, v, msg), nil
	})
	return got, err
}

func (b *bench) secret(ctx context.Context, ns, name, key string) (string, error) {
	var v string
	err := poll.Until(ctx, 250*time.Millisecond, 3*time.Minute, "Secret "+ns+"/"+name, func(ctx context.Context) (bool, string, error) {
		s, err := b.env.Kube.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		raw, ok := s.Data[key]
		v = string(raw)
		return ok, "no key " + key, nil
	})
	return v, err
}

// podIPs is the IPs of the cluster's live pods.
func (b *bench) podIPs(ctx context.Context, ns, cluster string) ([]string, error) {
	l, err := b.env.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: render.LabelCluster + "=" + cluster})
	if err != nil {
		return nil, err
	}
	var ips []string
	for _, p := range l.Items {
		if p.DeletionTimestamp == nil && p.Status.PodIP != "" {
			ips = append(ips, p.Status.PodIP)
		}
	}
	return ips, nil
}

// deleteNamespace removes ns and what is in it, without waiting.
func (b *bench) deleteNamespace(ctx context.Context, ns string) {
	if _, err := b.kubectl.Run(ctx, "delete", "namespace", ns, "--wait=false"); err != nil {
		logf("deleting namespace %s: %v", ns, err)
	}
}
