package reconciler

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"

	"github.com/gomomento/valkey-operator/reconciler/plan"
	"github.com/gomomento/valkey-operator/reconciler/views"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Requests: a user asks for a failover or a rebalance through the cluster's request
// annotation (views.RequestAnnotation, set by `kubectl valkey`); the planner answers it
// (plan.AnswerRequest) and the reconciler removes the annotation, records the answer as an
// Event (reasons in events.go), and carries the action out with the same code as a planned
// one. Without the annotation nothing here reads or writes anything.

// answerRequest answers the cluster's standing request, if any, before the planner's own
// action. The annotation is removed first: a request is carried out at most once, even when
// the operator stops half-way (a failover done twice would move the primary back). It
// returns nil when the pass goes on to plan as usual.
func (r *Reconciler) answerRequest(ctx context.Context, p *pass, o plan.Observed) *outcome {
	raw := p.cluster.Request()
	if raw == "" {
		return nil
	}
	var ans plan.Answer
	req, err := views.ParseRequest(raw)
	if err != nil {
		ans.Refused = err.Error()
	} else {
		ans = plan.AnswerRequest(o, plan.Request{Failover: req.Node, Rebalance: req.Kind == views.RequestRebalance})
	}
	verdict, why := views.AnswerAccepted, fmt.Sprintf("%s %s", ans.Action.Kind, ans.Action.Reason)
	switch {
	case ans.Refused != "":
		verdict, why = views.AnswerRefused, ans.Refused
	case ans.Note != "":
		verdict, why = views.AnswerNothing, ans.Note
	}
	if out := r.reply(ctx, p, raw, req.Kind, verdict, why); out != nil || verdict != views.AnswerAccepted {
		return out
	}
	return r.act(ctx, p, ans.Action)
}

// refuseRequest refuses the cluster's standing request, if any, for a reason found before
// planning (a slot move running in the background, during which nothing is planned).
func (r *Reconciler) refuseRequest(ctx context.Context, p *pass, why string) *outcome {
	raw := p.cluster.Request()
	if raw == "" {
		return nil
	}
	req, _ := views.ParseRequest(raw)
	return r.reply(ctx, p, raw, req.Kind, views.AnswerRefused, why)
}

// reply removes the request and records the answer (annotation and Event). It returns nil
// once answered; an outcome when the pass must end (the cluster changed meanwhile: the next
// pass answers the newer request).
func (r *Reconciler) reply(ctx context.Context, p *pass, raw, kind, verdict, why string) *outcome {
	if err := r.clearRequest(ctx, p, views.FormatAnswer(verdict, raw, why)); err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			return done(ctrl.Result{RequeueAfter: nextActionDelay}, nil)
		}
		return done(ctrl.Result{}, err)
	}
	eventType, reason := corev1.EventTypeNormal, ReasonRequest
	if verdict == views.AnswerRefused {
		eventType, reason = corev1.EventTypeWarning, ReasonRequestRefused
	}
	r.answer(p, eventType, reason, kind, fmt.Sprintf("request %q %s: %s", raw, verdict, why))
	return nil
}

// clearRequest removes the request annotation and records the answer beside it, on the
// condition that the cluster is still the one this pass read (its resourceVersion), so a
// request set meanwhile is never lost.
func (r *Reconciler) clearRequest(ctx context.Context, p *pass, answer string) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"resourceVersion": p.cluster.U.GetResourceVersion(),
		"annotations":     map[string]any{views.RequestAnnotation: nil, views.RequestAnswerAnnotation: answer},
	}})
	if err != nil {
		return err
	}
	u := views.NewClusterObject()
	u.SetNamespace(p.key.Namespace)
	u.SetName(p.key.Name)
	if err := r.client.Patch(ctx, u, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return err
	}
	p.log.Info("answered request", "answer", answer)
	return nil
}

// answer records the answer to a request as an Event. events.k8s.io folds Events with the same
// reason and action into one series whatever their note says, so the action carries a digest
// of the note: a different answer is an Event of its own. (The plugin reads the answer
// annotation instead: a repeated identical Event reaches the API server only minutes later.)
func (r *Reconciler) answer(p *pass, eventType, reason, kind, note string) {
	if kind == "" {
		kind = "request"
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(note))
	if r.opts.Recorder != nil {
		r.opts.Recorder.Eventf(p.obj, nil, eventType, reason, fmt.Sprintf("%s-%08x", kind, h.Sum32()), "%s", note)
	}
}
