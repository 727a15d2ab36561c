package devcluster

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gomomento/valkey-operator/devcluster/controlplane"
	"github.com/gomomento/valkey-operator/devcluster/hostvolumes"
	"github.com/gomomento/valkey-operator/devcluster/proc"
	"github.com/gomomento/valkey-operator/devcluster/vknodes"
	"github.com/gomomento/valkey-operator/internal/poll"
)

// The virtual-kubelet nodes: their configuration, the process that runs them, and the
// wait until the scheduler can use them.

// NodesConfig rebuilds the nodes' configuration from saved options, for the
// detached nodes process.
func NodesConfig(o Options, logger *slog.Logger) vknodes.Config {
	pk := filepath.Join(o.StateDir, "pki")
	return vknodes.Config{
		Instance: o.Instance, Kubeconfig: filepath.Join(o.StateDir, "kubeconfigs", "nodes.kubeconfig"),
		Nodes:   vknodes.DefaultSpecs(o.Nodes, o.Zones),
		PodsDir: filepath.Join(o.StateDir, "pods"), VolumesDir: volumesDir(o.StateDir), FallbackImage: o.ValkeyImage,
		FallbackByMajor: map[string]string{"9": o.Valkey9Image},
		ServingCertFile: filepath.Join(pk, "kubelet-serving.crt"), ServingKeyFile: filepath.Join(pk, "kubelet-serving.key"),
		ClientCAFile: filepath.Join(pk, "ca.crt"), KubeletBasePort: o.KubeletBasePort, Logger: logger,
	}
}

func volumesDir(stateDir string) string { return filepath.Join(stateDir, "volumes") }

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
			// The dev kubelet mounts claims; the volume provisioner (hostvolumes) in the same
			// process makes, grows and deletes their volumes.
			{APIGroups: []string{""}, Resources: []string{"persistentvolumeclaims"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{""}, Resources: []string{"persistentvolumeclaims/status"}, Verbs: []string{"patch"}},
			{APIGroups: []string{""}, Resources: []string{"persistentvolumes"}, Verbs: []string{"get", "list", "watch", "create", "update", "delete"}},
			{APIGroups: []string{"storage.k8s.io"}, Resources: []string{"storageclasses"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{""}, Resources: []string{"serviceaccounts/token"}, Verbs: []string{"create"}},
			// The load balancer (devcluster/loadbalancer) in the same process gives each
			// LoadBalancer Service an address and forwards to its endpoints.
			{APIGroups: []string{""}, Resources: []string{"services/status"}, Verbs: []string{"update"}},
			{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}},
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

// ensureStorageClass makes the nodes' volume provisioner the cluster's default storage, so a
// claim that names no class (as the operator's may) gets a real, size-limited volume.
func ensureStorageClass(ctx context.Context, kube kubernetes.Interface) error {
	sc := hostvolumes.StorageClass()
	cur, err := kube.StorageV1().StorageClasses().Get(ctx, sc.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = kube.StorageV1().StorageClasses().Create(ctx, sc, metav1.CreateOptions{})
	} else if err == nil && !equality.Semantic.DeepEqual(cur.AllowVolumeExpansion, sc.AllowVolumeExpansion) {
		// Only expansion may change on a class; the rest is immutable.
		cur.AllowVolumeExpansion = sc.AllowVolumeExpansion
		_, err = kube.StorageV1().StorageClasses().Update(ctx, cur, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("storage class %s: %w", sc.Name, err)
	}
	return nil
}
