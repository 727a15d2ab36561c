package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"

	"github.com/gomomento/valkey-operator/devcluster"
	"github.com/gomomento/valkey-operator/devcluster/devtest"
	"github.com/gomomento/valkey-operator/devcluster/dockernet"
	"github.com/gomomento/valkey-operator/internal/clusterview"
	"github.com/gomomento/valkey-operator/internal/kubectl"
	"github.com/gomomento/valkey-operator/internal/operatorproc"
	"github.com/gomomento/valkey-operator/internal/poll"
	"github.com/gomomento/valkey-operator/internal/valkeycli"
	"github.com/gomomento/valkey-operator/reconciler/render"
	"github.com/gomomento/valkey-operator/valkeyops/model"
)

const operatorNamespace = "valkey-operator-bench"

// bench is the dev cluster with the operator running against it.
type bench struct {
	root    string
	env     *devtest.Env
	dyn     dynamic.Interface
	kubectl kubectl.Runner
	logDir  string
	opLog   string
	op      *operatorproc.Process // nil when the fleet measures deploy/'s Deployment
	fleetOp fleetOperator
	// pprofURL is the operator's net/http/pprof root ("" unless -operator-heap-profile).
	pprofURL string
}

// startBench builds the operator, starts a private dev cluster, installs the CRDs and the
// example menu (ValkeyImage, ValkeyConfig) and runs the operator on the host (the fleet
// scenario: installs deploy/'s Deployment instead, unless -fleet-host-operator).
func startBench(ctx context.Context) (*bench, error) {
	root, err := devcluster.FindRoot()
	if err != nil {
		return nil, err
	}
	logDir, err := os.MkdirTemp("", "bench-day2-")
	if err != nil {
		return nil, err
	}
	b := &bench{root: root, logDir: logDir, opLog: filepath.Join(logDir, "manager.log")}
	atExit(func() {
		if runFailed || *keepLogs {
			fmt.Fprintf(os.Stderr, "bench-day2: operator log kept in %s\n", b.opLog)
			return
		}
		_ = os.RemoveAll(logDir)
	})

	shipped := *fleetMode && !*fleetHostOperator
	bin := filepath.Join(logDir, "manager")
	if !shipped {
		build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/manager")
		build.Dir = root
		if out, err := build.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("building cmd/manager: %v\n%s", err, out)
		}
		logf("operator built")
	}

	upCtx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	env, stop, err := devtest.New(upCtx, devtest.Options{})
	cancel()
	if err != nil {
		return nil, fmt.Errorf("dev cluster: %w", err)
	}
	atExit(func() {
		if (runFailed || *keepLogs) && env.Cluster != nil {
			// The private cluster's state directory goes with it: keep its component
			// logs (the dev kubelet's pod start-up among them) beside the operator's.
			dst := filepath.Join(logDir, "devcluster-logs")
			if out, err := exec.Command("cp", "-r", filepath.Join(env.Cluster.Options.StateDir, "logs"), dst).CombinedOutput(); err != nil {
				fmt.Fprintf(os.Stderr, "bench-day2: keeping the dev cluster logs: %v: %s\n", err, out)
			} else {
				fmt.Fprintf(os.Stderr, "bench-day2: dev cluster logs kept in %s\n", dst)
			}
		}
		logf("stopping the dev cluster %s", env.Instance)
		if err := stop(); err != nil {
			fmt.Fprintln(os.Stderr, "bench-day2: dev cluster teardown:", err)
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
	if shipped {
		if err := b.installShipped(ctx); err != nil {
			return nil, err
		}
		b.fleetOp = shippedOperator{b}
	} else {
		if err := b.startOperator(ctx, bin); err != nil {
			return nil, err
		}
		b.fleetOp = hostOperator{b}
	}
	if _, err := b.kubectl.Run(ctx, "apply", "-f", filepath.Join(root, "examples", "valkeyimage.yaml"),
		"-f", filepath.Join(root, "examples", "valkeyconfig.yaml")); err != nil {
		return nil, err
	}
	logf("operator running, example ValkeyImage and ValkeyConfig applied")
	return b, nil
}

// explain adds the operator log's tail to an error of the measuring part.
func (b *bench) explain(err error) error {
	if b.op == nil {
		return fmt.Errorf("%w\n(the operator's log: kubectl logs -n %s deployment/%s)", err, shippedNamespace, shippedDeployment)
	}
	return fmt.Errorf("%w\noperator log tail:\n%s", err, operatorproc.Tail(b.opLog, 60, 500))
}

// startOperator runs the manager binary (no leader election, metrics and probes on free
// ports) and waits for its readiness endpoint; it is stopped with SIGTERM at exit.
func (b *bench) startOperator(ctx context.Context, bin string) error {
	// Sub-second timestamps: the single-apply breakdown is read against the operator's
	// log, and whole seconds cannot place its steps.
	args := []string{"--zap-time-encoding=rfc3339nano"}
	if *operatorDebug {
		args = append(args, "--zap-log-level=debug")
	}
	if *heapProfile != "" {
		ports, err := operatorproc.FreePorts(1)
		if err != nil {
			return err
		}
		addr := fmt.Sprintf("127.0.0.1:%d", ports[0])
		args = append(args, "--pprof-bind-address="+addr)
		b.pprofURL = "http://" + addr + "/debug/pprof/"
	}
	op, err := operatorproc.Start(ctx, operatorproc.Options{
		Bin: bin, Kubeconfig: b.env.Kubeconfig, Namespace: operatorNamespace, LogPath: b.opLog, Args: args,
	})
	if err != nil {
		return err
	}
	b.op = op
	atExit(func() {
		if op.Running() != nil {
			return
		}
		logf("stopping the operator (pid %d)", op.Pid())
		_ = op.Stop()
	})
	return nil
}

// valkeyNodes lists the cluster's ValkeyNodes with their status.
func (b *bench) valkeyNodes(ctx context.Context, ns, cluster string) ([]clusterview.Node, error) {
	return clusterview.List(ctx, b.dyn, ns, cluster)
}

// livePods lists the cluster's pods that are not being deleted.
func (b *bench) livePods(ctx context.Context, ns, cluster string) ([]corev1.Pod, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	l, err := b.env.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: render.LabelCluster + "=" + cluster})
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(l.Items, func(p corev1.Pod) bool { return p.DeletionTimestamp != nil }), nil
}

// podIPs maps the cluster's pod names to their IPs (pods without an IP are left out).
func (b *bench) podIPs(ctx context.Context, ns, cluster string) (map[string]string, error) {
	pods, err := b.livePods(ctx, ns, cluster)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, p := range pods {
		if p.Status.PodIP != "" {
			out[p.Name] = p.Status.PodIP
		}
	}
	return out, nil
}

func (b *bench) secret(ctx context.Context, ns, name, key string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	s, err := b.env.Kube.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	v, ok := s.Data[key]
	if !ok {
		return "", fmt.Errorf("secret %s/%s has no key %q", ns, name, key)
	}
	return string(v), nil
}

// applyCluster creates namespace ns and a ValkeyCluster of configRef in it.
func (b *bench) applyCluster(ctx context.Context, ns, name, configRef string, shards, replicas int) error {
	if err := b.env.EnsureNamespace(ctx, ns); err != nil {
		return err
	}
	_, err := b.kubectl.In(ns).RunWithInput(ctx, fmt.Sprintf("apiVersion: valkey.gomomento.com/v1alpha1\nkind: ValkeyCluster\nmetadata:\n  name: %s\nspec:\n  configRef: %s\n  shards: %d\n  replicasPerShard: %d\n",
		name, configRef, shards, replicas), "apply", "-f", "-")
	return err
}

// deleteCluster deletes the ValkeyCluster and waits until its containers are gone, so the
// next measurement starts on free cores.
func (b *bench) deleteCluster(ctx context.Context, ns, name string) error {
	if _, err := b.kubectl.In(ns).Run(ctx, "delete", "valkeycluster", name, "--wait=false"); err != nil {
		return err
	}
	return poll.Until(ctx, 500*time.Millisecond, 2*time.Minute, "containers of "+ns+" gone", func(ctx context.Context) (bool, string, error) {
		ids, err := b.containers(ctx, ns, "")
		if err != nil {
			return false, err.Error(), nil
		}
		return len(ids) == 0, fmt.Sprintf("%d containers left", len(ids)), nil
	})
}

// containers lists the IDs of the dev cluster's running containers of namespace ns (of pod
// pod when given), found by the labels the dev kubelet puts on them.
func (b *bench) containers(ctx context.Context, ns, pod string) ([]string, error) {
	args := []string{"ps", "-q",
		"--filter", "label=" + dockernet.LabelInstance + "=" + b.env.Instance,
		"--filter", "label=" + dockernet.LabelPodNamespace + "=" + ns}
	if pod != "" {
		args = append(args, "--filter", "label="+dockernet.LabelPodName+"="+pod)
	}
	out, err := docker(ctx, args...)
	if err != nil {
		return nil, err
	}
	return strings.Fields(out), nil
}

func docker(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "docker", args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("docker %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// converge describes what "converged" means for one wait.
type converge struct {
	nodes    int    // ValkeyNodes, all Active, and as many pods with IPs
	gone     string // a ValkeyNode that must be gone (retired); "" for none
	balanced int    // > 0: exactly this many primaries, each within 1% of an even share
	// connectTimeout > 0 bounds each connection of the cluster check (see clusterCheck).
	connectTimeout time.Duration
}

// waitConverged polls until the cluster is converged as c says and `valkey-cli --cluster
// check` is clean. Cheap API reads run every 250 ms; valkey-cli only once they pass.
func (b *bench) waitConverged(ctx context.Context, ns, cluster string, c converge, timeout time.Duration, password string) error {
	return poll.Until(ctx, 250*time.Millisecond, timeout, fmt.Sprintf("%s/%s converged on %d nodes", ns, cluster, c.nodes), func(ctx context.Context) (bool, string, error) {
		ok, status := b.convergedNow(ctx, ns, cluster, c, password)
		return ok, status, nil
	})
}

func (b *bench) convergedNow(ctx context.Context, ns, cluster string, c converge, password string) (bool, string) {
	nodes, err := b.valkeyNodes(ctx, ns, cluster)
	if err != nil {
		return false, err.Error()
	}
	desc, active := clusterview.Describe(nodes)
	for _, n := range nodes {
		if n.Name == c.gone {
			return false, c.gone + " not retired yet: " + desc
		}
	}
	ips, err := b.podIPs(ctx, ns, cluster)
	if err != nil {
		return false, err.Error()
	}
	if len(nodes) != c.nodes || active != c.nodes || len(ips) != c.nodes {
		return false, fmt.Sprintf("%d pods with IPs; nodes %s", len(ips), desc)
	}
	var addr string
	for _, ip := range ips {
		addr = net.JoinHostPort(ip, "6379")
		break
	}
	out, err := clusterCheck(ctx, addr, password, c.connectTimeout)
	if err != nil || !strings.Contains(out, "[OK] All 16384 slots covered.") || strings.Contains(out, "[ERR]") ||
		!strings.Contains(out, "[OK] All nodes agree about slots configuration.") {
		return false, "cluster check: " + out
	}
	if c.balanced > 0 {
		view, err := clusterNodes(ctx, addr, password)
		if err != nil {
			return false, err.Error()
		}
		if ok, why := balanced(view, c.balanced); !ok {
			return false, why
		}
	}
	return true, ""
}

// balanced: exactly n primaries hold slots, each within 1% of the slot space of an even share.
func balanced(view []model.ClusterNode, n int) (bool, string) {
	var counts []int
	for _, p := range view {
		if p.IsPrimary() && len(p.Slots) > 0 {
			counts = append(counts, model.CountSlots(p.Slots))
		}
	}
	if len(counts) != n {
		return false, fmt.Sprintf("slot counts %v, want %d primaries", counts, n)
	}
	for _, k := range counts {
		if d := k - model.SlotCount/n; d > model.SlotCount/100 || -d > model.SlotCount/100 {
			return false, fmt.Sprintf("slot counts %v not balanced", counts)
		}
	}
	return true, ""
}

// clusterCheck runs `valkey-cli --cluster check` as the default user. valkey-cli connects to
// every address the servers list; connectTimeout > 0 bounds each connection (its -t), so an
// address a restarted pod left behind fails the check at once instead of holding it until
// the 30 s bound (0: valkey-cli's default, no bound of its own).
func clusterCheck(ctx context.Context, addr, password string, connectTimeout time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	args := []string{"--cluster", "check", addr}
	if connectTimeout > 0 {
		args = append([]string{"-t", strconv.FormatFloat(connectTimeout.Seconds(), 'f', -1, 64)}, args...)
	}
	out, err := valkeycli.Command(ctx, password, args...).CombinedOutput()
	return string(out), err
}
