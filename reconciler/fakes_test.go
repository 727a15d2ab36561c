//go:build envtest

package reconciler_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gomomento/valkey-operator/reconciler"
	"github.com/gomomento/valkey-operator/reconciler/render"
	"github.com/gomomento/valkey-operator/valkeyops"
	"github.com/gomomento/valkey-operator/valkeyops/model"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ---- fake kubelet ---------------------------------------------------------------------

// fakeKubelet marks every operator pod Running with a unique IP and Ready, except in
// namespaces a test has paused.
type fakeKubelet struct {
	mu     sync.Mutex
	paused map[string]bool
	nextIP atomic.Int64
}

func newFakeKubelet() *fakeKubelet { return &fakeKubelet{paused: map[string]bool{}} }

func (k *fakeKubelet) pause(ns string, on bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.paused[ns] = on
}

func (k *fakeKubelet) run(ctx context.Context, c client.Client) {
	everyTick(ctx, 100*time.Millisecond, func() {
		pods := &corev1.PodList{}
		if err := c.List(ctx, pods, client.MatchingLabels{render.LabelManagedBy: render.ManagedBy}); err != nil {
			return
		}
		for i := range pods.Items {
			pod := &pods.Items[i]
			k.mu.Lock()
			paused := k.paused[pod.Namespace]
			k.mu.Unlock()
			if paused || pod.Status.Phase == corev1.PodRunning {
				continue
			}
			n := k.nextIP.Add(1)
			pod.Status = runningStatus(fmt.Sprintf("10.%d.%d.%d", 100+n/65536, (n/256)%256, n%256))
			_ = c.Status().Update(ctx, pod)
		}
	})
}

// everyTick calls fn every d until ctx ends.
func everyTick(ctx context.Context, d time.Duration, fn func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fn()
		}
	}
}

// runningStatus is what a kubelet reports of a pod it runs at ip: Running and Ready.
func runningStatus(ip string) corev1.PodStatus {
	now := metav1.Now()
	return corev1.PodStatus{
		Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}, StartTime: &now,
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now}},
	}
}

// ---- fake Valkey ----------------------------------------------------------------------

// fakeValkey is the suite's servers: one fake per port, each keeping its own state of every
// cluster's servers (fakes_topology_test.go, fakes_acl_test.go, fakes_tls_test.go), and the
// wire they all share. Connect refuses what a real connection refuses: a login without the
// operator's password, and a TLS server certificate that the credentials' own verification
// rejects (the cluster certificate is what every server presents).
type fakeValkey struct {
	wire     *fakeWire
	topology *fakeTopologyState
	creds    *fakeCredentialState
	certs    *fakeCertificateState
	zones    *fakeZoneState
	announce *fakeAnnounceState
}

func newFakeValkey() *fakeValkey {
	w := &fakeWire{
		creds: map[types.NamespacedName]valkeyops.Credentials{},
		calls: map[types.NamespacedName]int{}, writes: map[types.NamespacedName]int{},
	}
	return &fakeValkey{wire: w, topology: newFakeTopologyState(w), creds: newFakeCredentialState(w), certs: newFakeCertificateState(w), zones: newFakeZoneState(w),
		announce: newFakeAnnounceState(w)}
}

func (f *fakeValkey) block(key types.NamespacedName, on bool) { f.topology.block(key, on) }

func (f *fakeValkey) bootstrapCount(key types.NamespacedName) int {
	return f.topology.bootstrapCount(key)
}

func (f *fakeValkey) callCount(key types.NamespacedName) int  { return f.wire.callCount(key) }
func (f *fakeValkey) writeCount(key types.NamespacedName) int { return f.wire.writeCount(key) }

func (f *fakeValkey) lastCredentials(key types.NamespacedName) valkeyops.Credentials {
	return f.wire.lastCredentials(key)
}

func (f *fakeValkey) Connect(_ context.Context, key types.NamespacedName, cred valkeyops.Credentials) (*reconciler.Servers, error) {
	f.wire.connect(key, cred)
	if cred.Username != model.OperatorUser || cred.Password == "" {
		return nil, fmt.Errorf("fake: refusing unauthenticated connection")
	}
	if err := verifyServedCertificate(cred); err != nil {
		return nil, fmt.Errorf("fake: TLS handshake: %w", err)
	}
	return f.servers(key), nil
}

// servers is one cluster's ports, each served by its own fake.
func (f *fakeValkey) servers(key types.NamespacedName) *reconciler.Servers {
	topo, creds, certs, zones := f.topology.cluster(key), f.creds.cluster(key), f.certs.cluster(key), f.zones.cluster(key)
	announces := f.announce.cluster(key)
	return &reconciler.Servers{
		Reads:    fakeReads{observe: topo, auth: creds, certs: certs, zones: zones, announces: announces},
		Topology: topo, Failovers: topo, Credentials: creds, Certificates: certs,
		Membership: noMoves{}, Zones: zones, Announces: announces,
	}
}

// verifyServedCertificate runs the credentials' TLS verification on the certificate the
// servers present (the cluster's own, which the operator also presents as its client
// certificate), exactly as a real handshake would.
func verifyServedCertificate(cred valkeyops.Credentials) error {
	cfg, err := cred.TLSConfig()
	if err != nil || cfg == nil {
		return err
	}
	var chain []*x509.Certificate
	for rest := cred.Cert; ; {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			break
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return err
		}
		chain = append(chain, c)
	}
	if cfg.VerifyConnection == nil {
		return fmt.Errorf("credentials verify nothing")
	}
	return cfg.VerifyConnection(tls.ConnectionState{ServerName: cfg.ServerName, PeerCertificates: chain})
}

func (f *fakeValkey) Release(types.NamespacedName) {}

// fakeWire is what one fakeValkey's servers saw, by cluster: every Connect and every command
// (calls), the commands that change the cluster (writes), and the credentials of the latest
// Connect, which the servers check logins and TLS against. Every port's fake counts on it.
type fakeWire struct {
	mu     sync.Mutex
	creds  map[types.NamespacedName]valkeyops.Credentials
	calls  map[types.NamespacedName]int
	writes map[types.NamespacedName]int
}

// connect counts a Connect with cred, which the servers check from now on.
func (w *fakeWire) connect(key types.NamespacedName, cred valkeyops.Credentials) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.calls[key]++
	w.creds[key] = cred
}

// call counts a command and returns the credentials of the latest Connect.
func (w *fakeWire) call(key types.NamespacedName) valkeyops.Credentials {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.calls[key]++
	return w.creds[key]
}

// write counts a command that changes the cluster and returns the credentials of the latest
// Connect.
func (w *fakeWire) write(key types.NamespacedName) valkeyops.Credentials {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.calls[key]++
	w.writes[key]++
	return w.creds[key]
}

func (w *fakeWire) callCount(key types.NamespacedName) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.calls[key]
}

func (w *fakeWire) writeCount(key types.NamespacedName) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.writes[key]
}

func (w *fakeWire) lastCredentials(key types.NamespacedName) valkeyops.Credentials {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.creds[key]
}

// fakeReads is the Reads port composed of the read halves of the per-port fakes: the
// topology's snapshot, the credentials' users, the certificates' served certificate, the
// servers' availability zones and client addresses.
type fakeReads struct {
	observe interface {
		Observe(ctx context.Context, nodes []model.Node) (*model.Snapshot, error)
	}
	auth interface {
		ReadAuth(ctx context.Context, nodes []model.Node) ([]model.AuthState, error)
	}
	certs interface {
		ServedCertificate(ctx context.Context, node model.Node) (*x509.Certificate, error)
	}
	zones interface {
		AvailabilityZone(ctx context.Context, node model.Node) (string, error)
	}
	announces interface {
		ClientAnnounce(ctx context.Context, node model.Node) (model.ClientAddress, error)
	}
}

func (r fakeReads) Observe(ctx context.Context, nodes []model.Node) (*model.Snapshot, error) {
	return r.observe.Observe(ctx, nodes)
}

func (r fakeReads) ReadAuth(ctx context.Context, nodes []model.Node) ([]model.AuthState, error) {
	return r.auth.ReadAuth(ctx, nodes)
}

func (r fakeReads) ServedCertificate(ctx context.Context, node model.Node) (*x509.Certificate, error) {
	return r.certs.ServedCertificate(ctx, node)
}

func (r fakeReads) AvailabilityZone(ctx context.Context, node model.Node) (string, error) {
	return r.zones.AvailabilityZone(ctx, node)
}

// passCounter is the suite's reconciler.Metrics: it counts passes per cluster, so tests can
// prove that an idle window really contained reconciles.
type passCounter struct{ m sync.Map } // types.NamespacedName -> *atomic.Int64

func (c *passCounter) ReconcileDone(key types.NamespacedName, _ string, _ time.Duration, _ error) {
	n, _ := c.m.LoadOrStore(key, new(atomic.Int64))
	n.(*atomic.Int64).Add(1)
}

func (c *passCounter) ClusterSeen(types.NamespacedName, reconciler.ClusterReport) {}
func (c *passCounter) ActionDone(types.NamespacedName, string, error)             {}
func (c *passCounter) Moved(types.NamespacedName, valkeyops.MoveStats)            {}
func (c *passCounter) ClusterGone(types.NamespacedName)                           {}

func (c *passCounter) of(key types.NamespacedName) int64 {
	if n, ok := c.m.Load(key); ok {
		return n.(*atomic.Int64).Load()
	}
	return 0
}

// noMoves is the Membership port of fakes whose servers never change address: every view
// lists every member at its address, so the planner never asks to re-introduce one, and a
// request to is an error the test sees.
type noMoves struct{}

func (noMoves) Reintroduce(context.Context, []model.Node) error {
	return fmt.Errorf("fake: no server of this fake ever moved, nothing to re-introduce")
}

func (r fakeReads) ClientAnnounce(ctx context.Context, node model.Node) (model.ClientAddress, error) {
	return r.announces.ClientAnnounce(ctx, node)
}
