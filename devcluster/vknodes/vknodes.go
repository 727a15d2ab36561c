// Package vknodes runs the dev cluster's Nodes: several virtual-kubelet
// nodes in one process, spread over zones, each backed by a dockerpods
// provider, all sharing one Docker network and one address pool.
package vknodes

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/virtual-kubelet/virtual-kubelet/log"
	vkslog "github.com/virtual-kubelet/virtual-kubelet/log/slog"
	"github.com/virtual-kubelet/virtual-kubelet/node"
	"github.com/virtual-kubelet/virtual-kubelet/node/nodeutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gomomento/valkey-operator/devcluster/dockernet"
	"github.com/gomomento/valkey-operator/devcluster/dockerpods"
	"github.com/gomomento/valkey-operator/devcluster/hostvolumes"
	"github.com/gomomento/valkey-operator/devcluster/ipam"
	"github.com/gomomento/valkey-operator/devcluster/loadbalancer"
)

// LabelDevNode marks the dev cluster's nodes. The well-known labels the scheduler and the
// operator's placement rules look at (zone, hostname) are corev1's.
const LabelDevNode = "valkey-operator.dev/node"

// Spec names one node.
type Spec struct {
	Name string
	Zone string
}

// Config is everything Run needs.
type Config struct {
	Instance   string
	Kubeconfig string // identity of the nodes
	Nodes      []Spec
	PodsDir    string
	// VolumesDir holds the backing of the dev StorageClass's volumes (see hostvolumes).
	VolumesDir string
	// FallbackImage replaces images that are not present locally;
	// FallbackByMajor overrides it by the tag's major version.
	FallbackImage   string
	FallbackByMajor map[string]string
	// Kubelet API (logs/exec): serving cert, and the CA client certs must chain to.
	ServingCertFile, ServingKeyFile, ClientCAFile string
	// KubeletBasePort is the first node's kubelet port; node i uses +i.
	KubeletBasePort int
	Logger          *slog.Logger
}

// DefaultSpecs is n nodes named devnode-1.. spread round-robin over zones.
func DefaultSpecs(n int, zones []string) []Spec {
	out := make([]Spec, n)
	for i := range out {
		out[i] = Spec{Name: fmt.Sprintf("devnode-%d", i+1), Zone: zones[i%len(zones)]}
	}
	return out
}

// podAPIServer is where pods reach the API server: its port (from the nodes' kubeconfig URL)
// on the pod network's gateway, the host's address on that network. The API server listens on
// every address and its certificate names the gateway (controlplane.Config.AdvertiseIP).
func podAPIServer(kubeconfigHost string, gateway netip.Addr) (netip.AddrPort, error) {
	u, err := url.Parse(kubeconfigHost)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("API server URL %q: %w", kubeconfigHost, err)
	}
	port, err := strconv.ParseUint(u.Port(), 10, 16)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("API server URL %q has no port: %w", kubeconfigHost, err)
	}
	return netip.AddrPortFrom(gateway, uint16(port)), nil
}

// Run registers the nodes and serves their pods until ctx ends. ready is
// closed once every node has registered.
func Run(ctx context.Context, cfg Config, ready chan<- struct{}) error {
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	vkLog := vkslog.FromSlog(logger)
	ctx = log.WithLogger(ctx, vkLog)

	docker, err := dockernet.NewClient()
	if err != nil {
		return err
	}
	defer docker.Close()
	netw, err := dockernet.EnsureNetwork(ctx, docker, cfg.Instance)
	if err != nil {
		return err
	}
	// Containers left by an earlier run belong to pods this process does not
	// know; remove them so the pods are started afresh.
	if err := dockernet.RemoveContainers(ctx, docker, cfg.Instance); err != nil {
		return err
	}
	ips, err := ipam.New(netw.Subnet)
	if err != nil {
		return err
	}
	rc, err := clientcmd.BuildConfigFromFlags("", cfg.Kubeconfig)
	if err != nil {
		return err
	}
	rc.QPS, rc.Burst = 100, 200
	kube, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	apiServer, err := podAPIServer(rc.Host, netw.Gateway)
	if err != nil {
		return err
	}
	// Volumes are mounted again before any pod can bind their directories.
	volumes := hostvolumes.Config{Kube: kube, Dir: cfg.VolumesDir, Logger: logger}
	if err := hostvolumes.Remount(ctx, volumes); err != nil {
		return err
	}
	shared := &dockerpods.Shared{
		Docker: docker, Instance: cfg.Instance, Network: netw, IPs: ips,
		PodsDir: cfg.PodsDir, Kube: kube, FallbackImage: cfg.FallbackImage, FallbackByMajor: cfg.FallbackByMajor,
		ResyncPeriod: time.Second, APIServer: apiServer, FinishResize: volumes.FinishResize,
	}
	tlsCfg, err := kubeletTLS(cfg)
	if err != nil {
		return err
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, len(cfg.Nodes)+2)
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := hostvolumes.Run(ctx, volumes); err != nil && ctx.Err() == nil {
			errs <- fmt.Errorf("volume provisioner: %w", err)
			cancel()
		}
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		lb := loadbalancer.Config{Kube: kube, Instance: cfg.Instance, Logger: logger}
		if err := loadbalancer.Run(ctx, lb); err != nil && ctx.Err() == nil {
			errs <- fmt.Errorf("load balancer: %w", err)
			cancel()
		}
	}()
	var nodes []*nodeutil.Node
	for i, spec := range cfg.Nodes {
		port := cfg.KubeletBasePort + i
		mux := http.NewServeMux()
		var prov *dockerpods.Provider
		n, err := nodeutil.NewNode(spec.Name,
			func(pc nodeutil.ProviderConfig) (nodeutil.Provider, node.NodeProvider, error) {
				prov = dockerpods.New(shared, spec.Name, pc.Pods, pc.ConfigMaps, pc.Secrets)
				return prov, nil, nil
			},
			nodeutil.WithClient(kube),
			nodeutil.AttachProviderRoutes(mux),
			nodeutil.WithPodControllerConfigOverrides(func(pc *node.PodControllerConfig) error {
				pc.SyncPodsFromKubernetesShouldRetryFunc = retryLikeKubelet
				return followAPIStatus(pc, prov)
			}),
			func(c *nodeutil.NodeConfig) error {
				c.HTTPListenAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
				c.Handler = mux
				c.TLSConfig = tlsCfg
				c.SkipDownwardAPIResolution = true // dockerpods resolves env with the pod IP it allocates
				c.NumWorkers = 4
				describeNode(&c.NodeSpec, spec, port)
				return nil
			},
		)
		if err != nil {
			return fmt.Errorf("node %s: %w", spec.Name, err)
		}
		nodes = append(nodes, n)
		wg.Add(2)
		go func() {
			defer wg.Done()
			prov.Run(ctx)
		}()
		go func() {
			defer wg.Done()
			if err := n.Run(ctx); err != nil && ctx.Err() == nil {
				errs <- fmt.Errorf("node %s: %w", spec.Name, err)
				cancel()
			}
		}()
	}
	// Set only now: nodeutil.NewNode logs a spurious warning through the
	// global logger when KUBECONFIG is unset, although a client is given.
	log.L = vkLog
	for _, n := range nodes {
		if err := n.WaitReady(ctx, 0); err != nil {
			cancel()
			wg.Wait()
			return errors.Join(err, drain(errs))
		}
	}
	logger.Info("nodes ready", "count", len(nodes), "network", netw.Name, "subnet", netw.Subnet.String())
	if ready != nil {
		close(ready)
	}
	<-ctx.Done()
	wg.Wait()
	return drain(errs)
}

func drain(errs chan error) error {
	var out []error
	for {
		select {
		case err := <-errs:
			out = append(out, err)
		default:
			return errors.Join(out...)
		}
	}
}

// retryLikeKubelet keeps retrying a pod that cannot start yet (say, its
// Secret does not exist yet) with a short capped back-off, as a kubelet
// does. virtual-kubelet's default gives up for good after 20 attempts with a
// back-off that grows to minutes.
func retryLikeKubelet(_ context.Context, _ string, timesTried int, _ time.Time, _ error) (*time.Duration, error) {
	d := min(200*time.Millisecond<<min(timesTried, 6), 5*time.Second)
	return &d, nil
}

// followAPIStatus makes the provider honour conditions others own, as a
// kubelet does: its status writes keep them (a readiness gate's condition
// set by an operator, DisruptionTarget set by the eviction API), and a change
// to them on the API server re-computes Ready at once. Both read the pod
// controller's own informer, whose lister the provider was given.
func followAPIStatus(pc *node.PodControllerConfig, prov *dockerpods.Provider) error {
	pc.PodClient = dockerpods.KeepForeignConditions(pc.PodClient, pc.PodInformer.Lister())
	return prov.WatchPods(pc.PodInformer.Informer())
}

// describeNode fills in what the scheduler and kubectl show about a node.
func describeNode(n *corev1.Node, spec Spec, port int) {
	if n.Labels == nil {
		n.Labels = map[string]string{}
	}
	n.Labels[corev1.LabelTopologyZone] = spec.Zone
	n.Labels[corev1.LabelTopologyRegion] = "dev"
	n.Labels[corev1.LabelHostname] = spec.Name
	n.Labels[LabelDevNode] = "1"
	n.Labels[corev1.LabelOSStable] = "linux"
	n.Labels[corev1.LabelArchStable] = "amd64"
	res := corev1.ResourceList{
		corev1.ResourceCPU:              resource.MustParse("8"),
		corev1.ResourceMemory:           resource.MustParse("32Gi"),
		corev1.ResourcePods:             resource.MustParse("110"),
		corev1.ResourceEphemeralStorage: resource.MustParse("100Gi"),
	}
	n.Status.Capacity = res
	n.Status.Allocatable = res.DeepCopy()
	n.Status.Addresses = []corev1.NodeAddress{
		{Type: corev1.NodeInternalIP, Address: "127.0.0.1"},
		{Type: corev1.NodeHostName, Address: spec.Name},
	}
	n.Status.DaemonEndpoints.KubeletEndpoint.Port = int32(port)
	n.Status.NodeInfo = corev1.NodeSystemInfo{
		KubeletVersion:          "v1.37.2-devcluster",
		OperatingSystem:         "linux",
		Architecture:            "amd64",
		ContainerRuntimeVersion: "docker://20.10",
		OSImage:                 "valkey-operator devcluster (virtual-kubelet + Docker)",
	}
	n.Status.Conditions = []corev1.NodeCondition{
		{Type: corev1.NodeReady, Status: corev1.ConditionFalse, Reason: "Starting"},
		{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientMemory"},
		{Type: corev1.NodeDiskPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasNoDiskPressure"},
		{Type: corev1.NodePIDPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientPID"},
		{Type: corev1.NodeNetworkUnavailable, Status: corev1.ConditionFalse, Reason: "DockerBridge"},
	}
}

// kubeletTLS serves the kubelet API only to clients holding a certificate
// from the cluster CA (the API server's kubelet-client certificate).
func kubeletTLS(cfg Config) (*tls.Config, error) {
	if cfg.ServingCertFile == "" {
		return nil, nil
	}
	pair, err := tls.LoadX509KeyPair(cfg.ServingCertFile, cfg.ServingKeyFile)
	if err != nil {
		return nil, err
	}
	caPEM, err := os.ReadFile(cfg.ClientCAFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("kubelet client CA: no certificates")
	}
	return &tls.Config{
		Certificates: []tls.Certificate{pair},
		ClientCAs:    pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   tls.VersionTLS12,
	}, nil
}
