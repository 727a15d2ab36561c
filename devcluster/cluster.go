// Package devcluster is the project's one-command local Kubernetes: a real
// control plane (etcd, kube-apiserver, kube-scheduler,
// kube-controller-manager built from Go modules into bin/controlplane) and
// several virtual-kubelet Nodes whose pods run as Docker containers on a
// private bridge network, and an S3-compatible object store (SeaweedFS, see
// devcluster/objectstore) on that network's gateway address, which the host
// and the pods both reach. `make dev` and the e2e tests both use it.
//
// All state (certificates, kubeconfigs, etcd data, logs, pid files, pod
// volumes, the loop-mounted images of persistent volumes) lives in one
// directory, .dev/ by default, and every Docker object carries the instance's
// labels, so Down leaves nothing behind.
package devcluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gomomento/valkey-operator/devcluster/controlplane"
	"github.com/gomomento/valkey-operator/devcluster/dockernet"
	"github.com/gomomento/valkey-operator/devcluster/hostvolumes"
	"github.com/gomomento/valkey-operator/devcluster/objectstore"
	"github.com/gomomento/valkey-operator/devcluster/proc"
)

// Cluster is a running dev cluster.
type Cluster struct {
	Options Options
	// Kubeconfig is the admin kubeconfig path.
	Kubeconfig string
	// REST is the admin client configuration.
	REST *rest.Config
	// Network is the pods' Docker network.
	Network dockernet.Network
	// ObjectStore is the cluster's object store: its endpoint (on the network's gateway, so
	// reachable from the host and from pods), its bucket, created ready, and its keys. The
	// same values are in ObjectStoreEnvFile(Options.StateDir).
	ObjectStore objectstore.Access
	// Timings of the start-up phases.
	ControlPlaneReady, NodesReady time.Duration

	cp          *controlplane.ControlPlane
	store       *objectstore.Store
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
		if prev.ObjectStorePort != 0 {
			o.ObjectStorePort = prev.ObjectStorePort
		}
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
	// The object store starts beside the control plane (each spends most of its start-up
	// waiting); its result is collected before Up returns or cleans up.
	var storeDone chan error
	storeCtx, cancelStore := context.WithCancel(ctx)
	defer cancelStore()
	joinStore := func() error {
		if storeDone == nil {
			return nil
		}
		err := <-storeDone
		storeDone = nil
		return err
	}
	defer func() {
		if !ok {
			cancelStore() // a failed Up does not wait out the store's readiness
			_ = joinStore()
			if !o.Detach {
				c.Stop()
			}
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

	storeDone = make(chan error, 1)
	go func() {
		s, err := objectstore.Start(storeCtx, o.objectStore(c.Network.Gateway))
		c.store = s
		storeDone <- err
	}()

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
	if err := ensureStorageClass(ctx, kube); err != nil {
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
	if err := joinStore(); err != nil {
		return nil, err
	}
	c.ObjectStore = c.store.Access
	if err := c.ObjectStore.WriteEnvFile(ObjectStoreEnvFile(o.StateDir)); err != nil {
		return nil, err
	}
	fmt.Fprintf(o.Log, "devcluster: object store %s, bucket %s (keys in %s)\n", c.ObjectStore.Endpoint, c.ObjectStore.Bucket, ObjectStoreEnvFile(o.StateDir))
	ok = true
	return c, nil
}

// Stop ends a cluster started without Detach: nodes, control plane, object
// store, containers, network and state directory.
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
	if c.store != nil {
		c.store.Stop()
		c.store = nil
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
	if err := objectstore.StopDetached(objectStoreDir(stateDir)); err != nil {
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
		// Mounted volumes would make the removal fail (and leak their loop devices).
		if err := hostvolumes.UnmountAll(volumesDir(o.StateDir)); err != nil {
			errs = append(errs, err)
		} else if err := os.RemoveAll(o.StateDir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
