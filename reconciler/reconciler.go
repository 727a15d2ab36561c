// Package reconciler drives the ValkeyCluster lifecycle (SPEC §3–§5, the seed's status
// semantics) over unstructured objects. A reconcile is an ordered list of steps; each step
// either lets the pass continue or ends it with a result. Day-2 work (scaling, rolling
// replacement, failover recovery, live ACL/TLS) slots in as further steps after the
// state gate, without rewriting the ones here.
package reconciler

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/gomomento/valkey-operator/reconciler/resolve"
	"github.com/gomomento/valkey-operator/reconciler/settings"
	"github.com/gomomento/valkey-operator/reconciler/tlscheck"
	"github.com/gomomento/valkey-operator/reconciler/topology"
	"github.com/gomomento/valkey-operator/reconciler/views"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// Default intervals; see Options.
const (
	DefaultRecheckInterval = 10 * time.Second
	DefaultPollInterval    = 2 * time.Second
)

// Options configure a Reconciler.
type Options struct {
	Settings settings.Settings
	Valkey   topology.Valkey
	Recorder events.EventRecorder
	// RecheckInterval is how often a blocked cluster (Invalid, missing config or image) is
	// re-checked without any watch event.
	RecheckInterval time.Duration
	// PollInterval is how often bootstrap progress is re-observed while Creating.
	PollInterval time.Duration
	// Random is the entropy source for passwords and node names (nil = crypto/rand).
	Random io.Reader
	// Now is the clock for certificate expiry (nil = time.Now).
	Now func() time.Time
}

// Reconciler reconciles ValkeyClusters.
type Reconciler struct {
	client client.Client
	opts   Options

	// expected holds, per cluster, ValkeyNodes created but not yet visible in the informer
	// cache. Until the cache catches up no further nodes are created, so a stale list can
	// never double a shard.
	mu       sync.Mutex
	expected map[types.NamespacedName]map[string]time.Time
	// warned remembers the last Warning Event per cluster and reason, so a blocked cluster
	// re-checked every few seconds emits one Event per distinct problem, not one per tick.
	warned map[types.NamespacedName]map[string]string

	reconciles atomic.Int64
	perCluster sync.Map // types.NamespacedName -> *atomic.Int64
}

// New returns a Reconciler reading through c (the manager's cache-backed client).
func New(c client.Client, opts Options) *Reconciler {
	if opts.RecheckInterval <= 0 {
		opts.RecheckInterval = DefaultRecheckInterval
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = DefaultPollInterval
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Settings.DefaultZoneSpread == "" {
		opts.Settings = settings.Defaults()
	}
	return &Reconciler{
		client:   c,
		opts:     opts,
		expected: map[types.NamespacedName]map[string]time.Time{},
		warned:   map[types.NamespacedName]map[string]string{},
	}
}

// Settings are the operator settings this reconciler applies.
func (r *Reconciler) Settings() settings.Settings { return r.opts.Settings }

// Reconciles counts reconcile passes (tests use it to prove idle passes really happened).
func (r *Reconciler) Reconciles() int64 { return r.reconciles.Load() }

// ReconcilesOf counts the reconcile passes of one cluster.
func (r *Reconciler) ReconcilesOf(key types.NamespacedName) int64 {
	if c, ok := r.perCluster.Load(key); ok {
		return c.(*atomic.Int64).Load()
	}
	return 0
}

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

	defaultPassword, operatorPassword string

	resolved resolve.Resolved
	formed   bool // every existing node is Active: a previously formed cluster
	nodes    []views.Node
	pods     map[string]*corev1.Pod
	members  []topology.Member
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

func (s step) appliesTo(state string) bool {
	if s.states == nil {
		return true
	}
	for _, st := range s.states {
		if st == state {
			return true
		}
	}
	return false
}

// steps is the ordered reconcile. Maintenance steps run in every state (the seed requires
// Service, auth Secret and ACL ConfigMap to be maintained even while Invalid); the state
// gate then settles the state (ending the pass for Invalid) and the remaining steps run
// only in the state they belong to. Day-2 steps are appended with states = Active.
func (r *Reconciler) steps() []step {
	creating := []string{views.StateCreating}
	return []step{
		{"validate-tls", nil, r.validateTLS},
		{"ensure-service", nil, r.ensureService},
		{"ensure-auth-secret", nil, r.ensureAuthSecret},
		{"ensure-acl", nil, r.ensureACL},
		{"state-gate", nil, r.stateGate},
		{"resolve-config", creating, r.resolveConfig},
		{"ensure-nodes", creating, r.ensureNodes},
		{"ensure-pods", creating, r.ensurePods},
		{"wait-pods", creating, r.waitPods},
		{"form-cluster", creating, r.formCluster},
		{"activate", creating, r.activate},
	}
}

// Reconcile runs the steps for one ValkeyCluster.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	r.reconciles.Add(1)
	c, _ := r.perCluster.LoadOrStore(req.NamespacedName, new(atomic.Int64))
	c.(*atomic.Int64).Add(1)
	lg := log.FromContext(ctx)
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
	p := &pass{key: req.NamespacedName, obj: obj.DeepCopy(), log: lg}
	p.cluster = views.Cluster{U: p.obj}
	p.state = p.cluster.EffectiveState()
	for _, s := range r.steps() {
		if !s.appliesTo(p.state) {
			continue
		}
		if out := s.run(ctx, p); out != nil {
			if out.err != nil {
				if apierrors.IsConflict(out.err) {
					// A newer version is on its way through the cache; retry then.
					return ctrl.Result{RequeueAfter: r.opts.PollInterval}, nil
				}
				return out.result, fmt.Errorf("step %s: %w", s.name, out.err)
			}
			return out.result, nil
		}
	}
	return ctrl.Result{}, nil
}

func (r *Reconciler) forget(key types.NamespacedName) {
	r.mu.Lock()
	delete(r.expected, key)
	delete(r.warned, key)
	r.mu.Unlock()
	if r.opts.Valkey != nil {
		r.opts.Valkey.Release(key)
	}
}

// event records a Normal Event on the cluster. events.k8s.io folds Events with the same
// (regarding, related, reason, action) into one series whatever their note says, so callers
// give distinct happenings a distinct action or related object.
func (r *Reconciler) event(p *pass, related runtime.Object, reason, action, format string, args ...any) {
	if r.opts.Recorder != nil {
		r.opts.Recorder.Eventf(p.obj, related, corev1.EventTypeNormal, reason, action, format, args...)
	}
}

// firstTime remembers msg as the latest for (cluster, reason) and reports whether it differs
// from the one remembered before: idempotent steps re-run every pass, and an Event per pass
// would bury the one that matters.
func (r *Reconciler) firstTime(p *pass, reason, msg string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.warned[p.key]
	if m == nil {
		m = map[string]string{}
		r.warned[p.key] = m
	}
	repeat := m[reason] == msg
	m[reason] = msg
	return !repeat
}

// warn records a Warning Event once per distinct (reason, message) until cleared.
func (r *Reconciler) warn(p *pass, reason, action, msg string) {
	if !r.firstTime(p, reason, msg) {
		return
	}
	p.log.Info("warning", "reason", reason, "message", msg)
	if r.opts.Recorder != nil {
		r.opts.Recorder.Eventf(p.obj, nil, corev1.EventTypeWarning, reason, action, "%s", msg)
	}
}

// clearWarning forgets a warning so that a recurrence is reported again.
func (r *Reconciler) clearWarning(p *pass, reason string) {
	r.mu.Lock()
	delete(r.warned[p.key], reason)
	r.mu.Unlock()
}

// expectTimeout bounds how long a created node may stay invisible in the cache before it is
// no longer waited for (it may have been deleted again before the cache ever saw it).
const expectTimeout = time.Minute

// Event reasons (stable, for `kubectl get events` filters).
const (
	ReasonStateChanged      = "StateChanged"
	ReasonInvalidTLS        = "InvalidTLSSecret"
	ReasonCertExpired       = "CertificateExpired"
	ReasonConfigUnresolved  = "ConfigUnresolved"
	ReasonRoleMissing       = "RoleMissing"
	ReasonNodeCreated       = "NodeCreated"
	ReasonPodCreated        = "PodCreated"
	ReasonBootstrap         = "Bootstrap"
	ReasonBootstrapFailed   = "BootstrapFailed"
	ReasonObserveFailed     = "ObserveFailed"
	ReasonClusterFormed     = "ClusterFormed"
	ReasonSecretUnavailable = "AuthSecretUnavailable"
)

// setStatus writes the cluster status if (and only if) it differs from the stored one, and
// emits a StateChanged Event when the state itself changes.
func (r *Reconciler) setStatus(ctx context.Context, p *pass, want views.Status) error {
	have := p.cluster.Status()
	if have.Equal(want) {
		return nil
	}
	p.cluster.SetStatus(want)
	if err := r.client.Status().Update(ctx, p.obj); err != nil {
		return err
	}
	if have.State != want.State {
		from := have.State
		if from == "" {
			from = "(none)"
		}
		p.log.Info("state changed", "from", from, "to", want.State, "message", want.Message)
		action := strings.Trim(from, "()") + "To" + want.State // e.g. InvalidToCreating
		action = strings.ToUpper(action[:1]) + action[1:]
		if want.Message != "" {
			r.event(p, nil, ReasonStateChanged, action, "State %s -> %s: %s", from, want.State, want.Message)
		} else {
			r.event(p, nil, ReasonStateChanged, action, "State %s -> %s", from, want.State)
		}
	}
	return nil
}

// validateTLS checks the TLS Secret (when TLS is on) in every state; the verdict is acted on
// by the state gate, after the maintenance steps have run.
func (r *Reconciler) validateTLS(ctx context.Context, p *pass) *outcome {
	name := p.cluster.TLSSecretRef()
	if !p.cluster.TLSEnabled() {
		return nil
	}
	sec := &corev1.Secret{}
	found := true
	if err := r.client.Get(ctx, types.NamespacedName{Namespace: p.key.Namespace, Name: name}, sec); err != nil {
		if !apierrors.IsNotFound(err) {
			return done(ctrl.Result{}, err)
		}
		found = false
	}
	res, err := tlscheck.Validate(name, found, sec.Data, p.key.Name, p.key.Namespace, r.opts.Now())
	var inv *tlscheck.InvalidError
	if errors.As(err, &inv) {
		p.tlsInvalid, p.tlsKind = inv.Message, inv.Kind
		return nil
	}
	if err != nil {
		return done(ctrl.Result{}, err)
	}
	p.tlsData = sec.Data
	if res.Expired {
		r.warn(p, ReasonCertExpired, "ValidateTLS", tlscheck.ExpiryWarning(name, res))
	} else {
		r.clearWarning(p, ReasonCertExpired)
	}
	return nil
}

// stateGate applies the seed's state machine. Invalid wins in any state; a passing check
// moves Invalid to Creating with the message cleared; Creating always carries a targetSpec
// snapshot. Active (and Updating, treated as Active) ends the pass: day-2 steps go here.
func (r *Reconciler) stateGate(ctx context.Context, p *pass) *outcome {
	have := p.cluster.Status()
	state := p.cluster.EffectiveState()
	if p.tlsInvalid != "" {
		r.warn(p, ReasonInvalidTLS, "ValidateTLS"+p.tlsKind, p.tlsInvalid)
		want := views.Status{State: views.StateInvalid, Message: p.tlsInvalid, Target: have.Target}
		if err := r.setStatus(ctx, p, want); err != nil {
			return done(ctrl.Result{}, err)
		}
		return done(ctrl.Result{RequeueAfter: r.opts.RecheckInterval}, nil)
	}
	r.clearWarning(p, ReasonInvalidTLS)

	switch state {
	case views.StateInvalid, views.StateCreating:
		want := views.Status{State: views.StateCreating, Target: have.Target}
		if want.Target == nil {
			// Entering Creating: snapshot the topology; later edits wait for Active.
			want.Target = &views.TargetSpec{Shards: p.cluster.Shards(), ReplicasPerShard: p.cluster.ReplicasPerShard()}
		}
		if err := r.setStatus(ctx, p, want); err != nil {
			return done(ctrl.Result{}, err)
		}
		p.state = views.StateCreating
	default:
		// Active (Updating is read as Active). Day-2 steps run after the gate.
		p.state = views.StateActive
	}
	return nil
}

// noteOnce records a Normal Event once until cleared (idempotent steps re-run every pass).
func (r *Reconciler) noteOnce(p *pass, reason, action, msg string) {
	if r.firstTime(p, reason, msg) {
		r.event(p, nil, reason, action, "%s", msg)
	}
}
