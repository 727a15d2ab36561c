// Package reconciler drives the ValkeyCluster lifecycle (the states and messages of
// docs/status.md, the day-2 work of docs/day2.md) over unstructured objects. A reconcile is an
// ordered list of steps; each step either lets the pass continue or ends it with a result. The
// files follow the phases: this one is the step engine; events.go the Event de-duplication;
// state.go the TLS check, the state gate (docs/status.md) and status writes; maintain.go and
// apply.go the owned objects kept in every state; members.go the ValkeyNodes and pods of a
// pass; creating.go the formation and active.go the day-2 phase, whose next action the pure
// planner in plan/ decides in both; live_acl.go the live ACL and password rotation of the
// Active phase; valkey.go the one boundary with the Valkey servers.
package reconciler

import (
	"context"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/go-logr/logr"
	"github.com/gomomento/valkey-operator/reconciler/plan"
	"github.com/gomomento/valkey-operator/reconciler/resolve"
	"github.com/gomomento/valkey-operator/reconciler/settings"
	"github.com/gomomento/valkey-operator/reconciler/views"
	"github.com/gomomento/valkey-operator/valkeyops"
	"github.com/gomomento/valkey-operator/valkeyops/model"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// Default intervals; see Options. DefaultActivePeriod is what an idle fleet costs its servers:
// each period every server of every converged cluster answers one observation (CLUSTER
// NODES, CLUSTER INFO, INFO), which at 30 s is 6 commands a minute. Waiting longer between
// them delays nothing the operator acts on promptly: a pod or ValkeyNode change starts a
// pass at once, and every action in progress polls at PollInterval.
const (
	DefaultRecheckInterval = 10 * time.Second
	DefaultPollInterval    = 2 * time.Second
	DefaultActivePeriod    = 30 * time.Second
)

// Metrics is told what every pass saw and did. The operator's metrics endpoint implements
// it (package metrics); tests count passes with it to prove an idle window really contained
// reconciles.
type Metrics interface {
	// ReconcileDone reports a finished pass: the step that ended it ("" when every step
	// ran), how long it took and its error.
	ReconcileDone(cluster types.NamespacedName, endedAt string, took time.Duration, err error)
	// ClusterSeen reports what a pass saw of a cluster that exists.
	ClusterSeen(cluster types.NamespacedName, r ClusterReport)
	// ActionDone reports one topology action of an Active cluster and how it ended.
	ActionDone(cluster types.NamespacedName, kind string, err error)
	// Moved reports the slots and keys one slot move carried to other primaries.
	Moved(cluster types.NamespacedName, moved valkeyops.MoveStats)
	// ClusterGone reports a cluster deleted: its series go.
	ClusterGone(cluster types.NamespacedName)
}

// ClusterReport is what one pass saw of a cluster.
type ClusterReport struct {
	State                    string
	Shards, ReplicasPerShard int
	// Nodes counts ValkeyNodes by lifecycle; nil when the pass did not load them (Invalid).
	Nodes map[string]int
	// ReadyNodes counts the nodes whose pods are ready, SlotsAssigned the slots the servers
	// see assigned (the most any reachable server sees); -1 when the pass did not look.
	ReadyNodes, SlotsAssigned int
	// CertNotAfter is when the TLS certificate expires (zero without TLS or a valid one).
	CertNotAfter time.Time
}

// report is what the pass saw, for Metrics.
func (p *pass) report() ClusterReport {
	rep := ClusterReport{State: p.state, Shards: p.cluster.Shards(), ReplicasPerShard: p.cluster.ReplicasPerShard(),
		ReadyNodes: -1, SlotsAssigned: -1, CertNotAfter: p.certNotAfter}
	if p.nodesLoaded {
		rep.Nodes = map[string]int{}
		for _, n := range p.nodes {
			rep.Nodes[n.Status().Lifecycle]++
		}
		rep.ReadyNodes = len(p.members)
	}
	if snap := p.snapshot(); snap != nil {
		rep.SlotsAssigned = 0
		for _, st := range snap.Nodes {
			if st.Reachable {
				rep.SlotsAssigned = max(rep.SlotsAssigned, st.SlotsAssigned)
			}
		}
	}
	return rep
}

// Options configure a Reconciler.
type Options struct {
	Settings settings.Settings
	Valkey   Valkey
	Recorder events.EventRecorder
	Metrics  Metrics // nil = none
	// RecheckInterval is how often a blocked cluster (Invalid, missing config or image) is
	// re-checked without any watch event.
	RecheckInterval time.Duration
	// PollInterval is how often progress is re-observed while an action is under way.
	PollInterval time.Duration
	// ActivePeriod is how often a converged Active cluster is observed without any event.
	ActivePeriod time.Duration
	// SlowStart is how long a new pod may take to turn ready before the wait for it is a
	// TopologyStalled Warning Event (0 = plan.SlowStart).
	SlowStart time.Duration
	// Random is the entropy source for passwords and node names (nil = crypto/rand).
	Random io.Reader
	// Now is the clock for certificate expiry (nil = time.Now).
	Now func() time.Time
	// RestoreImage is the operator's image, which a restoring cluster's pods run to fetch
	// their shard's snapshot (render.RestoreFetchContainer); empty refuses restores.
	RestoreImage string
}

// Reconciler reconciles ValkeyClusters.
type Reconciler struct {
	client client.Client
	// apiReader reads around the cache: objects the label-filtered cache cannot show (a
	// same-named object the operator did not create) are checked there before any write.
	apiReader client.Reader
	opts      Options

	// memory is what the reconciler keeps of each cluster between passes (memory.go).
	memory memory
}

// New returns a Reconciler reading through c (the manager's cache-backed client) and
// apiReader (uncached; nil = c).
func New(c client.Client, apiReader client.Reader, opts Options) *Reconciler {
	if opts.RecheckInterval <= 0 {
		opts.RecheckInterval = DefaultRecheckInterval
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = DefaultPollInterval
	}
	if opts.ActivePeriod <= 0 {
		opts.ActivePeriod = DefaultActivePeriod
	}
	if opts.SlowStart <= 0 {
		opts.SlowStart = plan.SlowStart
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Settings.DefaultZoneSpread == "" {
		opts.Settings = settings.Defaults()
	}
	if apiReader == nil {
		apiReader = c
	}
	return &Reconciler{client: c, apiReader: apiReader, opts: opts}
}

// Settings are the operator settings this reconciler applies.
func (r *Reconciler) Settings() settings.Settings { return r.opts.Settings }

// pass is the state of one reconcile, filled in step by step.
type pass struct {
	key     types.NamespacedName
	obj     *unstructured.Unstructured // a private copy of the cached cluster
	cluster views.Cluster
	log     logr.Logger
	// state is the effective state; the state gate settles it for the steps after it.
	state string

	tlsData    map[string][]byte // the validated TLS Secret's data, nil without TLS
	tlsInvalid string            // status.message when the TLS Secret fails validation
	tlsKind    string            // the tlscheck failure kind

	// operatorPassword is the one the operator logs in with (every server accepts it);
	// operatorPasswordWanted is the auth Secret's, which differs while a rotation to it is
	// under way (live_acl.go). acl is the ACL every server should hold.
	defaultPassword, operatorPassword, operatorPasswordWanted string
	acl                                                       model.ACLSpec

	nodes    []views.Node                             // the cluster's ValkeyNodes, by shard then name
	pods     map[string]*corev1.Pod                   // their pods by name
	claims   map[string]*corev1.PersistentVolumeClaim // the cluster's data claims by name (volumes.go)
	formed   bool                                     // every existing node is Active: a formed cluster
	resolved resolve.Resolved                         // configRef resolved to settings and image
	members  []model.Node                             // the nodes whose pods are ready, as valkeyops sees them
	valkey   *Servers                                 // the cluster's servers, once connected
	seen     *observation                             // what this pass read of the servers (observe.go)
	// restore is the backup a cluster created from one forms from (restore.go), nil
	// otherwise and outside Creating; restoreGiven are the shards whose first node this
	// pass created with the shard's snapshot.
	restore      *restoring
	restoreGiven map[int]bool
	// nodesLoaded: load-members ran (nodes and members are this pass's).
	nodesLoaded bool
	// maintenance: the Kubernetes nodes running the pass's pods, true for those in
	// maintenance (maintenance.go).
	maintenance map[string]bool
	// zones: the zone label of those Kubernetes nodes, by name ("" without one; zones.go).
	zones map[string]string
	// nodeAddrs: the address of those Kubernetes nodes clients outside reach a NodePort at,
	// by name ("" without one; external.go).
	nodeAddrs map[string]string
	// external is the client address each node's external Service offers, by ValkeyNode
	// name, and externalClear whether servers are to stop announcing one (external.go).
	external      map[string]model.ClientAddress
	externalClear bool
	// certNotAfter is when the validated TLS certificate expires (zero without TLS).
	certNotAfter time.Time
	// servedExpired is the earliest NotAfter of an expired certificate that a node still
	// serves after this pass's rotation step (zero if none): a Secret already renewed whose
	// new files a node has not loaded yet (tlsexpiry.go).
	servedExpired time.Time

	// problems are the Warnings the steps raised and settled, in order (events.go).
	problems []problem

	// requeue, when set, is how soon a step wants the next pass without ending this one
	// (requeueWithin): it waits on something outside the API, such as a kubelet refreshing a
	// pod's volume, and the steps after it still run.
	requeue time.Duration
}

// requeueWithin asks for the next pass within d at the latest.
func (p *pass) requeueWithin(d time.Duration) {
	if p.requeue == 0 || d < p.requeue {
		p.requeue = d
	}
}

// sooner shortens res to the pass's own requeue request, if that comes first.
func (p *pass) sooner(res ctrl.Result) ctrl.Result {
	if p.requeue > 0 && (res.RequeueAfter == 0 || p.requeue < res.RequeueAfter) {
		res.RequeueAfter = p.requeue
	}
	return res
}

// outcome ends a pass early; a nil outcome lets the next step run.
type outcome struct {
	result ctrl.Result
	err    error
}

func done(res ctrl.Result, err error) *outcome { return &outcome{result: res, err: err} }

// step is one unit of the reconcile. states limits it to passes whose (gated) state is one
// of those listed; nil means every state.
type step struct {
	name   string
	states []string
	run    func(context.Context, *pass) *outcome
}

// steps is the ordered reconcile. Maintenance steps run in every state (docs/status.md: the
// Service, auth Secret and ACL ConfigMap are maintained even while Invalid); the state gate
// then settles the state (ending the pass for Invalid) and the remaining steps run only in the
// state they belong to. An Active pass ends with one observation of the servers and the
// concerns that plan from it (concerns.go).
func (r *Reconciler) steps() []step {
	creating := []string{views.StateCreating}
	active := []string{views.StateActive}
	both := []string{views.StateCreating, views.StateActive}
	steps := []step{
		{"validate-tls", nil, r.validateTLS},
		{"ensure-service", nil, r.ensureService},
		{"ensure-auth-secret", nil, r.ensureAuthSecret},
		{"ensure-acl", nil, r.ensureACL},
		{"state-gate", nil, r.stateGate},
		{"load-members", both, r.loadMembers},
		{"ensure-budgets", both, r.ensureBudgets},
		{"report-rejected-settings", both, r.reportRejectedSettings},
		{"report-unbound-claims", both, r.reportUnboundClaims},
		{"pass-formed", creating, r.passFormed},
		{"resolve-config", creating, r.resolveConfig},
		{"prepare-restore", creating, r.prepareRestore},
		{"ensure-pods", creating, r.ensurePods},
		{"observe-forming", creating, r.observeForming},
		{"plan-formation", creating, r.planForming},
		{"ensure-joining-pods", active, r.ensureActivePods},
		{"pod-annotations", active, r.ensurePodAnnotations},
		{"ensure-external", both, r.ensureExternal},
		{"observe", active, r.observeActive},
	}
	for _, c := range r.concerns() {
		steps = append(steps, step{c.name, active, c.act})
	}
	return steps
}

// Reconcile runs the steps for one ValkeyCluster.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, err error) {
	start, endedAt := time.Now(), ""
	if r.opts.Metrics != nil {
		defer func() { r.opts.Metrics.ReconcileDone(req.NamespacedName, endedAt, time.Since(start), err) }()
	}
	obj := views.NewClusterObject()
	if err := r.client.Get(ctx, req.NamespacedName, obj); err != nil {
		if apierrors.IsNotFound(err) {
			r.forget(req.NamespacedName)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	if obj.GetDeletionTimestamp() != nil {
		// Owner references cascade the deletion; nothing to do but drop connections.
		r.forget(req.NamespacedName)
		return ctrl.Result{}, nil
	}
	p := &pass{key: req.NamespacedName, obj: obj.DeepCopy(), log: log.FromContext(ctx)}
	if r.opts.Metrics != nil {
		defer func() { r.opts.Metrics.ClusterSeen(req.NamespacedName, p.report()) }()
	}
	defer r.reportProblems(p)
	p.cluster = views.Cluster{U: p.obj}
	p.state = p.cluster.EffectiveState()
	for _, s := range r.steps() {
		if s.states != nil && !slices.Contains(s.states, p.state) {
			continue
		}
		out := s.run(ctx, p)
		if out == nil {
			continue
		}
		endedAt = s.name
		if out.err != nil {
			if apierrors.IsConflict(out.err) {
				// A newer version is on its way through the cache; retry then.
				return ctrl.Result{RequeueAfter: r.opts.PollInterval}, nil
			}
			return out.result, fmt.Errorf("step %s: %w", s.name, out.err)
		}
		return p.sooner(out.result), nil
	}
	return p.sooner(ctrl.Result{}), nil
}

// forget drops what the reconciler remembers of a cluster that is gone.
func (r *Reconciler) forget(key types.NamespacedName) {
	r.memory.forget(key)
	if r.opts.Metrics != nil {
		r.opts.Metrics.ClusterGone(key)
	}
	if r.opts.Valkey != nil {
		r.opts.Valkey.Release(key)
	}
}
