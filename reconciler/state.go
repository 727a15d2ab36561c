package reconciler

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/gomomento/valkey-operator/reconciler/tlscheck"
	"github.com/gomomento/valkey-operator/reconciler/views"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
)

// validateTLS checks the TLS Secret (when TLS is on) in every state; the verdict is acted on
// by the state gate, after the maintenance steps have run.
func (r *Reconciler) validateTLS(ctx context.Context, p *pass) *outcome {
	if !p.cluster.TLSEnabled() {
		return nil
	}
	name := p.cluster.TLSSecretRef()
	sec := &corev1.Secret{}
	found := true
	// A direct read: the user's Secret is not in the operator's label-filtered cache.
	if err := r.apiReader.Get(ctx, types.NamespacedName{Namespace: p.key.Namespace, Name: name}, sec); err != nil {
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
	if res.Leaf != nil {
		p.certNotAfter = res.Leaf.NotAfter
	}
	if res.Expired {
		p.raise(ReasonCertExpired, "ValidateTLS", tlscheck.ExpiryWarning(name, res))
	} else {
		p.settle(ReasonCertExpired)
		// Looked at again when it expires, not up to an Active period later. Only a near
		// expiry is scheduled: a far NotAfter (RFC 5280's 9999-12-31) saturates Sub, and one
		// second more would overflow into a negative requeue.
		if until := res.Leaf.NotAfter.Sub(r.opts.Now()); until < 24*time.Hour {
			p.requeueWithin(until + time.Second)
		}
	}
	return nil
}

// stateGate applies the state machine of docs/status.md. Invalid wins in any state; a passing
// check moves Invalid to Creating with the message cleared; Creating always carries a
// targetSpec snapshot. Active (and Updating, treated as Active) continues with the Active
// phase.
func (r *Reconciler) stateGate(ctx context.Context, p *pass) *outcome {
	have := p.cluster.Status()
	if p.tlsInvalid != "" {
		p.raise(ReasonInvalidTLS, "ValidateTLS"+p.tlsKind, p.tlsInvalid)
		want := views.Status{State: views.StateInvalid, Message: p.tlsInvalid, Target: have.Target}
		if err := r.setStatus(ctx, p, want); err != nil {
			return done(ctrl.Result{}, err)
		}
		return done(ctrl.Result{RequeueAfter: r.opts.RecheckInterval}, nil)
	}
	p.settle(ReasonInvalidTLS)

	switch p.state { // the effective state: Updating reads as Active
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
		p.state = views.StateActive
	}
	return nil
}

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
	if have.State == want.State {
		return nil
	}
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
	return nil
}
