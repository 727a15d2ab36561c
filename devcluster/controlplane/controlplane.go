// Package controlplane runs a real Kubernetes control plane (etcd,
// kube-apiserver, kube-scheduler, kube-controller-manager) as local processes
// with generated certificates, client-certificate authentication, RBAC and
// service-account token signing.
package controlplane

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/gomomento/valkey-operator/devcluster/proc"
	"github.com/gomomento/valkey-operator/internal/poll"
	"github.com/gomomento/valkey-operator/internal/testcerts"
)

// Users the certificates name. The nodes' user gets its rights from a
// ClusterRole the caller binds (see NodesUser).
const (
	AdminUser = "valkey-operator.dev:admin"
	NodesUser = "valkey-operator.dev:virtual-kubelet"
)

// Binaries the control plane needs in Config.BinDir.
var Binaries = []string{"etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager"}

// Config says where and how to run.
type Config struct {
	BinDir   string
	StateDir string
	// Ports on 127.0.0.1.
	EtcdPort, EtcdPeerPort, APIServerPort int
	// AdvertiseIP is the address the API server advertises (a non-loopback
	// address: the Docker network's gateway), also put in its certificate.
	AdvertiseIP net.IP
	// Detach lets the processes outlive the caller.
	Detach bool
}

// Paths inside the state directory.
func (c Config) PKIDir() string          { return filepath.Join(c.StateDir, "pki") }
func (c Config) AdminKubeconfig() string { return filepath.Join(c.StateDir, "kubeconfig") }
func (c Config) KubeconfigFor(component string) string {
	return filepath.Join(c.StateDir, "kubeconfigs", component+".kubeconfig")
}
func (c Config) LogFile(name string) string { return filepath.Join(c.StateDir, "logs", name+".log") }
func (c Config) PidFile(name string) string { return filepath.Join(c.StateDir, "pids", name+".pid") }
func (c Config) serverURL() string {
	return "https://127.0.0.1:" + strconv.Itoa(c.APIServerPort)
}

// ControlPlane is a running (or adopted) control plane.
type ControlPlane struct {
	Config Config
	procs  []*proc.Process
}

// Files written by Prepare for the nodes process.
type NodeFiles struct {
	Kubeconfig                                    string
	ServingCertFile, ServingKeyFile, ClientCAFile string
}

// Prepare writes certificates, keys and kubeconfigs (kept across runs).
func Prepare(cfg Config) (NodeFiles, error) {
	dir := cfg.PKIDir()
	ca, err := testcerts.LoadOrCreateCA(dir, "valkey-operator-devcluster-ca")
	if err != nil {
		return NodeFiles{}, err
	}
	if err := testcerts.EnsureServiceAccountKey(dir); err != nil {
		return NodeFiles{}, err
	}
	loopback := []net.IP{net.ParseIP("127.0.0.1")}
	apiIPs := append([]net.IP{net.ParseIP("10.96.0.1")}, loopback...)
	if cfg.AdvertiseIP != nil {
		apiIPs = append(apiIPs, cfg.AdvertiseIP)
	}
	leaves := map[string]testcerts.Leaf{
		"etcd":               {CommonName: "etcd", DNSNames: []string{"localhost"}, IPs: loopback, Server: true, Client: true},
		"apiserver-etcd":     {CommonName: "kube-apiserver-etcd-client", Client: true},
		"apiserver":          {CommonName: "kube-apiserver", DNSNames: []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}, IPs: apiIPs, Server: true},
		"apiserver-kubelet":  {CommonName: "kube-apiserver-kubelet-client", Organizations: []string{"system:masters"}, Client: true},
		"admin":              {CommonName: AdminUser, Organizations: []string{"system:masters"}, Client: true},
		"scheduler":          {CommonName: "system:kube-scheduler", Client: true},
		"controller-manager": {CommonName: "system:kube-controller-manager", Client: true},
		"nodes":              {CommonName: NodesUser, Client: true},
		"kubelet-serving":    {CommonName: "devcluster-kubelet", DNSNames: []string{"localhost"}, IPs: loopback, Server: true},
	}
	pairs := map[string]testcerts.Pair{}
	for name, leaf := range leaves {
		p, err := ca.LoadOrIssue(dir, name, leaf)
		if err != nil {
			return NodeFiles{}, fmt.Errorf("certificate %s: %w", name, err)
		}
		pairs[name] = p
	}
	if err := writeKubeconfig(cfg.AdminKubeconfig(), cfg.serverURL(), ca.CertPEM, pairs["admin"], "admin"); err != nil {
		return NodeFiles{}, err
	}
	for _, c := range []string{"scheduler", "controller-manager", "nodes"} {
		if err := writeKubeconfig(cfg.KubeconfigFor(c), cfg.serverURL(), ca.CertPEM, pairs[c], c); err != nil {
			return NodeFiles{}, err
		}
	}
	return NodeFiles{
		Kubeconfig:      cfg.KubeconfigFor("nodes"),
		ServingCertFile: filepath.Join(dir, "kubelet-serving.crt"),
		ServingKeyFile:  filepath.Join(dir, "kubelet-serving.key"),
		ClientCAFile:    filepath.Join(dir, "ca.crt"),
	}, nil
}

func writeKubeconfig(path, server string, caPEM []byte, p testcerts.Pair, user string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["devcluster"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	kc.AuthInfos[user] = &clientcmdapi.AuthInfo{ClientCertificateData: p.CertPEM, ClientKeyData: p.KeyPEM}
	kc.Contexts["devcluster"] = &clientcmdapi.Context{Cluster: "devcluster", AuthInfo: user, Namespace: "default"}
	kc.CurrentContext = "devcluster"
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		return err
	}
	return os.Chmod(path, 0o600)
}

// args returns each component's command line.
func (c Config) args() map[string][]string {
	pk := func(n string) string { return filepath.Join(c.PKIDir(), n) }
	etcdClient := "https://127.0.0.1:" + strconv.Itoa(c.EtcdPort)
	etcdPeer := "https://127.0.0.1:" + strconv.Itoa(c.EtcdPeerPort)
	advertise := "127.0.0.1"
	if c.AdvertiseIP != nil {
		advertise = c.AdvertiseIP.String()
	}
	return map[string][]string{
		"etcd": {
			"--name=devcluster", "--data-dir=" + filepath.Join(c.StateDir, "etcd"),
			"--listen-client-urls=" + etcdClient, "--advertise-client-urls=" + etcdClient,
			"--listen-peer-urls=" + etcdPeer, "--initial-advertise-peer-urls=" + etcdPeer,
			"--initial-cluster=devcluster=" + etcdPeer,
			"--cert-file=" + pk("etcd.crt"), "--key-file=" + pk("etcd.key"),
			"--client-cert-auth", "--trusted-ca-file=" + pk("ca.crt"),
			"--peer-cert-file=" + pk("etcd.crt"), "--peer-key-file=" + pk("etcd.key"),
			"--peer-client-cert-auth", "--peer-trusted-ca-file=" + pk("ca.crt"),
			// A dev cluster's data is disposable: skipping fsync makes etcd
			// (and so every API write) much faster on slow disks.
			"--unsafe-no-fsync", "--log-level=warn",
		},
		"kube-apiserver": {
			"--etcd-servers=" + etcdClient,
			"--etcd-cafile=" + pk("ca.crt"), "--etcd-certfile=" + pk("apiserver-etcd.crt"), "--etcd-keyfile=" + pk("apiserver-etcd.key"),
			"--bind-address=0.0.0.0", "--secure-port=" + strconv.Itoa(c.APIServerPort), "--advertise-address=" + advertise,
			"--tls-cert-file=" + pk("apiserver.crt"), "--tls-private-key-file=" + pk("apiserver.key"),
			"--client-ca-file=" + pk("ca.crt"), "--anonymous-auth=false",
			"--authorization-mode=Node,RBAC",
			"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
			"--service-account-key-file=" + pk("sa.pub"), "--service-account-signing-key-file=" + pk("sa.key"),
			"--service-cluster-ip-range=10.96.0.0/16",
			"--kubelet-client-certificate=" + pk("apiserver-kubelet.crt"), "--kubelet-client-key=" + pk("apiserver-kubelet.key"),
			"--kubelet-certificate-authority=" + pk("ca.crt"),
			"--kubelet-preferred-address-types=InternalIP",
			"--allow-privileged=true", "--profiling=false", "--v=1",
			// On top of the default plugins, as OpenShift and other hardened clusters run it:
			// setting blockOwnerDeletion needs update on the owner's finalizers, so the
			// operator's RBAC is tested against it.
			"--enable-admission-plugins=OwnerReferencesPermissionEnforcement",
		},
		"kube-scheduler": {
			"--kubeconfig=" + c.KubeconfigFor("scheduler"),
			"--authentication-kubeconfig=" + c.KubeconfigFor("scheduler"),
			"--authorization-kubeconfig=" + c.KubeconfigFor("scheduler"),
			"--leader-elect=false", "--secure-port=0", "--v=1",
		},
		"kube-controller-manager": {
			"--kubeconfig=" + c.KubeconfigFor("controller-manager"),
			"--authentication-kubeconfig=" + c.KubeconfigFor("controller-manager"),
			"--authorization-kubeconfig=" + c.KubeconfigFor("controller-manager"),
			"--service-account-private-key-file=" + pk("sa.key"), "--root-ca-file=" + pk("ca.crt"),
			"--use-service-account-credentials=true",
			"--cluster-signing-cert-file=" + pk("ca.crt"), "--cluster-signing-key-file=" + pk("ca.key"),
			"--leader-elect=false", "--secure-port=0", "--v=1",
		},
	}
}

// Start brings the control plane up (reusing processes that already run
// when detached) and waits until the API server is ready.
func Start(ctx context.Context, cfg Config) (*ControlPlane, error) {
	for _, b := range Binaries {
		if _, err := os.Stat(filepath.Join(cfg.BinDir, b)); err != nil {
			return nil, fmt.Errorf("control-plane binary %s missing in %s (run hack/build-controlplane.sh): %w", b, cfg.BinDir, err)
		}
	}
	cp := &ControlPlane{Config: cfg}
	args := cfg.args()
	start := func(name string) error {
		bin := filepath.Join(cfg.BinDir, name)
		if cfg.Detach {
			if _, ok := proc.Running(cfg.PidFile(name), name); ok {
				return nil
			}
		}
		p, err := proc.Start(name, bin, args[name], cfg.LogFile(name), cfg.PidFile(name), proc.Options{Detach: cfg.Detach})
		if err != nil {
			return err
		}
		cp.procs = append(cp.procs, p)
		return nil
	}
	// The API server retries etcd, so both start at once. The scheduler and
	// controller manager start once the API server is ready: the controller
	// manager gives up if the API server is not healthy (RBAC bootstrapped)
	// within its own timeout, which a loaded 2-core machine can exceed.
	for _, name := range Binaries[:2] {
		if err := start(name); err != nil {
			cp.Stop()
			return nil, err
		}
	}
	if err := cp.WaitReady(ctx, 90*time.Second); err != nil {
		cp.Stop()
		return nil, err
	}
	for _, name := range Binaries[2:] {
		if err := start(name); err != nil {
			cp.Stop()
			return nil, err
		}
	}
	return cp, nil
}

// WaitReady polls the API server's /readyz until it answers ok.
func (cp *ControlPlane) WaitReady(ctx context.Context, timeout time.Duration) error {
	hc, err := cp.adminHTTPClient()
	if err != nil {
		return err
	}
	url := cp.Config.serverURL() + "/readyz"
	err = poll.Until(ctx, 100*time.Millisecond, timeout, "kube-apiserver ready", func(ctx context.Context) (bool, string, error) {
		for _, p := range cp.procs {
			select {
			case <-p.Exited():
				return false, "", p.ExitError()
			default:
			}
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := hc.Do(req)
		if err != nil {
			return false, err.Error(), nil
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status, nil
	})
	if err != nil {
		return fmt.Errorf("%w; log tail:\n%s", err, proc.Tail(cp.Config.LogFile("kube-apiserver"), 15))
	}
	return nil
}

func (cp *ControlPlane) adminHTTPClient() (*http.Client, error) {
	dir := cp.Config.PKIDir()
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, "admin.crt"), filepath.Join(dir, "admin.key"))
	if err != nil {
		return nil, err
	}
	caPEM, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("bad CA file")
	}
	return &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12},
	}}, nil
}

// Stop stops the processes this ControlPlane started (reverse order).
func (cp *ControlPlane) Stop() {
	for i := len(cp.procs) - 1; i >= 0; i-- {
		cp.procs[i].Stop(10 * time.Second)
	}
	cp.procs = nil
}

// StopDetached stops processes recorded in the state directory's pid files,
// for `devcluster down` run from another process.
func StopDetached(cfg Config) error {
	var errs []error
	for i := len(Binaries) - 1; i >= 0; i-- {
		if err := proc.StopPidFile(cfg.PidFile(Binaries[i]), Binaries[i], 10*time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
