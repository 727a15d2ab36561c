//go:build e2e

package e2e

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	corev1 "k8s.io/api/core/v1"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/moby/moby/client"

	"github.com/gomomento/valkey-operator/devcluster/dockernet"
	"github.com/gomomento/valkey-operator/internal/poll"
)

var (
	clustersGVR = schema.GroupVersionResource{Group: "valkey.gomomento.com", Version: "v1alpha1", Resource: "valkeyclusters"}
	nodesGVR    = schema.GroupVersionResource{Group: "valkey.gomomento.com", Version: "v1alpha1", Resource: "valkeynodes"}
)

// kubectlRun runs the real kubectl against the dev cluster; stdin may be empty.
func kubectlRun(stdin string, args ...string) (string, error) {
	return suite.env.KubectlRunner().RunWithInput(context.Background(), stdin, args...)
}

// ns is one test's namespace and what it needs to explain a failure.
type ns struct {
	t    *testing.T
	name string
	// serverTLS is how the login and operator-command helpers reach this namespace's
	// servers: nil for plaintext, the client side of the cluster's TLS otherwise.
	serverTLS *tls.Config
}

// newNamespace creates a namespace for t. On failure it dumps the namespace's state and the
// operator log; at the end it deletes the namespace's ValkeyClusters, waits for their
// containers to go (so the next test starts on free cores) and deletes the namespace.
func newNamespace(t *testing.T, prefix string) *ns {
	t.Helper()
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	n := &ns{t: t, name: prefix + "-" + hex.EncodeToString(b)}
	n.kubectl("create", "namespace", n.name)
	t.Cleanup(func() {
		if t.Failed() {
			n.dump()
		}
		if _, err := kubectlRun("", "delete", "valkeyclusters", "--all", "-n", n.name, "--wait=false"); err != nil {
			t.Logf("cleanup: %v", err)
		}
		if err := poll.Until(context.Background(), 500*time.Millisecond, 90*time.Second, "containers of "+n.name+" gone", func(context.Context) (bool, string, error) {
			names, err := n.containers()
			if err != nil {
				return false, err.Error(), nil
			}
			return len(names) == 0, fmt.Sprint(names), nil
		}); err != nil {
			t.Logf("cleanup: %v", err)
		}
		if _, err := kubectlRun("", "delete", "namespace", n.name, "--wait=false"); err != nil {
			t.Logf("cleanup: %v", err)
		}
	})
	return n
}

// kubectl runs kubectl in the namespace and fails the test (with context) on error.
func (n *ns) kubectl(args ...string) string {
	n.t.Helper()
	return n.kubectlIn("", args...)
}

// kubectlIn is kubectl with stdin.
func (n *ns) kubectlIn(stdin string, args ...string) string {
	n.t.Helper()
	out, err := kubectlRun(stdin, append(args, "-n", n.name)...)
	if err != nil {
		n.t.Fatalf("%v\n%s", err, out)
	}
	return out
}

// dump logs what explains a failure: the namespace's objects, the cluster's description
// and Events, the Docker containers and the operator's log tail.
func (n *ns) dump() {
	t := n.t
	for _, args := range [][]string{
		{"get", "valkeyclusters,valkeynodes,pods,secrets,configmaps,services", "-o", "wide"},
		{"get", "valkeyclusters", "-o", "yaml"},
		{"describe", "valkeyclusters"},
		{"describe", "pods"},
		{"get", "events", "--sort-by=.lastTimestamp"},
	} {
		out, err := kubectlRun("", append(args, "-n", n.name)...)
		t.Logf("--- kubectl %s -n %s:\n%s%v", strings.Join(args, " "), n.name, out, errOrEmpty(err))
	}
	out, err := kubectlRun("", "get", "valkeyimages,valkeyconfigs,nodes", "-o", "wide")
	t.Logf("--- kubectl get valkeyimages,valkeyconfigs,nodes:\n%s%v", out, errOrEmpty(err))
	names, err := n.containers()
	t.Logf("--- docker containers of %s: %v %v", n.name, names, errOrEmpty(err))
	t.Logf("--- operator log tail:\n%s", suite.operator.Tail(80))
	if nodesLog := filepath.Join(stateDir(), "logs", "nodes.log"); fileExists(nodesLog) {
		t.Logf("--- dev nodes log, last lines naming %s (%s):\n%s", n.name, nodesLog, linesNaming(nodesLog, n.name, 40))
	}
}

// linesNaming returns the last n lines of the file at path that contain s: what the
// dev kubelet did with this namespace's pods, among every other test's.
func linesNaming(path, s string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return strings.Join(out[max(0, len(out)-n):], "\n")
}

// containers lists the dev cluster's Docker containers running this namespace's pods.
func (n *ns) containers() ([]string, error) {
	docker, err := dockernet.NewClient()
	if err != nil {
		return nil, err
	}
	defer docker.Close()
	f := dockernet.InstanceFilter(suite.env.Instance).Add("label", dockernet.LabelPodNamespace+"="+n.name)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	list, err := docker.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f})
	if err != nil {
		return nil, err
	}
	var names []string
	for _, c := range list.Items {
		names = append(names, strings.TrimPrefix(strings.Join(c.Names, ","), "/")+"("+string(c.State)+")")
	}
	return names, nil
}

// cluster reads a ValkeyCluster through the API (cheap enough to poll often, unlike
// spawning kubectl on two shared cores).
func (n *ns) cluster(name string) (*unstructured.Unstructured, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return suite.dyn.Resource(clustersGVR).Namespace(n.name).Get(ctx, name, metav1.GetOptions{})
}

// state returns status.state and status.message ("" when unset).
func (n *ns) state(name string) (state, message string, err error) {
	u, err := n.cluster(name)
	if err != nil {
		return "", "", err
	}
	state, _, _ = unstructured.NestedString(u.Object, "status", "state")
	message, _, _ = unstructured.NestedString(u.Object, "status", "message")
	return state, message, nil
}

// valkeyNodes lists the namespace's ValkeyNodes of cluster.
func (n *ns) valkeyNodes(cluster string) ([]unstructured.Unstructured, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := suite.dyn.Resource(nodesGVR).Namespace(n.name).List(ctx, metav1.ListOptions{LabelSelector: "valkey.gomomento.com/cluster=" + cluster})
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}

// pods lists the names of the cluster's pods.
func (n *ns) pods(cluster string) ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := suite.env.Kube.CoreV1().Pods(n.name).List(ctx, metav1.ListOptions{LabelSelector: "valkey.gomomento.com/cluster=" + cluster})
	if err != nil {
		return nil, err
	}
	var names []string
	for _, p := range l.Items {
		names = append(names, p.Name)
	}
	return names, nil
}

// podIPs returns the IPs of the cluster's pods whose server may answer: running and not being
// deleted. A pod whose server exited (a node replaced while forming) or that is going away
// (its owner deleted, the garbage collector not done yet) would only seed a client with an
// address nobody answers at.
func (n *ns) podIPs(cluster string) []string {
	n.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := suite.env.Kube.CoreV1().Pods(n.name).List(ctx, metav1.ListOptions{LabelSelector: "valkey.gomomento.com/cluster=" + cluster})
	if err != nil {
		n.t.Fatalf("list pods: %v", err)
	}
	var ips []string
	for _, p := range l.Items {
		if p.Status.PodIP != "" && p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
			ips = append(ips, p.Status.PodIP)
		}
	}
	return ips
}

// secretValue reads one key of a Secret.
func (n *ns) secretValue(name, key string) string {
	n.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := suite.env.Kube.CoreV1().Secrets(n.name).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		n.t.Fatalf("get Secret %s: %v", name, err)
	}
	v, ok := s.Data[key]
	if !ok {
		n.t.Fatalf("Secret %s has no key %q", name, key)
	}
	return string(v)
}

// eventually polls cond every interval until it reports done or timeout passes; then it
// fails the test with cond's last description. cond's error, or the operator's exit, aborts
// at once.
func (n *ns) eventually(timeout, interval time.Duration, what string, cond func() (done bool, status string, err error)) {
	n.t.Helper()
	err := poll.Until(context.Background(), interval, timeout, what, func(context.Context) (bool, string, error) {
		if err := operatorRunning(); err != nil {
			return false, "", err
		}
		return cond()
	})
	if err != nil {
		n.t.Fatal(err)
	}
}

// operatorRunning says whether the suite's operator process still runs (nil) or how it ended;
// nil too while TestInClusterInstall has the in-cluster operator stand in for it.
func operatorRunning() error {
	if suite.inCluster {
		return nil
	}
	return suite.operator.Running()
}

// waitState waits for the cluster to reach state, returning when it did.
func (n *ns) waitState(name, want string, timeout time.Duration) time.Time {
	n.t.Helper()
	var at time.Time
	n.eventually(timeout, 250*time.Millisecond, fmt.Sprintf("ValkeyCluster %s/%s state %s", n.name, name, want), func() (bool, string, error) {
		state, msg, err := n.state(name)
		if err != nil && !apierrors.IsNotFound(err) {
			return false, err.Error(), nil
		}
		at = time.Now()
		return state == want, fmt.Sprintf("state=%q message=%q", state, msg), nil
	})
	return at
}

// stateDir is the dev cluster's state directory (logs live there).
func stateDir() string {
	if suite.env.Cluster != nil {
		return suite.env.Cluster.Options.StateDir
	}
	return filepath.Join(suite.root, ".dev")
}

func errOrEmpty(err error) string {
	if err == nil {
		return ""
	}
	return "error: " + err.Error()
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// logTimeline logs when the cluster's ValkeyNodes and Pods were created, scheduled and became
// ready, relative to start: where the apply-to-Active time went.
func (n *ns) logTimeline(cluster string, start time.Time) {
	n.t.Helper()
	rel := func(ts time.Time) string {
		if ts.IsZero() {
			return "-"
		}
		return fmt.Sprintf("%+.1fs", ts.Sub(start).Seconds())
	}
	var b strings.Builder
	if nodes, err := n.valkeyNodes(cluster); err == nil {
		for _, vn := range nodes {
			fmt.Fprintf(&b, "  ValkeyNode %s created %s\n", vn.GetName(), rel(vn.GetCreationTimestamp().Time))
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if l, err := suite.env.Kube.CoreV1().Pods(n.name).List(ctx, metav1.ListOptions{LabelSelector: "valkey.gomomento.com/cluster=" + cluster}); err == nil {
		for _, p := range l.Items {
			conds := map[string]time.Time{}
			for _, c := range p.Status.Conditions {
				conds[string(c.Type)] = c.LastTransitionTime.Time
			}
			started := time.Time{}
			for _, cs := range p.Status.ContainerStatuses {
				if cs.State.Running != nil {
					started = cs.State.Running.StartedAt.Time
				}
			}
			fmt.Fprintf(&b, "  Pod %s on %s created %s scheduled %s started %s ready %s\n", p.Name, p.Spec.NodeName,
				rel(p.CreationTimestamp.Time), rel(conds["PodScheduled"]), rel(started), rel(conds["Ready"]))
		}
	}
	if l, err := suite.env.Kube.CoreV1().Events(n.name).List(ctx, metav1.ListOptions{}); err == nil {
		for _, e := range l.Items {
			ts := e.LastTimestamp.Time
			if ts.IsZero() {
				ts = e.EventTime.Time
			}
			fmt.Fprintf(&b, "  Event %s %s/%s %s x%d: %s\n", rel(ts), e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Reason, e.Count, e.Message)
		}
	}
	if os.Getenv("E2E_DEBUG") != "" {
		b.WriteString(n.containerTimes(start))
		if raw, err := os.ReadFile(filepath.Join(stateDir(), "logs", "nodes.log")); err == nil {
			b.WriteString("  dev nodes log lines about this namespace:\n")
			for _, l := range strings.Split(string(raw), "\n") {
				if strings.Contains(l, n.name+"/") {
					if len(l) > 300 {
						l = l[:300] + "…"
					}
					b.WriteString("    " + l + "\n")
				}
			}
		}
	}
	n.t.Logf("timeline of %s (relative to apply; API timestamps have 1s resolution):\n%s", cluster, b.String())
}

// containerTimes lists when Docker created and started each of the namespace's containers,
// relative to start (E2E_DEBUG: splits the kubelet's share of pod start-up from Docker's).
func (n *ns) containerTimes(start time.Time) string {
	docker, err := dockernet.NewClient()
	if err != nil {
		return err.Error()
	}
	defer docker.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	f := dockernet.InstanceFilter(suite.env.Instance).Add("label", dockernet.LabelPodNamespace+"="+n.name)
	list, err := docker.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f})
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, c := range list.Items {
		res, err := docker.ContainerInspect(ctx, c.ID, client.ContainerInspectOptions{})
		if err != nil {
			continue
		}
		created, _ := time.Parse(time.RFC3339Nano, res.Container.Created)
		var started time.Time
		if res.Container.State != nil {
			started, _ = time.Parse(time.RFC3339Nano, res.Container.State.StartedAt)
		}
		fmt.Fprintf(&b, "  Container %s created %+.2fs started %+.2fs\n", c.Labels[dockernet.LabelPodName],
			created.Sub(start).Seconds(), started.Sub(start).Seconds())
	}
	return b.String()
}
