// Package devcluster is the project's one-command local Kubernetes: a real
// control plane (etcd, kube-apiserver, kube-scheduler,
// kube-controller-manager built from Go modules into bin/controlplane) and
// several virtual-kubelet Nodes whose pods run as Docker containers on a
// private bridge network. `make dev` and the e2e tests both use it.
//
// All state (certificates, kubeconfigs, etcd data, logs, pid files, pod
// volumes) lives in one directory, .dev/ by default, and every Docker object
// carries the instance's labels, so Down leaves nothing behind.
package devcluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gomomento/valkey-operator/devcluster/controlplane"
	"github.com/gomomento/valkey-operator/devcluster/dockernet"
	"github.com/gomomento/valkey-operator/devcluster/proc"
	"github.com/gomomento/valkey-operator/devcluster/vknodes"
	"github.com/gomomento/valkey-operator/internal/poll"
)

// DefaultValkeyImage is run for any image that is not present locally.
const DefaultValkeyImage = "valkey-operator/valkey:8.0"

// DefaultValkey9Image is run for missing images whose tag starts with 9.
const DefaultValkey9Image = "valkey-operator/valkey:9.1"

// Options configure a dev cluster. Zero values get defaults (see
// withDefaults); the result is saved in the state directory so later
// commands (nodes, down) find the same instance.
type Options struct {
	// Root is the repository root (holds bin/controlplane).
	Root string `json:"root"`
	// StateDir holds all state; default Root/.dev.
	StateDir string `json:"stateDir"`
	// Instance names the Docker network and labels; default "dev".
	Instance        string   `json:"instance"`
	Nodes           int      `json:"nodes"`
	Zones           []string `json:"zones"`
	APIServerPort   int      `json:"apiServerPort"`
	EtcdPort        int      `json:"etcdPort"`
	EtcdPeerPort    int      `json:"etcdPeerPort"`
	KubeletBasePort int      `json:"kubeletBasePort"`
	// ValkeyImage replaces images that are not present locally
	// (env VALKEY_IMAGE); Valkey9Image replaces missing images tagged 9.x
	// (env VALKEY9_IMAGE), when it exists locally.
	ValkeyImage  string `json:"valkeyImage"`
	Valkey9Image string `json:"valkey9Image"`
	// Detach runs everything as background processes that outlive the
	// caller (devcluster up). Otherwise processes die with the caller and
	// the nodes run inside it (tests).
	Detach bool `json:"detach"`
	// NodesCommand runs the nodes process when detached: argv to which
	// "--state-dir DIR" is appended.
	NodesCommand []string `json:"nodesCommand,omitempty"`
	// Log receives progress lines; nil discards them.
	Log io.Writer `json:"-"`
}

func (o Options) withDefaults() (Options, error) {
	if o.Root == "" {
		root, err := FindRoot()
		if err != nil {
			return o, err
		}
		o.Root = root
	}
	if o.StateDir == "" {
		o.StateDir = filepath.Join(o.Root, ".dev")
	}
	abs, err := filepath.Abs(o.StateDir)
	if err != nil {
		return o, err
	}
	o.StateDir = abs
	if o.Instance == "" {
		o.Instance = "dev"
	}
	if o.Nodes == 0 {
		o.Nodes = 6
	}
	if len(o.Zones) == 0 {
		o.Zones = []string{"zone-a", "zone-b", "zone-c"}
	}
	if o.APIServerPort == 0 {
		o.APIServerPort = 16443
	}
	if o.EtcdPort == 0 {
		o.EtcdPort = 12379
	}
	if o.EtcdPeerPort == 0 {
		o.EtcdPeerPort = 12380
	}
	if o.KubeletBasePort == 0 {
		o.KubeletBasePort = 10250
	}
	if o.ValkeyImage == "" {
		o.ValkeyImage = os.Getenv("VALKEY_IMAGE")
	}
	if o.ValkeyImage == "" {
		o.ValkeyImage = DefaultValkeyImage
	}
	if o.Valkey9Image == "" {
		o.Valkey9Image = os.Getenv("VALKEY9_IMAGE")
	}
	if o.Valkey9Image == "" {
		o.Valkey9Image = DefaultValkey9Image
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	return o, nil
}

// FindRoot walks up from the working directory, then from this source
// file, to the directory holding the project's go.mod.
func FindRoot() (string, error) {
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if _, file, _, ok := runtime.Caller(0); ok {
		starts = append(starts, filepath.Dir(file))
	}
	for _, dir := range starts {
		for d := dir; ; d = filepath.Dir(d) {
			if b, err := os.ReadFile(filepath.Join(d, "go.mod")); err == nil && strings.Contains(string(b), "module github.com/gomomento/valkey-operator\n") {
				return d, nil
			}
			if filepath.Dir(d) == d {
				break
			}
		}
	}
	return "", errors.New("cannot find the valkey-operator repository root (go.mod); pass the root explicitly")
}

func (o Options) controlPlane(advertise net.IP) controlplane.Config {
	return controlplane.Config{
		BinDir:        filepath.Join(o.Root, "bin", "controlplane"),
		StateDir:      o.StateDir,
		EtcdPort:      o.EtcdPort,
		EtcdPeerPort:  o.EtcdPeerPort,
		APIServerPort: o.APIServerPort,
		AdvertiseIP:   advertise,
		Detach:        o.Detach,
	}
}

func optionsFile(stateDir string) string { return filepath.Join(stateDir, "cluster.json") }

// LoadOptions reads the options saved by Up.
func LoadOptions(stateDir string) (Options, error) {
	b, err := os.ReadFile(optionsFile(stateDir))
	if err != nil {
		return Options{}, err
	}
	var o Options
	if err := json.Unmarshal(b, &o); err != nil {
		return Options{}, fmt.Errorf("%s: %w", optionsFile(stateDir), err)
	}
	o.Log = io.Discard
	return o, nil
}

// Cluster is a running dev cluster.
type Cluster struct {
	Options Options
	// Kubeconfig is the admin kubeconfig path.
	Kubeconfig string
	// REST is the admin client configuration.
	REST *rest.Config
	// Network is the pods' Docker network.
	Network dockernet.Network
	// Timings of the start-up phases.
	ControlPlaneReady, NodesReady time.Duration

	cp          *controlplane.ControlPlane
	nodesCancel context.CancelFunc
	nodesDone   chan error
}

// Up starts the dev cluster, or completes a partly running one, and waits
// until the API server and every node are ready.
func Up(ctx context.Context, opts Options) (*Cluster, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if prev, err := LoadOptions(o.StateDir); err == nil {
		// Images chosen at first start stay unless given again.
		if opts.ValkeyImage == "" && os.Getenv("VALKEY_IMAGE") == "" {
			o.ValkeyImage = prev.ValkeyImage
		}
		if opts.Valkey9Image == "" && os.Getenv("VALKEY9_IMAGE") == "" {
			o.Valkey9Image = prev.Valkey9Image
		}
		// Keep the instance, ports and mode the state was created with.
		o.Instance, o.APIServerPort, o.EtcdPort, o.EtcdPeerPort, o.KubeletBasePort = prev.Instance, prev.APIServerPort, prev.EtcdPort, prev.EtcdPeerPort, prev.KubeletBasePort
	}
	if err := os.MkdirAll(o.StateDir, 0o755); err != nil {
		return nil, err
	}
	b, _ := json.MarshalIndent(o, "", "  ")
	if err := os.WriteFile(optionsFile(o.StateDir), b, 0o644); err != nil {
		return nil, err
	}
	start := time.Now()
	c := &Cluster{Options: o}
	ok := false
	defer func() {
		if !ok && !o.Detach {
			c.Stop()
		}
	}()

	docker, err := dockernet.NewClient()
	if err != nil {
		return nil, err
	}
	defer docker.Close()
	c.Network, err = dockernet.EnsureNetwork(ctx, docker, o.Instance)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(o.Log, "devcluster: docker network %s (%s)\n", c.Network.Name, c.Network.Subnet)

	cpCfg := o.controlPlane(c.Network.Gateway.AsSlice())
	nodeFiles, err := controlplane.Prepare(cpCfg)
	if err != nil {
		return nil, err
	}
	c.Kubeconfig = cpCfg.AdminKubeconfig()
	c.cp, err = controlplane.Start(ctx, cpCfg)
	if err != nil {
		return nil, err
	}
	c.ControlPlaneReady = time.Since(start)
	fmt.Fprintf(o.Log, "devcluster: control plane ready in %.1fs (https://127.0.0.1:%d)\n", c.ControlPlaneReady.Seconds(), o.APIServerPort)

	c.REST, err = clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		return nil, err
	}
	c.REST.QPS, c.REST.Burst = 50, 100
	kube, err := kubernetes.NewForConfig(c.REST)
	if err != nil {
		return nil, err
	}
	if err := grantNodes(ctx, kube); err != nil {
		return nil, err
	}
	// The controller manager's service-account controller would create this
	// some seconds later; pods (admission requires the account) can be
	// created as soon as Up returns.
	_, err = kube.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("create default service account: %w", err)
	}
	// Likewise the CA bundle every service-account token volume projects
	// (the controller manager's root-ca publisher writes the same content).
	caPEM, err := os.ReadFile(filepath.Join(cpCfg.PKIDir(), "ca.crt"))
	if err != nil {
		return nil, err
	}
	_, err = kube.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-root-ca.crt"}, Data: map[string]string{"ca.crt": string(caPEM)},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("create kube-root-ca.crt: %w", err)
	}

	ncfg := NodesConfig(o, nil)
	ncfg.Kubeconfig = nodeFiles.Kubeconfig
	var nodesProc *proc.Process
	if o.Detach {
		if _, running := proc.Running(nodesPidFile(o.StateDir), "devcluster"); !running {
			if len(o.NodesCommand) == 0 {
				return nil, errors.New("detached mode needs Options.NodesCommand")
			}
			argv := append(append([]string{}, o.NodesCommand...), "--state-dir", o.StateDir)
			nodesProc, err = proc.Start("nodes", argv[0], argv[1:], filepath.Join(o.StateDir, "logs", "nodes.log"), nodesPidFile(o.StateDir), proc.Options{Detach: true})
			if err != nil {
				return nil, err
			}
		}
	} else {
		if err := c.runNodesInProcess(ctx, ncfg); err != nil {
			return nil, err
		}
	}
	if err := c.waitNodes(ctx, kube, nodesProc, 60*time.Second); err != nil {
		return nil, err
	}
	c.NodesReady = time.Since(start)
	fmt.Fprintf(o.Log, "devcluster: %d nodes ready in %.1fs\n", o.Nodes, c.NodesReady.Seconds())
	ok = true
	return c, nil
}

// NodesConfig rebuilds the nodes' configuration from saved options, for the
// detached nodes process.
func NodesConfig(o Options, logger *slog.Logger) vknodes.Config {
	pk := filepath.Join(o.StateDir, "pki")
	return vknodes.Config{
		Instance: o.Instance, Kubeconfig: filepath.Join(o.StateDir, "kubeconfigs", "nodes.kubeconfig"),
		Nodes:   vknodes.DefaultSpecs(o.Nodes, o.Zones),
		PodsDir: filepath.Join(o.StateDir, "pods"), FallbackImage: o.ValkeyImage,
		FallbackByMajor: map[string]string{"9": o.Valkey9Image},
		ServingCertFile: filepath.Join(pk, "kubelet-serving.crt"), ServingKeyFile: filepath.Join(pk, "kubelet-serving.key"),
		ClientCAFile: filepath.Join(pk, "ca.crt"), KubeletBasePort: o.KubeletBasePort, Logger: logger,
	}
}

func nodesPidFile(stateDir string) string { return filepath.Join(stateDir, "pids", "nodes.pid") }

func (c *Cluster) runNodesInProcess(ctx context.Context, cfg vknodes.Config) error {
	logPath := filepath.Join(c.Options.StateDir, "logs", "nodes.log")
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		return err
	}
	lf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cfg.Logger = slog.New(slog.NewTextHandler(lf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	nctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	c.nodesCancel = cancel
	c.nodesDone = make(chan error, 1)
	go func() {
		err := vknodes.Run(nctx, cfg, nil)
		_ = lf.Close()
		c.nodesDone <- err
	}()
	return nil
}

func (c *Cluster) waitNodes(ctx context.Context, kube kubernetes.Interface, p *proc.Process, timeout time.Duration) error {
	nodesLog := filepath.Join(c.Options.StateDir, "logs", "nodes.log")
	err := poll.Until(ctx, 200*time.Millisecond, timeout, "nodes ready", func(ctx context.Context) (bool, string, error) {
		if p != nil {
			select {
			case <-p.Exited():
				return false, "", p.ExitError()
			default:
			}
		}
		if c.nodesDone != nil {
			select {
			case err := <-c.nodesDone:
				c.nodesDone <- err
				return false, "", fmt.Errorf("nodes stopped: %v", err)
			default:
			}
		}
		last := c.nodesNotReady(ctx, kube)
		return last == "", last, nil
	})
	if err != nil {
		return fmt.Errorf("%w; log tail:\n%s", err, proc.Tail(nodesLog, 15))
	}
	return nil
}

// nodesNotReady says what is still missing ("" when all nodes are Ready and
// the default service account exists, so pods can be created at once).
func (c *Cluster) nodesNotReady(ctx context.Context, kube kubernetes.Interface) string {
	list, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: vknodes.LabelDevNode + "=1"})
	if err != nil {
		return err.Error()
	}
	ready := 0
	for _, n := range list.Items {
		if schedulable(&n) {
			ready++
		}
	}
	if ready < c.Options.Nodes {
		return fmt.Sprintf("%d/%d nodes Ready and untainted", ready, c.Options.Nodes)
	}
	if _, err := kube.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{}); err != nil {
		return "default service account: " + err.Error()
	}
	return ""
}

// schedulable reports whether a node is Ready and free of the node lifecycle controller's
// taints (node.kubernetes.io/not-ready and friends). Those linger for a few seconds after
// Ready turns true; a pod created meanwhile is refused by the scheduler and waits out its
// back-off, so "up" must not return before they are gone.
func schedulable(n *corev1.Node) bool {
	for _, t := range n.Spec.Taints {
		if strings.HasPrefix(t.Key, "node.kubernetes.io/") && t.Effect != corev1.TaintEffectPreferNoSchedule {
			return false
		}
	}
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}

// grantNodes gives the virtual-kubelet identity what a kubelet needs. One
// process serves every node, so it gets a ClusterRole instead of the Node
// authorizer's per-node rights.
func grantNodes(ctx context.Context, kube kubernetes.Interface) error {
	const name = "valkey-operator.dev:virtual-kubelet"
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"nodes", "nodes/status"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch", "update", "patch", "delete"}},
			{APIGroups: []string{""}, Resources: []string{"pods/status"}, Verbs: []string{"get", "update", "patch"}},
			{APIGroups: []string{""}, Resources: []string{"configmaps", "secrets", "services"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{""}, Resources: []string{"serviceaccounts/token"}, Verbs: []string{"create"}},
			{APIGroups: []string{"", "events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "update", "patch"}},
			{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
		},
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: name},
		Subjects:   []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: controlplane.NodesUser}},
	}
	if _, err := kube.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
		_, err = kube.RbacV1().ClusterRoles().Update(ctx, role, metav1.UpdateOptions{})
		if err != nil {
			return err
		}
	} else if err != nil {
		return fmt.Errorf("create node ClusterRole: %w", err)
	}
	if _, err := kube.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create node ClusterRoleBinding: %w", err)
	}
	return nil
}

// Stop ends a cluster started without Detach: nodes, control plane,
// containers, network and state directory.
func (c *Cluster) Stop() error {
	if c.nodesCancel != nil {
		c.nodesCancel()
		<-c.nodesDone
		c.nodesCancel = nil
	}
	if c.cp != nil {
		c.cp.Stop()
		c.cp = nil
	}
	return removeDockerAndState(context.Background(), c.Options)
}

// Down stops a detached cluster found in stateDir and removes everything it
// created. It is safe to run when nothing is running.
func Down(ctx context.Context, stateDir string) error {
	o, err := LoadOptions(stateDir)
	if errors.Is(err, os.ErrNotExist) {
		_ = os.RemoveAll(stateDir)
		return nil
	}
	if err != nil {
		return err
	}
	o.StateDir = stateDir
	var errs []error
	if err := proc.StopPidFile(nodesPidFile(stateDir), "devcluster", 10*time.Second); err != nil {
		errs = append(errs, err)
	}
	if err := controlplane.StopDetached(o.controlPlane(nil)); err != nil {
		errs = append(errs, err)
	}
	if err := removeDockerAndState(ctx, o); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func removeDockerAndState(ctx context.Context, o Options) error {
	var errs []error
	docker, err := dockernet.NewClient()
	if err != nil {
		errs = append(errs, err)
	} else {
		if err := dockernet.RemoveAll(ctx, docker, o.Instance); err != nil {
			errs = append(errs, err)
		}
		docker.Close()
	}
	if o.StateDir != "" {
		if err := os.RemoveAll(o.StateDir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
