package reconciler

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// FieldManager is the operator's name in managedFields: the fields it applies are its own,
// and the API server, not hand-written comparisons, decides what drifted.
const FieldManager = "valkey-operator"

// clusterOwner is the controller owner reference to the cluster, as an apply configuration.
func (p *pass) clusterOwner() *metav1ac.OwnerReferenceApplyConfiguration {
	return metav1ac.OwnerReference().
		WithAPIVersion(p.obj.GetAPIVersion()).WithKind(p.obj.GetKind()).
		WithName(p.obj.GetName()).WithUID(p.obj.GetUID()).
		WithController(true).WithBlockOwnerDeletion(true)
}

// ObjectConflictError says that an object the cluster needs exists but belongs to someone
// else. The operator adopts nothing it did not create: it leaves the object untouched.
type ObjectConflictError struct{ Kind, Name string }

func (e *ObjectConflictError) Error() string {
	return fmt.Sprintf("%s %q exists but was not created by this ValkeyCluster; the operator leaves it untouched: delete or rename it", e.Kind, e.Name)
}

// owned describes one object the operator keeps in shape with server-side apply.
type owned[T client.Object, AC runtime.ApplyConfiguration] struct {
	kind string
	name string
	// live is an empty object of the kind, filled by the read.
	live T
	// desire builds what the operator owns of the object; exists says whether live holds
	// the stored object (the auth Secret keeps the passwords it already has).
	desire func(exists bool) (AC, error)
	// extract returns what FieldManager owns of a stored object (client-go's ExtractX).
	extract func(T, string) (AC, error)
}

// apply keeps one owned object in shape. It reads the object
// from the cache and, when the cache does not show it, from the API server (the cache only
// holds labelled objects); an object the cluster does not control is never touched. It
// applies only when the fields the operator manages differ from the desired ones, so an idle
// cluster sends no write at all, not even a no-op apply.
func apply[T client.Object, AC runtime.ApplyConfiguration](ctx context.Context, r *Reconciler, p *pass, o owned[T, AC]) error {
	key := types.NamespacedName{Namespace: p.key.Namespace, Name: o.name}
	err := r.client.Get(ctx, key, o.live)
	if apierrors.IsNotFound(err) {
		err = r.apiReader.Get(ctx, key, o.live)
	}
	exists := err == nil
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	if exists && !metav1.IsControlledBy(o.live, p.obj) {
		return &ObjectConflictError{Kind: o.kind, Name: o.name}
	}
	want, err := o.desire(exists)
	if err != nil {
		return err
	}
	if exists {
		have, err := o.extract(o.live, FieldManager)
		if err != nil {
			return err
		}
		if same, err := jsonEqual(have, want); err != nil || same {
			return err
		}
	}
	if err := r.client.Apply(ctx, want, client.FieldOwner(FieldManager), client.ForceOwnership); err != nil {
		return err
	}
	p.log.Info("applied", "kind", o.kind, "name", o.name, "created", !exists)
	return nil
}

// jsonEqual compares two apply configurations by their JSON form (maps sort their keys).
func jsonEqual(a, b any) (bool, error) {
	ja, err := json.Marshal(a)
	if err != nil {
		return false, err
	}
	jb, err := json.Marshal(b)
	if err != nil {
		return false, err
	}
	return bytes.Equal(ja, jb), nil
}

// applied turns an apply error into the step's outcome: a foreign object blocks the cluster
// with a Warning Event until the user resolves it; anything else is retried.
func (r *Reconciler) applied(p *pass, kind string, err error) *outcome {
	var conflict *ObjectConflictError
	// Each kind keeps its own warning, so one resolved conflict does not re-announce another.
	key := ReasonObjectConflict + "/" + kind
	switch {
	case err == nil:
		p.settle(key)
		return nil
	case errors.As(err, &conflict):
		p.raiseAs(key, ReasonObjectConflict, "Apply"+kind, conflict.Error())
		return done(ctrl.Result{RequeueAfter: r.opts.RecheckInterval}, nil)
	default:
		return done(ctrl.Result{}, err)
	}
}
