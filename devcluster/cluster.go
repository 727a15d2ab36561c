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
	// Timings of the start-up phases.
	ControlPlaneReady, NodesReady time.Duration

	cp          *controlplane.ControlPlane
	nodesCancel context.CancelFunc
	nodesDone   chan error

	// The object store starts beside the control plane and, unless detached, finishes
	// starting while the caller already uses the cluster (see ObjectStore): weed spends
	// most of its ten-second start waiting on its own timers.
	storeDone   chan struct{} // closed once store and storeErr are set
	store       *objectstore.Store
	storeErr    error
	cancelStore context.CancelFunc
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
	defer func() {
		if !ok {
			c.stopStarting() // a failed Up does not wait out the store's readiness
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

	c.startObjectStore(ctx)

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
	if o.Detach {
		// The process that runs `devcluster up` ends next: the store must be ready first.
		store, err := c.ObjectStore(ctx)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(o.Log, "devcluster: object store %s, bucket %s (keys in %s)\n", store.Endpoint, store.Bucket, ObjectStoreEnvFile(o.StateDir))
	}
	ok = true
	return c, nil
}

// startObjectStore starts the store in the background; ObjectStore waits for it. Its start
// outlives ctx (Up's), which a caller may end once Up returns; Stop ends it.
func (c *Cluster) startObjectStore(ctx context.Context) {
	storeCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	c.cancelStore = cancel
	c.storeDone = make(chan struct{})
	cfg := c.Options.objectStore(c.Network.Gateway)
	envFile := ObjectStoreEnvFile(c.Options.StateDir)
	go func() {
		defer close(c.storeDone)
		s, err := objectstore.Start(storeCtx, cfg)
		if err == nil {
			err = s.WriteEnvFile(envFile)
		}
		c.store, c.storeErr = s, err
	}()
}

// stopStarting cancels a store that is still starting and waits until its start returns.
func (c *Cluster) stopStarting() {
	if c.cancelStore != nil {
		c.cancelStore()
		<-c.storeDone
	}
}

// ObjectStore waits until the cluster's object store is ready and returns what reaches it:
// its endpoint (on the pod network's gateway, so the host and pods both reach it), its
// bucket, created ready, and its keys; the same values are in ObjectStoreEnvFile. Up
// returns before the store is ready unless detached.
func (c *Cluster) ObjectStore(ctx context.Context) (objectstore.Access, error) {
	if c.storeDone == nil {
		return objectstore.Access{}, errors.New("devcluster: no object store was started")
	}
	select {
	case <-c.storeDone:
	case <-ctx.Done():
		return objectstore.Access{}, fmt.Errorf("devcluster: waiting for the object store: %w", ctx.Err())
	}
	if c.storeErr != nil {
		return objectstore.Access{}, c.storeErr
	}
	return c.store.Access, nil
}

// Stop ends a cluster started without Detach: nodes, control plane, object
// store, containers, network and state directory.
func (c *Cluster) Stop() error {
	c.stopStarting()
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
