// Package devtest gives tests a dev cluster: either a private one started
// for the test binary (temporary state directory, free ports, its own Docker
// network and labels, all removed afterwards), or — with DEVCLUSTER_REUSE=1 —
// the one `make dev` left running in .dev/.
//
// One cluster per test: env := devtest.Start(t); one per test binary: devtest.New in
// TestMain (as the e2e suite does).
package devtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gomomento/valkey-operator/devcluster"
	"github.com/gomomento/valkey-operator/devcluster/dockernet"
	"github.com/gomomento/valkey-operator/devcluster/objectstore"
	"github.com/gomomento/valkey-operator/devcluster/proc"
	"github.com/gomomento/valkey-operator/internal/kubectl"
	"github.com/gomomento/valkey-operator/internal/poll"
)

// Env is a usable cluster.
type Env struct {
	Kubeconfig string
	REST       *rest.Config
	Kube       kubernetes.Interface
	// Instance labels the cluster's Docker objects (dockernet.InstanceFilter).
	Instance string
	// Cluster is nil when an already running cluster is reused.
	Cluster *devcluster.Cluster
	// store is a reused cluster's object store, read from its env file.
	store objectstore.Access
}

// ObjectStore waits until the cluster's object store is ready and returns its endpoint,
// bucket and keys.
func (e *Env) ObjectStore(ctx context.Context) (objectstore.Access, error) {
	if e.Cluster != nil {
		return e.Cluster.ObjectStore(ctx)
	}
	return e.store, nil
}

// Options tune a private cluster.
type Options struct {
	Nodes int
	// ValkeyImage is the fallback image for images not present locally.
	ValkeyImage string
}

// New starts a private cluster (or reuses .dev with DEVCLUSTER_REUSE=1).
// The returned stop function removes everything a private cluster created.
func New(ctx context.Context, o Options) (*Env, func() error, error) {
	if os.Getenv("DEVCLUSTER_REUSE") == "1" {
		env, err := reuse()
		return env, func() error { return nil }, err
	}
	root, err := devcluster.FindRoot()
	if err != nil {
		return nil, nil, err
	}
	stateDir, err := os.MkdirTemp("", "devcluster-")
	if err != nil {
		return nil, nil, err
	}
	// The control plane's three ports, one per node, then the object store's.
	nodes := max(o.Nodes, 6)
	ports, err := freePortRange(3 + nodes + objectstore.PortsNeeded)
	if err != nil {
		return nil, nil, err
	}
	instance := "t" + randomHex(4)
	c, err := devcluster.Up(ctx, devcluster.Options{
		Root: root, StateDir: stateDir, Instance: instance, Nodes: o.Nodes,
		APIServerPort: ports, EtcdPort: ports + 1, EtcdPeerPort: ports + 2, KubeletBasePort: ports + 3,
		ObjectStorePort: ports + 3 + nodes,
		ValkeyImage:     o.ValkeyImage,
	})
	if err != nil {
		_ = os.RemoveAll(stateDir)
		return nil, nil, err
	}
	kube, err := kubernetes.NewForConfig(c.REST)
	if err != nil {
		_ = c.Stop()
		return nil, nil, err
	}
	env := &Env{Kubeconfig: c.Kubeconfig, REST: c.REST, Kube: kube, Instance: instance, Cluster: c}
	return env, c.Stop, nil
}

func reuse() (*Env, error) {
	root, err := devcluster.FindRoot()
	if err != nil {
		return nil, err
	}
	stateDir := filepath.Join(root, ".dev")
	o, err := devcluster.LoadOptions(stateDir)
	if err != nil {
		return nil, fmt.Errorf("DEVCLUSTER_REUSE=1 but no running dev cluster in %s (run make dev): %w", stateDir, err)
	}
	kc := filepath.Join(stateDir, "kubeconfig")
	rc, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		return nil, err
	}
	kube, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	if _, err := kube.Discovery().ServerVersion(); err != nil {
		return nil, fmt.Errorf("dev cluster in %s does not answer: %w", stateDir, err)
	}
	store, err := objectstore.ReadEnvFile(devcluster.ObjectStoreEnvFile(stateDir))
	if err != nil {
		return nil, fmt.Errorf("dev cluster in %s has no object store (run make dev again): %w", stateDir, err)
	}
	return &Env{Kubeconfig: kc, REST: rc, Kube: kube, Instance: o.Instance, store: store}, nil
}

// Start gives t its own cluster, removed when t ends.
func Start(t testing.TB, o ...Options) *Env {
	t.Helper()
	var opts Options
	if len(o) > 0 {
		opts = o[0]
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	env, stop, err := New(ctx, opts)
	if err != nil {
		t.Fatalf("dev cluster: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() && env.Cluster != nil {
			logTails(t, env.Cluster.Options.StateDir)
		}
		if err := stop(); err != nil {
			t.Errorf("dev cluster teardown: %v", err)
		}
	})
	return env
}

// Kubectl runs the real kubectl against the cluster and returns its stdout, failing t on
// error.
func (e *Env) Kubectl(t testing.TB, args ...string) string {
	t.Helper()
	out, err := e.KubectlRunner().Run(context.Background(), args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// KubectlRunner is the real kubectl bound to the cluster, every call under a timeout.
func (e *Env) KubectlRunner() kubectl.Runner { return kubectl.Runner{Kubeconfig: e.Kubeconfig} }

// WaitSchedulable waits until the cluster has nodes and none carries a NoSchedule/NoExecute
// taint. Right after the dev cluster reports its nodes Ready they still carry
// node.kubernetes.io/not-ready until the node lifecycle controller catches up; pods created
// then fail scheduling and sit in the scheduler's back-off.
func (e *Env) WaitSchedulable(ctx context.Context, timeout time.Duration) error {
	return poll.Until(ctx, 250*time.Millisecond, timeout, "nodes schedulable", func(ctx context.Context) (bool, string, error) {
		l, err := e.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		var tainted []string
		for _, n := range l.Items {
			for _, t := range n.Spec.Taints {
				if t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute {
					tainted = append(tainted, n.Name+":"+t.Key)
				}
			}
		}
		return len(l.Items) > 0 && len(tainted) == 0, fmt.Sprintf("%d nodes, tainted: %v", len(l.Items), tainted), nil
	})
}

// EnsureNamespace creates namespace name unless it exists.
func (e *Env) EnsureNamespace(ctx context.Context, name string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err := e.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", name, err)
	}
	return nil
}

// ContainerFilter selects this cluster's Docker containers.
func (e *Env) ContainerFilter() map[string]map[string]bool {
	return dockernet.InstanceFilter(e.Instance)
}

// freePortRange finds n consecutive free ports on 127.0.0.1.
func freePortRange(n int) (int, error) {
	for attempt := 0; attempt < 50; attempt++ {
		b := make([]byte, 2)
		_, _ = rand.Read(b)
		base := 20000 + (int(b[0])<<8|int(b[1]))%12000 // below the ephemeral port range
		ok := true
		for p := base; p < base+n && ok; p++ {
			l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
			if err != nil {
				ok = false
				break
			}
			_ = l.Close()
		}
		if ok {
			return base, nil
		}
	}
	return 0, fmt.Errorf("no %d consecutive free ports found", n)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// logTails shows the end of every component log, since a private cluster's
// state directory is removed with it.
func logTails(t testing.TB, stateDir string) {
	logs, _ := filepath.Glob(filepath.Join(stateDir, "logs", "*.log"))
	for _, l := range logs {
		t.Logf("--- %s (last lines)\n%s", filepath.Base(l), proc.Tail(l, 20))
	}
}
