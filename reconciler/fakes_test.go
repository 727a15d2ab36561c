//go:build envtest

package reconciler_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"sort"
	"strings"
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
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pods := &corev1.PodList{}
		if err := c.List(ctx, pods, client.MatchingLabels{render.LabelManagedBy: render.ManagedBy}); err != nil {
			continue
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
			now := metav1.Now()
			pod.Status = corev1.PodStatus{
				Phase:     corev1.PodRunning,
				PodIP:     fmt.Sprintf("10.%d.%d.%d", 100+n/65536, (n/256)%256, n%256),
				PodIPs:    nil,
				StartTime: &now,
				Conditions: []corev1.PodCondition{
					{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
				},
			}
			pod.Status.PodIPs = []corev1.PodIP{{IP: pod.Status.PodIP}}
			_ = c.Status().Update(ctx, pod)
		}
	}
}

// ---- fake Valkey ----------------------------------------------------------------------

// fakeValkey scripts the servers: Bootstrap forms a cluster, Observe reports the CLUSTER
// NODES view a formed cluster's servers would give (parsed by model.ParseClusterNodes), and the
// reconciler judges it with model.Health as it does real snapshots. Connect refuses what
// a real connection refuses: a login without the operator's password, and a TLS server
// certificate that the credentials' own verification rejects (the cluster certificate is
// what every server presents).
type fakeValkey struct {
	mu         sync.Mutex
	blocked    map[types.NamespacedName]bool
	formed     map[types.NamespacedName]bool
	bootstraps map[types.NamespacedName]int
	creds      map[types.NamespacedName]valkeyops.Credentials
	calls      map[types.NamespacedName]int // every Connect and every command
	writes     map[types.NamespacedName]int // commands that change the cluster
}

func newFakeValkey() *fakeValkey {
	return &fakeValkey{
		blocked: map[types.NamespacedName]bool{}, formed: map[types.NamespacedName]bool{},
		bootstraps: map[types.NamespacedName]int{}, creds: map[types.NamespacedName]valkeyops.Credentials{},
		calls: map[types.NamespacedName]int{}, writes: map[types.NamespacedName]int{},
	}
}

func (f *fakeValkey) block(key types.NamespacedName, on bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.blocked[key] = on
}

func (f *fakeValkey) bootstrapCount(key types.NamespacedName) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.bootstraps[key]
}

func (f *fakeValkey) callCount(key types.NamespacedName) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[key]
}

func (f *fakeValkey) writeCount(key types.NamespacedName) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.writes[key]
}

func (f *fakeValkey) lastCredentials(key types.NamespacedName) valkeyops.Credentials {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.creds[key]
}

func (f *fakeValkey) Connect(_ context.Context, key types.NamespacedName, cred valkeyops.Credentials) (*reconciler.Servers, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls[key]++
	f.creds[key] = cred
	if cred.Username != model.OperatorUser || cred.Password == "" {
		return nil, fmt.Errorf("fake: refusing unauthenticated connection")
	}
	if err := verifyServedCertificate(cred); err != nil {
		return nil, fmt.Errorf("fake: TLS handshake: %w", err)
	}
	return (&fakeClient{f: f, key: key}).servers(), nil
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

// servers serves every port with c.
func (c *fakeClient) servers() *reconciler.Servers {
	return &reconciler.Servers{Reads: c, Topology: c, Failovers: c, Credentials: c, Certificates: c}
}

// fakeClient is one cluster's scripted servers.
type fakeClient struct {
	f   *fakeValkey
	key types.NamespacedName
}

func (c *fakeClient) Bootstrap(_ context.Context, nodes []model.Node, shards int) error {
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	c.f.calls[c.key]++
	c.f.writes[c.key]++
	c.f.bootstraps[c.key]++
	c.f.formed[c.key] = true
	return nil
}

// The day-2 commands are not scripted yet: the suite's clusters converge and never need
// them, so any call is a write the tests can see (and fail on).
func (c *fakeClient) write() error {
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	c.f.calls[c.key]++
	c.f.writes[c.key]++
	return fmt.Errorf("fake: day-2 command not scripted")
}

// Settle succeeds on a formed cluster that is not blocked, as CONFIG SET on reachable
// servers does; the fake keeps no settings.
func (c *fakeClient) Settle(context.Context, []model.Node) error {
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	c.f.calls[c.key]++
	c.f.writes[c.key]++
	if c.f.blocked[c.key] {
		return fmt.Errorf("%w: fake: servers blocked", model.ErrUnreachable)
	}
	return nil
}

func (c *fakeClient) Replicate(context.Context, []model.Node, string, int) error {
	return c.write()
}
func (c *fakeClient) Rebalance(context.Context, []model.Node, []string) (valkeyops.MoveStats, error) {
	return valkeyops.MoveStats{}, c.write()
}
func (c *fakeClient) RemoveNode(context.Context, []model.Node, string) error { return c.write() }
func (c *fakeClient) Failover(context.Context, []model.Node, string) error   { return c.write() }
func (c *fakeClient) Takeover(context.Context, []model.Node, string) error   { return c.write() }
func (c *fakeClient) ForceFailover(context.Context, []model.Node, string) error {
	return c.write()
}
func (c *fakeClient) AssignSlots(context.Context, []model.Node, string, []model.SlotRange) error {
	return c.write()
}
func (c *fakeClient) Forget(context.Context, []model.Node, []string) error { return c.write() }

// Observe renders the CLUSTER NODES text every server of a formed cluster would report
// (shard i's first node by name is its primary and owns the i-th even slot range) and parses
// it with valkeyops. A cluster not bootstrapped, or blocked by a test, reports
// cluster_state fail with no slots assigned.
func (c *fakeClient) Observe(_ context.Context, nodes []model.Node) (*model.Snapshot, error) {
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	c.f.calls[c.key]++
	healthy := c.f.formed[c.key] && !c.f.blocked[c.key]
	byShard := map[int][]model.Node{}
	for _, n := range nodes {
		byShard[n.Shard] = append(byShard[n.Shard], n)
	}
	ranges := model.EvenRanges(len(byShard))
	type line struct{ id, role, primary, slots string }
	lines := map[string]line{}
	for shard, members := range byShard {
		sort.Slice(members, func(i, j int) bool { return members[i].Name < members[j].Name })
		primaryID := "id-" + members[0].Name
		for i, n := range members {
			l := line{id: "id-" + n.Name, role: "master", primary: "-"}
			if i > 0 {
				l.role, l.primary = "slave", primaryID
			} else if healthy && shard < len(ranges) {
				l.slots = ranges[shard].String()
			}
			lines[n.Name] = l
		}
	}
	snap := &model.Snapshot{}
	for _, n := range nodes {
		var text strings.Builder
		for _, m := range nodes {
			l := lines[m.Name]
			flags := l.role
			if m.Name == n.Name {
				flags = "myself," + flags
			}
			fmt.Fprintf(&text, "%s %s@16379 %s %s 0 0 1 connected %s\n", l.id, m.Addr, flags, l.primary, l.slots)
		}
		view, err := model.ParseClusterNodes(text.String())
		if err != nil {
			return nil, err
		}
		st := model.NodeState{Node: n, Reachable: true, ID: lines[n.Name].id, View: view,
			Role: model.RolePrimary, PrimaryLink: model.PrimaryLinkUp, ClusterState: "fail", KnownNodes: len(nodes)}
		if l := lines[n.Name]; l.role == "slave" {
			st.Role, st.PrimaryID = model.RoleReplica, l.primary
		}
		if healthy {
			st.ClusterState, st.SlotsAssigned = "ok", model.SlotCount
			st.Slots = st.Self().Slots
		}
		snap.Nodes = append(snap.Nodes, st)
	}
	return snap, nil
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
