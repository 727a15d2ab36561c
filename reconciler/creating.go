package reconciler

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/gomomento/valkey-operator/crds"
	"github.com/gomomento/valkey-operator/reconciler/plan"
	"github.com/gomomento/valkey-operator/reconciler/render"
	"github.com/gomomento/valkey-operator/reconciler/resolve"
	"github.com/gomomento/valkey-operator/reconciler/views"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// cacheLookup resolves menu objects through the informer cache.
type cacheLookup struct{ c client.Reader }

func (l cacheLookup) Config(ctx context.Context, name string) (views.Config, bool, error) {
	u := views.NewConfigObject()
	ok, err := getOptional(ctx, l.c, name, u)
	return views.Config{U: u}, ok, err
}

func (l cacheLookup) Image(ctx context.Context, name string) (views.Image, bool, error) {
	u := views.NewImageObject()
	ok, err := getOptional(ctx, l.c, name, u)
	return views.Image{U: u}, ok, err
}

// getOptional reads a cluster-scoped object into obj; a missing one is (false, nil), since
// the menu may simply not have it yet.
func getOptional(ctx context.Context, c client.Reader, name string, obj client.Object) (bool, error) {
	err := c.Get(ctx, types.NamespacedName{Name: name}, obj)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	return err == nil, err
}

// ownerRef makes owner the controlling owner, so deleting it cascades to the object.
func ownerRef(owner metav1.Object, apiVersion, kind string) metav1.OwnerReference {
	return metav1.OwnerReference{
		APIVersion: apiVersion, Kind: kind, Name: owner.GetName(), UID: owner.GetUID(),
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
	}
}

// target is the topology this Creating pass builds: the targetSpec snapshot (the live spec
// only for a status the state gate has not written yet).
func (p *pass) target() views.TargetSpec {
	if t := p.cluster.Status().Target; t != nil {
		return *t
	}
	return views.TargetSpec{Shards: p.cluster.Shards(), ReplicasPerShard: p.cluster.ReplicasPerShard()}
}

// resolveConfig resolves configRef -> ValkeyConfig chain -> ValkeyImage into p.resolved (the
// Active phase calls it too, before it creates nodes). A missing or cyclic reference keeps
// the cluster where it is with a Warning Event; creating the object unblocks it through the
// watches, without a spec edit.
func (r *Reconciler) resolveConfig(ctx context.Context, p *pass) *outcome {
	res, err := resolve.Resolve(ctx, cacheLookup{r.client}, p.cluster.ConfigRef())
	var (
		missingConfig *resolve.MissingConfigError
		cycle         *resolve.CycleError
		noImage       *resolve.NoImageError
		missingImage  *resolve.MissingImageError
		persistence   *resolve.PersistenceConflictError
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
	case errors.As(err, &persistence):
		action = "ResolveConfigPersistenceConflict"
	}
	switch {
	case action != "":
		p.raise(ReasonConfigUnresolved, action, "cannot resolve configRef "+strconv.Quote(p.cluster.ConfigRef())+": "+err.Error())
		return done(ctrl.Result{RequeueAfter: r.opts.RecheckInterval}, nil)
	case err != nil:
		return done(ctrl.Result{}, err)
	}
	p.settle(ReasonConfigUnresolved)
	p.resolved = res
	return nil
}

// passFormed lets a previously formed cluster (every node Active) that re-enters Creating pass
// through as a no-op, as docs/status.md says: it goes straight back to Active, where the Active
// phase heals whatever changed meanwhile (a bootstrap would not: it cannot tell a lost node
// from one never created).
func (r *Reconciler) passFormed(ctx context.Context, p *pass) *outcome {
	if !p.formed {
		return nil
	}
	return r.activate(ctx, p)
}

func (r *Reconciler) createNode(ctx context.Context, p *pass, shard int, taken map[string]bool) (views.Node, error) {
	spec := render.NodeSpec(p.cluster, shard, p.resolved, r.opts.Settings.DefaultZoneSpread)
	spec.Restore = p.restoreFor(shard, r.opts.RestoreImage)
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
		u.SetOwnerReferences([]metav1.OwnerReference{ownerRef(p.obj, p.obj.GetAPIVersion(), p.obj.GetKind())})
		n := views.Node{U: u}
		n.SetSpec(spec)
		if err := r.client.Create(ctx, u); err != nil {
			if apierrors.IsAlreadyExists(err) && attempt < 5 {
				continue
			}
			return views.Node{}, err
		}
		r.expect(p, name, true)
		n.SetStatus(views.NodeStatus{Lifecycle: views.LifecycleJoining})
		if err := r.client.Status().Update(ctx, u); err != nil {
			return views.Node{}, err
		}
		if spec.Restore != nil {
			if p.restoreGiven == nil {
				p.restoreGiven = map[int]bool{}
			}
			p.restoreGiven[shard] = true
		}
		p.log.Info("created ValkeyNode", "node", name, "shard", shard, "image", spec.Image)
		r.event(p, u, ReasonNodeCreated, "CreateNode", "Created ValkeyNode %s for shard %d (image %s)", name, shard, spec.Image)
		return n, nil
	}
}

// ensurePods creates the Pod of every node that has none, from the node's fixed spec.
func (r *Reconciler) ensurePods(ctx context.Context, p *pass) *outcome {
	return r.podsCreated(p, r.createPodsAtOnce(ctx, p, p.nodes))
}

// createPodsAtOnce is createPods for a cluster being created: the pods go out several at
// once (inParallel). Each is two API round trips (ConfigMap, Pod) and the new nodes do not
// depend on each other, while formation waits for the slowest pod: one after the other, the
// last pod started a round trip per node later than it had to (issue #14). The Active phase
// keeps createPods, whose writes are one step of its one-action-at-a-time timeline.
func (r *Reconciler) createPodsAtOnce(ctx context.Context, p *pass, nodes []views.Node) error {
	missing := podless(p, nodes)
	annotations := p.cluster.PodAnnotations()
	return inParallel(len(missing), func(i int) error { return r.createPod(ctx, p, missing[i], annotations) })
}

// createPods creates the Pod of each of nodes that has none, one after the other.
func (r *Reconciler) createPods(ctx context.Context, p *pass, nodes []views.Node) error {
	annotations := p.cluster.PodAnnotations()
	for _, n := range podless(p, nodes) {
		if err := r.createPod(ctx, p, n, annotations); err != nil {
			return err
		}
	}
	return nil
}

// podless lists the nodes that have no pod in this pass.
func podless(p *pass, nodes []views.Node) []views.Node {
	var out []views.Node
	for _, n := range nodes {
		if p.pods[n.Name()] == nil {
			out = append(out, n)
		}
	}
	return out
}

// createPod creates node n's config ConfigMap and then its Pod.
func (r *Reconciler) createPod(ctx context.Context, p *pass, n views.Node, annotations map[string]string) error {
	owner := nodeOwner(n)
	if err := r.createNodeConfig(ctx, n, owner); err != nil {
		return err
	}
	if n.Spec().Persistence.Durable() {
		if err := r.ensureClaim(ctx, p, n, owner); err != nil {
			return err
		}
	}
	// The exporter's password file is rendered from the login (ensureAuthSecret), which
	// cannot change before this pod's volumes are mounted: a new login is recorded only
	// once every node is a ready server.
	spec := podSpec(n)
	pod := render.Pod(n.Name(), p.key.Namespace, spec, render.PodAnnotations(annotations, spec, p.operatorPassword))
	pod.OwnerReferences = []metav1.OwnerReference{owner}
	if err := r.client.Create(ctx, pod); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	}
	p.log.Info("created Pod", "pod", pod.Name)
	r.event(p, pod, ReasonPodCreated, "CreatePod", "Created Pod %s for ValkeyNode %s", pod.Name, n.Name())
	return nil
}

// podSpec is the node spec n's pod is rendered from: the node's fixed spec, less the
// snapshot to fetch once the node has served. Its pod made anew then (a durable node
// restarted on its volume) starts from its own data. A node whose status was never written
// has not served (views.Node.Status reads it as Joining): its pod still fetches.
func podSpec(n views.Node) views.NodeSpec {
	spec := n.Spec()
	if n.Status().Lifecycle != views.LifecycleJoining {
		spec.Restore = nil
	}
	return spec
}

// writeConcurrency bounds the API writes one pass makes at once (inParallel): enough for
// the pods of a few shards at once, few enough that one large cluster does not crowd the
// operator's other clusters out of the API server's fairness queues.
const writeConcurrency = 8

// inParallel runs fn(0..n-1), at most writeConcurrency at a time, and joins their errors.
// fn must touch only what belongs to item i (and pass-wide state that is safe for
// concurrent use: the client, the logger, Events).
func inParallel(n int, fn func(i int) error) error {
	errs := make([]error, n)
	sem := make(chan struct{}, writeConcurrency)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			errs[i] = fn(i)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// nodeOwner is the controller owner reference to node n: what it owns goes with it.
func nodeOwner(n views.Node) metav1.OwnerReference {
	return ownerRef(n.U, crds.Group+"/"+crds.Version, crds.KindNode)
}

// createNodeConfig creates the ConfigMap holding node n's valkey.conf, owned by n (so it goes
// with the node), before its pod, which mounts it. The file follows from the node's fixed
// spec, so it is written once; one found already is accepted only if n controls it: the
// operator adopts nothing it did not create.
func (r *Reconciler) createNodeConfig(ctx context.Context, n views.Node, owner metav1.OwnerReference) error {
	cm := render.NodeConfigMap(n.Name(), n.U.GetNamespace(), n.Spec())
	cm.OwnerReferences = []metav1.OwnerReference{owner}
	err := r.client.Create(ctx, cm)
	if !apierrors.IsAlreadyExists(err) {
		return err
	}
	live := &corev1.ConfigMap{}
	if err := r.apiReader.Get(ctx, client.ObjectKeyFromObject(cm), live); err != nil {
		return err
	}
	if !metav1.IsControlledBy(live, n.U) {
		return &ObjectConflictError{Kind: "ConfigMap", Name: cm.Name}
	}
	return nil
}

// observeForming connects to and observes the servers of a cluster being formed once it has
// nodes and every node's pod is ready: until then the planner creates nodes or waits for the
// pods, and dialling the servers that are up would only be work done again.
func (r *Reconciler) observeForming(ctx context.Context, p *pass) *outcome {
	p.members = nil
	for _, n := range p.nodes {
		if pod := p.pods[n.Name()]; pod != nil {
			if st, _ := podState(pod); st == plan.PodReady {
				p.members = append(p.members, valkeyNode(n.Name(), pod.Status.PodIP, n.Shard()))
			}
		}
	}
	if len(p.nodes) == 0 || len(p.members) < len(p.nodes) {
		return nil
	}
	if out := r.connect(ctx, p); out != nil {
		return out
	}
	return r.observe(ctx, p, reading{})
}

// formingTarget is the topology a Creating pass forms: the targetSpec snapshot, except that
// a cluster restored from a backup forms with the backup's shard count (the Active phase
// then scales it to spec.shards, moving slots with their keys).
func (p *pass) formingTarget() views.TargetSpec {
	t := p.target()
	if p.restore != nil {
		t.Shards = p.restore.shards()
	}
	return t
}

// planForming forms the cluster from the targetSpec snapshot with the topology planner in its
// forming mode (plan/forming.go), performing what it plans with the Active phase's own
// operations. Creating reports in its own terms (docs/status.md): pods that cannot be
// scheduled, a bootstrap that failed, the cluster formed. After a bootstrap the servers are
// observed again and planned in the same pass, so a cluster that formed turns Active at once.
func (r *Reconciler) planForming(ctx context.Context, p *pass) *outcome {
	t := p.formingTarget()
	for bootstrapped := false; ; bootstrapped = true {
		o := r.observed(p, t.Shards, t.ReplicasPerShard)
		o.Forming, o.Hash = true, r.liveHash(p)
		a := plan.Next(o)
		if a.Kind != plan.Wait || !a.Warning {
			p.settle(ReasonPodsUnschedulable)
		}
		switch a.Kind {
		case plan.Wait:
			if a.Warning {
				p.raise(ReasonPodsUnschedulable, "SchedulePods", a.Reason)
			}
			return done(ctrl.Result{RequeueAfter: r.opts.RecheckInterval}, nil)
		case plan.Delete:
			return r.replaceStopped(ctx, p, a.Node)
		case plan.CreateNodes:
			if err := r.createNodes(ctx, p, a.Shards, true); err != nil {
				return r.applied(p, "NodeConfigMap", err)
			}
			return done(ctrl.Result{RequeueAfter: r.opts.RecheckInterval}, nil)
		case plan.Join:
			if bootstrapped {
				p.log.Info("cluster not healthy yet", "problems", a.Reason)
				return done(ctrl.Result{RequeueAfter: r.opts.PollInterval}, nil)
			}
			if loading := p.loadingShards(); len(loading) > 0 {
				p.log.Info("waiting for restored servers to load their snapshot", "nodes", loading)
				return done(ctrl.Result{RequeueAfter: restoreLoadingPoll}, nil)
			}
			if out := r.bootstrap(ctx, p, t); out != nil {
				return out
			}
		case plan.MarkActive:
			r.reportRestored(p)
			return r.activate(ctx, p)
		default:
			return done(ctrl.Result{}, fmt.Errorf("forming planned %q", a.Kind))
		}
	}
}

// replaceStopped deletes a node of a forming cluster whose server stopped and whose config
// has changed since (a ValkeyConfig fixed after its servers refused it); the next pass creates
// its replacement from the fixed config. Nothing is lost: the cluster has not formed, so no
// node holds data.
func (r *Reconciler) replaceStopped(ctx context.Context, p *pass, name string) *outcome {
	n, err := p.node(name)
	if err != nil {
		return done(ctrl.Result{}, err)
	}
	if err := r.deleteNode(ctx, p, n); err != nil {
		return done(ctrl.Result{}, err)
	}
	r.event(p, n.U, ReasonNodeRetired, "ReplaceStoppedNode",
		"Deleted ValkeyNode %s of shard %d: its server stopped and its config has changed since; a new node takes its place", n.Name(), n.Shard())
	return done(ctrl.Result{RequeueAfter: nextActionDelay}, nil)
}

// bootstrap runs valkeyops' idempotent Bootstrap of every node and observes the servers
// again; an outcome ends the pass.
func (r *Reconciler) bootstrap(ctx context.Context, p *pass, t views.TargetSpec) *outcome {
	if at := p.certExpiredAt(r.opts.Now()); !at.IsZero() {
		// The servers would never meet: bootstrap waits for a renewed certificate.
		p.raise(ReasonBootstrapFailed, "Bootstrap", "bootstrap waits: "+expiryNote(p.cluster.TLSSecretRef(), at))
		return done(ctrl.Result{RequeueAfter: r.opts.RecheckInterval}, nil)
	}
	var err error
	if p.restore != nil {
		err = p.valkey.Topology.BootstrapSlots(ctx, p.members, t.Shards, p.restore.layout)
	} else {
		err = p.valkey.Topology.Bootstrap(ctx, p.members, t.Shards)
	}
	if err != nil {
		p.raise(ReasonBootstrapFailed, "Bootstrap", "bootstrap failed: "+err.Error())
		return done(ctrl.Result{RequeueAfter: r.opts.PollInterval}, nil)
	}
	p.settle(ReasonBootstrapFailed)
	r.noteOnce(p, ReasonBootstrap, "Bootstrap", "Bootstrapped "+strconv.Itoa(t.Shards)+" shards x "+strconv.Itoa(t.ReplicasPerShard)+" replicas over "+strconv.Itoa(len(p.members))+" nodes")
	return r.observe(ctx, p, reading{})
}

// activate marks every node Active and the cluster Active, clearing targetSpec. The node
// writes are independent and go out together (inParallel); only the cluster's own status,
// which users and tools wait on, comes after all of them.
func (r *Reconciler) activate(ctx context.Context, p *pass) *outcome {
	if err := inParallel(len(p.nodes), func(i int) error {
		return r.setNodeStatus(ctx, p.nodes[i], func(s *views.NodeStatus) { s.Lifecycle = views.LifecycleActive })
	}); err != nil {
		return done(ctrl.Result{}, err)
	}
	if !p.formed {
		t := p.formingTarget()
		r.event(p, nil, ReasonClusterFormed, "FormCluster", "Cluster formed: %d shards, %d replicas per shard, all 16384 slots assigned", t.Shards, t.ReplicasPerShard)
	}
	if err := r.setStatus(ctx, p, views.Status{State: views.StateActive}); err != nil {
		return done(ctrl.Result{}, err)
	}
	p.settle(ReasonBootstrap)
	// The Active phase takes over from the next pass.
	return done(ctrl.Result{RequeueAfter: r.opts.PollInterval}, nil)
}
