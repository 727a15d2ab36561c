package reconciler

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gomomento/valkey-operator/crds"
	"github.com/gomomento/valkey-operator/reconciler/render"
	"github.com/gomomento/valkey-operator/reconciler/resolve"
	"github.com/gomomento/valkey-operator/reconciler/tlscheck"
	"github.com/gomomento/valkey-operator/reconciler/topology"
	"github.com/gomomento/valkey-operator/reconciler/views"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// cacheLookup resolves menu objects through the informer cache.
type cacheLookup struct{ c client.Reader }

func (l cacheLookup) Config(ctx context.Context, name string) (views.Config, bool, error) {
	u := views.NewConfigObject()
	if err := l.c.Get(ctx, types.NamespacedName{Name: name}, u); err != nil {
		if apierrors.IsNotFound(err) {
			return views.Config{}, false, nil
		}
		return views.Config{}, false, err
	}
	return views.Config{U: u}, true, nil
}

func (l cacheLookup) Image(ctx context.Context, name string) (views.Image, bool, error) {
	u := views.NewImageObject()
	if err := l.c.Get(ctx, types.NamespacedName{Name: name}, u); err != nil {
		if apierrors.IsNotFound(err) {
			return views.Image{}, false, nil
		}
		return views.Image{}, false, err
	}
	return views.Image{U: u}, true, nil
}

// target is the topology this Creating pass builds: the targetSpec snapshot, or for a
// previously formed cluster the topology its nodes already have (bootstrap is then a no-op).
func (p *pass) target() views.TargetSpec {
	if p.formed {
		perShard := map[int]int{}
		for _, n := range p.nodes {
			perShard[n.Shard()]++
		}
		t := views.TargetSpec{Shards: len(perShard), ReplicasPerShard: -1}
		for _, c := range perShard {
			if t.ReplicasPerShard < 0 || c-1 < t.ReplicasPerShard {
				t.ReplicasPerShard = c - 1
			}
		}
		return t
	}
	if t := p.cluster.Status().Target; t != nil {
		return *t
	}
	return views.TargetSpec{Shards: p.cluster.Shards(), ReplicasPerShard: p.cluster.ReplicasPerShard()}
}

// resolveConfig lists the cluster's nodes and pods and, unless the cluster was formed
// before, resolves configRef -> ValkeyConfig chain -> ValkeyImage. A missing or cyclic
// reference keeps the cluster Creating with a Warning Event; creating the object unblocks
// it through the watches, without a spec edit.
func (r *Reconciler) resolveConfig(ctx context.Context, p *pass) *outcome {
	if out := r.loadMembers(ctx, p); out != nil {
		return out
	}
	if p.formed {
		return nil
	}
	res, err := resolve.Resolve(ctx, cacheLookup{r.client}, p.cluster.ConfigRef())
	var (
		missingConfig *resolve.MissingConfigError
		cycle         *resolve.CycleError
		noImage       *resolve.NoImageError
		missingImage  *resolve.MissingImageError
	)
	// The action names the failure kind so each kind is its own Event series.
	action := ""
	switch {
	case errors.As(err, &missingConfig):
		action = "ResolveConfigMissingConfig"
	case errors.As(err, &cycle):
		action = "ResolveConfigCycle"
	case errors.As(err, &noImage):
		action = "ResolveConfigNoImageRef"
	case errors.As(err, &missingImage):
		action = "ResolveConfigMissingImage"
	}
	switch {
	case action != "":
		r.warn(p, ReasonConfigUnresolved, action, "cannot resolve configRef "+strconv.Quote(p.cluster.ConfigRef())+": "+err.Error())
		return done(ctrl.Result{RequeueAfter: r.opts.RecheckInterval}, nil)
	case err != nil:
		return done(ctrl.Result{}, err)
	}
	r.clearWarning(p, ReasonConfigUnresolved)
	p.resolved = res
	return nil
}

func (r *Reconciler) loadMembers(ctx context.Context, p *pass) *outcome {
	list := views.NewNodeListObject()
	sel := client.MatchingLabels{render.LabelCluster: p.key.Name}
	if err := r.client.List(ctx, list, client.InNamespace(p.key.Namespace), sel); err != nil {
		return done(ctrl.Result{}, err)
	}
	seen := map[string]bool{}
	p.nodes = nil
	for i := range list.Items {
		n := views.Node{U: &list.Items[i]}
		if !metav1.IsControlledBy(n.U, p.obj) {
			continue
		}
		seen[n.Name()] = true
		p.nodes = append(p.nodes, n)
	}
	sort.Slice(p.nodes, func(i, j int) bool {
		if p.nodes[i].Shard() != p.nodes[j].Shard() {
			return p.nodes[i].Shard() < p.nodes[j].Shard()
		}
		return p.nodes[i].Name() < p.nodes[j].Name()
	})
	r.mu.Lock()
	for name, at := range r.expected[p.key] {
		if seen[name] || time.Since(at) > expectTimeout {
			delete(r.expected[p.key], name)
		}
	}
	pending := len(r.expected[p.key])
	r.mu.Unlock()
	if pending > 0 {
		// Nodes we created are not in the cache yet; acting on this list could double a shard.
		return done(ctrl.Result{RequeueAfter: r.opts.PollInterval}, nil)
	}

	p.formed = len(p.nodes) > 0
	for _, n := range p.nodes {
		if n.Status().Lifecycle != views.LifecycleActive {
			p.formed = false
		}
	}

	pods := &corev1.PodList{}
	if err := r.client.List(ctx, pods, client.InNamespace(p.key.Namespace), sel); err != nil {
		return done(ctrl.Result{}, err)
	}
	p.pods = map[string]*corev1.Pod{}
	for i := range pods.Items {
		p.pods[pods.Items[i].Name] = &pods.Items[i]
	}
	return nil
}

// ensureNodes creates the ValkeyNodes the snapshot topology still lacks. Each node's spec is
// fixed here, from the live resolution and placement (seed: a live edit shapes only nodes
// not created yet).
func (r *Reconciler) ensureNodes(ctx context.Context, p *pass) *outcome {
	if p.formed {
		return nil
	}
	t := p.target()
	perShard := map[int]int{}
	names := map[string]bool{}
	for _, n := range p.nodes {
		perShard[n.Shard()]++
		names[n.Name()] = true
	}
	for shard := 0; shard < t.Shards; shard++ {
		for perShard[shard] < 1+t.ReplicasPerShard {
			n, err := r.createNode(ctx, p, shard, names)
			if err != nil {
				return done(ctrl.Result{}, err)
			}
			names[n.Name()] = true
			perShard[shard]++
			p.nodes = append(p.nodes, n)
		}
	}
	return nil
}

func (r *Reconciler) createNode(ctx context.Context, p *pass, shard int, taken map[string]bool) (views.Node, error) {
	spec := render.NodeSpec(p.cluster, shard, p.resolved, r.opts.Settings.DefaultZoneSpread)
	for attempt := 0; ; attempt++ {
		name, err := render.NodeName(p.key.Name, r.opts.Random)
		if err != nil {
			return views.Node{}, err
		}
		if taken[name] || p.pods[name] != nil {
			continue
		}
		u := views.NewNodeObject()
		u.SetName(name)
		u.SetNamespace(p.key.Namespace)
		u.SetLabels(render.NodeLabels(p.key.Name, shard))
		u.SetOwnerReferences([]metav1.OwnerReference{p.clusterOwnerRef()})
		n := views.Node{U: u}
		n.SetSpec(spec)
		if err := r.client.Create(ctx, u); err != nil {
			if apierrors.IsAlreadyExists(err) && attempt < 5 {
				continue
			}
			return views.Node{}, err
		}
		r.mu.Lock()
		if r.expected[p.key] == nil {
			r.expected[p.key] = map[string]time.Time{}
		}
		r.expected[p.key][name] = time.Now()
		r.mu.Unlock()
		n.SetStatus(views.NodeStatus{Lifecycle: views.LifecycleJoining})
		if err := r.client.Status().Update(ctx, u); err != nil {
			return views.Node{}, err
		}
		p.log.Info("created ValkeyNode", "node", name, "shard", shard, "image", spec.Image)
		r.event(p, u, ReasonNodeCreated, "CreateNode", "Created ValkeyNode %s for shard %d (image %s)", name, shard, spec.Image)
		return n, nil
	}
}

// ensurePods creates the Pod of every node that has none, from the node's fixed spec.
func (r *Reconciler) ensurePods(ctx context.Context, p *pass) *outcome {
	annotations := p.cluster.PodAnnotations()
	for _, n := range p.nodes {
		if p.pods[n.Name()] != nil {
			continue
		}
		pod := render.Pod(n.Name(), p.key.Namespace, n.Spec(), annotations)
		pod.OwnerReferences = []metav1.OwnerReference{ownerRef(n.U, crds.Group+"/"+crds.Version, crds.KindNode)}
		if err := r.client.Create(ctx, pod); err != nil {
			if apierrors.IsAlreadyExists(err) {
				continue
			}
			return done(ctrl.Result{}, err)
		}
		p.log.Info("created Pod", "pod", pod.Name)
	}
	return nil
}

// waitPods waits until every node's pod runs with an IP, recording pod IPs on the nodes.
func (r *Reconciler) waitPods(ctx context.Context, p *pass) *outcome {
	p.members = nil
	ready := true
	for _, n := range p.nodes {
		pod := p.pods[n.Name()]
		if pod == nil || pod.Status.Phase != corev1.PodRunning || pod.Status.PodIP == "" || !podReady(pod) {
			ready = false
			continue
		}
		if err := r.setNodeStatus(ctx, n, func(s *views.NodeStatus) { s.PodIP = pod.Status.PodIP }); err != nil {
			return done(ctrl.Result{}, err)
		}
		p.members = append(p.members, topology.Member{
			Name: n.Name(), Addr: net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(render.ClientPort)), Shard: n.Shard(),
		})
	}
	if !ready {
		return done(ctrl.Result{RequeueAfter: r.opts.RecheckInterval}, nil)
	}
	return nil
}

// podReady reports the pod's Ready condition: its readiness probe (TCP on the client port)
// passed, so the server accepts connections. Running alone only means the container started;
// dialing then races the server's start-up (connection refused, a spurious BootstrapFailed
// Warning Event and a poll interval lost). The Ready transition is a Pod event, so waiting
// for it costs no extra latency.
func podReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// setNodeStatus applies mutate to a node's status and writes it only if it changed.
func (r *Reconciler) setNodeStatus(ctx context.Context, n views.Node, mutate func(*views.NodeStatus)) error {
	have := n.Status()
	want := have
	mutate(&want)
	if want == have {
		return nil
	}
	n.SetStatus(want)
	return r.client.Status().Update(ctx, n.U)
}

// conn builds the operator's connection settings: user "operator" with the generated
// password and, with TLS, verification against the cluster CA under the Service name.
func (r *Reconciler) conn(p *pass) topology.Conn {
	c := topology.Conn{Cluster: p.key, Username: topology.OperatorUser, Password: p.operatorPassword}
	if p.tlsData != nil {
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(p.tlsData[tlscheck.KeyCA])
		cfg := &tls.Config{
			MinVersion: tls.VersionTLS12,
			RootCAs:    pool,
			ServerName: tlscheck.ServiceName(p.key.Name, p.key.Namespace),
		}
		// Present the cluster certificate too, so servers that demand client certificates
		// accept the operator.
		if pair, err := tls.X509KeyPair(p.tlsData[tlscheck.KeyCert], p.tlsData[tlscheck.KeyKey]); err == nil {
			cfg.Certificates = []tls.Certificate{pair}
		}
		c.TLS = cfg
	}
	return c
}

// formCluster runs valkeyops' idempotent bootstrap from the snapshot topology (skipped for
// a previously formed cluster) and then observes it against the seed's Active criteria.
func (r *Reconciler) formCluster(ctx context.Context, p *pass) *outcome {
	if p.operatorPassword == "" {
		// Auth is always on; never dial without the operator's password.
		return done(ctrl.Result{RequeueAfter: r.opts.PollInterval}, nil)
	}
	t := p.target()
	conn := r.conn(p)
	if !p.formed {
		if err := r.opts.Valkey.Bootstrap(ctx, conn, p.members, t.Shards); err != nil {
			r.warn(p, ReasonBootstrapFailed, "Bootstrap", "bootstrap failed: "+err.Error())
			return done(ctrl.Result{RequeueAfter: r.opts.PollInterval}, nil)
		}
		r.clearWarning(p, ReasonBootstrapFailed)
		r.noteOnce(p, ReasonBootstrap, "Bootstrap", "Bootstrapped "+strconv.Itoa(t.Shards)+" shards x "+strconv.Itoa(t.ReplicasPerShard)+" replicas over "+strconv.Itoa(len(p.members))+" nodes")
	}
	obs, err := r.opts.Valkey.Observe(ctx, conn, p.members, t.Shards, t.ReplicasPerShard)
	if err != nil {
		r.warn(p, ReasonObserveFailed, "Observe", "observing the cluster failed: "+err.Error())
		return done(ctrl.Result{RequeueAfter: r.opts.PollInterval}, nil)
	}
	r.clearWarning(p, ReasonObserveFailed)
	byName := map[string]topology.NodeState{}
	for _, s := range obs.Nodes {
		byName[s.Name] = s
	}
	for _, n := range p.nodes {
		s, ok := byName[n.Name()]
		if !ok || !s.Reachable {
			continue
		}
		if err := r.setNodeStatus(ctx, n, func(st *views.NodeStatus) { st.NodeID, st.Role = s.ID, s.Role }); err != nil {
			return done(ctrl.Result{}, err)
		}
	}
	if len(obs.Problems) > 0 {
		p.log.Info("cluster not healthy yet", "problems", strings.Join(obs.Problems, "; "))
		return done(ctrl.Result{RequeueAfter: r.opts.PollInterval}, nil)
	}
	return nil
}

// activate marks every node Active and the cluster Active, clearing targetSpec.
func (r *Reconciler) activate(ctx context.Context, p *pass) *outcome {
	for _, n := range p.nodes {
		if err := r.setNodeStatus(ctx, n, func(s *views.NodeStatus) { s.Lifecycle = views.LifecycleActive }); err != nil {
			return done(ctrl.Result{}, err)
		}
	}
	if !p.formed {
		t := p.target()
		r.event(p, nil, ReasonClusterFormed, "FormCluster", "Cluster formed: %d shards, %d replicas per shard, all 16384 slots assigned", t.Shards, t.ReplicasPerShard)
	}
	if err := r.setStatus(ctx, p, views.Status{State: views.StateActive}); err != nil {
		return done(ctrl.Result{}, err)
	}
	r.clearWarning(p, ReasonBootstrap)
	return done(ctrl.Result{}, nil)
}
