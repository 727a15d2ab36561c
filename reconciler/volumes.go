package reconciler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gomomento/valkey-operator/reconciler/render"
	"github.com/gomomento/valkey-operator/reconciler/views"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// A durable node (a persistence mode other than None) keeps its data and nodes.conf on a
// PersistentVolumeClaim of its own, made just before its first pod (ensureClaim) and kept in
// line with the live config afterwards (reconcileVolumes): what becomes of it when its node
// goes (reclaim) and its size. docs/persistence.md says what a user sees.

// defaultClassAnnotations mark a cluster's default StorageClass (the beta key is still set by
// some installers).
var defaultClassAnnotations = []string{
	"storageclass.kubernetes.io/is-default-class",
	"storageclass.beta.kubernetes.io/is-default-class",
}

// StorageClassMissingError: a durable node's claim would name a StorageClass that does not
// exist, or name none while the cluster has no default class. Such a claim would never bind,
// so it is not made: the node waits, with a Warning, until the class exists.
type StorageClassMissingError struct{ Class string }

func (e *StorageClassMissingError) Error() string {
	if e.Class == "" {
		return "spec.persistence names no storageClassName and the Kubernetes cluster has no default StorageClass; name one, or mark one as the default"
	}
	return fmt.Sprintf("StorageClass %q of spec.persistence.storageClassName does not exist; create it or name another", e.Class)
}

// loadClaims lists the cluster's data claims into p.claims (from the cache: the operator's
// own claims carry its labels).
func (r *Reconciler) loadClaims(ctx context.Context, p *pass) error {
	list := &corev1.PersistentVolumeClaimList{}
	if err := r.client.List(ctx, list, client.InNamespace(p.key.Namespace), client.MatchingLabels{render.LabelCluster: p.key.Name}); err != nil {
		return err
	}
	p.claims = map[string]*corev1.PersistentVolumeClaim{}
	for i := range list.Items {
		p.claims[list.Items[i].Name] = &list.Items[i]
	}
	return nil
}

// claimOf is node n's data claim as loaded this pass, nil if it has none or the claim found
// under its name was made for someone else.
func (p *pass) claimOf(n views.Node) *corev1.PersistentVolumeClaim {
	c := p.claims[render.DataClaimName(n.Name())]
	if c == nil || claimedFor(c, n) != nil {
		return nil
	}
	return c
}

// livePersistence is what n's volume should be now: the live config's size and reclaim, or
// the node's own when the live config keeps no data on volumes (or did not resolve).
func (p *pass) livePersistence(n views.Node) views.Persistence {
	if p.resolved.Persistence.Durable() {
		return p.resolved.Persistence
	}
	return n.Spec().Persistence
}

// ensureClaim makes durable node n's data claim before its pod, which mounts it. A claim of
// that name is accepted only if it was made for n (its node-uid annotation): the operator
// adopts nothing, so a claim left by a deleted cluster, or made by hand, is never mounted.
func (r *Reconciler) ensureClaim(ctx context.Context, p *pass, n views.Node, owner metav1.OwnerReference) error {
	name := render.DataClaimName(n.Name())
	live := p.claims[name]
	if live == nil {
		live = &corev1.PersistentVolumeClaim{}
		err := r.apiReader.Get(ctx, types.NamespacedName{Namespace: p.key.Namespace, Name: name}, live)
		switch {
		case apierrors.IsNotFound(err):
			live = nil
		case err != nil:
			return err
		}
	}
	if live != nil {
		return claimedFor(live, n)
	}
	s := n.Spec()
	if err := r.requireStorageClass(ctx, s.Persistence.StorageClassName); err != nil {
		return err
	}
	claim, err := render.DataClaim(n.Name(), p.key.Namespace, n.U.GetUID(), s)
	if err != nil {
		return err
	}
	reclaim := p.livePersistence(n).Reclaim
	claim.Labels[render.LabelReclaim] = reclaim
	claim.OwnerReferences = render.ClaimOwners(reclaim, owner)
	if err := r.client.Create(ctx, claim); err != nil {
		if !apierrors.IsAlreadyExists(err) {
			return err
		}
		if err := r.apiReader.Get(ctx, client.ObjectKeyFromObject(claim), claim); err != nil {
			return err
		}
		return claimedFor(claim, n)
	}
	p.log.Info("created PersistentVolumeClaim", "claim", claim.Name, "size", s.Persistence.Size, "reclaim", reclaim)
	r.event(p, claim, ReasonVolumeCreated, "CreateVolume", "Created PersistentVolumeClaim %s (%s, reclaim %s) for ValkeyNode %s",
		claim.Name, s.Persistence.Size, reclaim, n.Name())
	return nil
}

// claimedFor accepts claim as n's only if it was made for n.
func claimedFor(claim *corev1.PersistentVolumeClaim, n views.Node) error {
	if claim.Annotations[render.AnnotationNodeUID] != string(n.U.GetUID()) {
		return &ObjectConflictError{Kind: "PersistentVolumeClaim", Name: claim.Name}
	}
	return nil
}

// requireStorageClass checks that a claim naming class (or none: the default) can bind.
func (r *Reconciler) requireStorageClass(ctx context.Context, class string) error {
	if class != "" {
		err := r.client.Get(ctx, types.NamespacedName{Name: class}, &storagev1.StorageClass{})
		if apierrors.IsNotFound(err) {
			return &StorageClassMissingError{Class: class}
		}
		return err
	}
	list := &storagev1.StorageClassList{}
	if err := r.client.List(ctx, list); err != nil {
		return err
	}
	for _, sc := range list.Items {
		for _, a := range defaultClassAnnotations {
			if sc.Annotations[a] == "true" {
				return nil
			}
		}
	}
	return &StorageClassMissingError{}
}

// reconcileVolumes keeps every durable node's claim in line with the live config, with at
// most one merge patch per claim that differs (an idle cluster writes nothing):
//   - reclaim: owned by its node for Delete (the garbage collector takes it with the node),
//     unowned and labelled for Retain;
//   - size: a larger one is requested where the claim's StorageClass allows expansion (the
//     storage driver grows the volume in place), a Warning where it does not; a smaller one
//     is refused with a Warning (the schema refuses a shrink of one config, but cannot see
//     one made through a baseRef chain).
func (r *Reconciler) reconcileVolumes(ctx context.Context, p *pass) error {
	var fixed, unexpandable, shrunk, refused []string
	var unexpandableClass string
	for _, n := range p.nodes {
		c := p.claimOf(n)
		if !n.Spec().Persistence.Durable() || c == nil || c.DeletionTimestamp != nil {
			continue
		}
		want := p.livePersistence(n)
		patch := map[string]any{}
		meta := map[string]any{}
		owners := render.ClaimOwners(want.Reclaim, nodeOwner(n))
		if c.Labels[render.LabelReclaim] != want.Reclaim || !sameOwners(c.OwnerReferences, owners) {
			meta["labels"] = map[string]any{render.LabelReclaim: want.Reclaim}
			meta["ownerReferences"] = owners // a merge patch replaces the list: the claim is the operator's alone
		}
		size, err := resource.ParseQuantity(want.Size)
		have := c.Spec.Resources.Requests[corev1.ResourceStorage]
		switch {
		case err != nil:
		case size.Cmp(have) > 0 && c.Status.Phase != corev1.ClaimBound:
			// Only a bound claim's request may change; its binding wakes the cluster again.
		case size.Cmp(have) > 0:
			allows, class, err := r.allowsExpansion(ctx, c)
			if err != nil {
				return err
			}
			if !allows {
				unexpandable, unexpandableClass = append(unexpandable, fmt.Sprintf("%s (%s)", n.Name(), have.String())), class
				break
			}
			patch["spec"] = map[string]any{"resources": map[string]any{"requests": map[string]any{string(corev1.ResourceStorage): size.String()}}}
			r.event(p, c, ReasonVolumeExpanding, "ExpandVolume", "Expanding PersistentVolumeClaim %s of ValkeyNode %s from %s to %s",
				c.Name, n.Name(), have.String(), size.String())
		case size.Cmp(have) < 0:
			shrunk = append(shrunk, fmt.Sprintf("%s (%s)", n.Name(), have.String()))
		}
		if len(meta) > 0 {
			patch["metadata"] = meta
		}
		if len(patch) == 0 {
			continue
		}
		body, err := json.Marshal(patch)
		if err != nil {
			return err
		}
		err = r.client.Patch(ctx, c, client.RawPatch(types.MergePatchType, body))
		switch {
		case apierrors.IsInvalid(err) || apierrors.IsForbidden(err):
			// Refused for good (a storage driver's own limits, a quota): said, not retried
			// in a loop; the next change of the claim or config tries again.
			refused = append(refused, fmt.Sprintf("%s: %v", c.Name, err))
			continue
		case err != nil && !apierrors.IsNotFound(err):
			return err
		}
		fixed = append(fixed, c.Name)
	}
	if len(fixed) > 0 {
		p.log.Info("patched PersistentVolumeClaims", "claims", fixed)
	}
	want := p.resolved.Persistence.Size
	if len(unexpandable) > 0 {
		sort.Strings(unexpandable)
		p.raise(ReasonVolumeNotExpandable, "ExpandVolume", fmt.Sprintf(
			"spec.persistence.size is %s, but StorageClass %q does not allow volume expansion; these nodes keep their volumes' size: %s",
			want, unexpandableClass, strings.Join(unexpandable, ", ")))
	} else {
		p.settle(ReasonVolumeNotExpandable)
	}
	if len(refused) > 0 {
		p.raise(ReasonVolumeChangeRefused, "PatchVolume", "the API server refused to change data claims: "+strings.Join(refused, "; "))
	} else {
		p.settle(ReasonVolumeChangeRefused)
	}
	if len(shrunk) > 0 {
		sort.Strings(shrunk)
		p.raise(ReasonVolumeShrinkRefused, "ShrinkVolume", fmt.Sprintf(
			"spec.persistence.size is %s, smaller than these nodes' volumes, which cannot shrink: %s; they keep their size (set the size back, or use a larger one)",
			want, strings.Join(shrunk, ", ")))
	} else {
		p.settle(ReasonVolumeShrinkRefused)
	}
	return nil
}

// allowsExpansion reports whether c's StorageClass allows growing its volumes, and names the
// class ("" when the claim names none and none was set by admission).
func (r *Reconciler) allowsExpansion(ctx context.Context, c *corev1.PersistentVolumeClaim) (bool, string, error) {
	class := ""
	if c.Spec.StorageClassName != nil {
		class = *c.Spec.StorageClassName
	}
	if class == "" {
		return false, class, nil
	}
	sc := &storagev1.StorageClass{}
	if err := r.client.Get(ctx, types.NamespacedName{Name: class}, sc); err != nil {
		if apierrors.IsNotFound(err) {
			return false, class, nil
		}
		return false, class, err
	}
	return sc.AllowVolumeExpansion != nil && *sc.AllowVolumeExpansion, class, nil
}

// sameOwners compares owner references by what the operator sets of them.
func sameOwners(a, b []metav1.OwnerReference) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].UID != b[i].UID || a[i].Name != b[i].Name || a[i].Kind != b[i].Kind ||
			(a[i].Controller != nil && *a[i].Controller) != (b[i].Controller != nil && *b[i].Controller) {
			return false
		}
	}
	return true
}

// podsCreated turns the error of creating pods, and what each needs first (its config
// ConfigMap, its data claim), into the step's outcome: an object someone else made, or a
// StorageClass that does not exist, holds the node back with a Warning Event until the user
// resolves it; anything else is retried.
func (r *Reconciler) podsCreated(p *pass, err error) *outcome {
	var (
		noClass  *StorageClassMissingError
		conflict *ObjectConflictError
	)
	switch {
	case err == nil:
		p.settle(ReasonStorageClassMissing)
		r.applied(p, "DataClaim", nil)
		return r.applied(p, "NodeConfigMap", nil)
	case errors.As(err, &noClass):
		p.raise(ReasonStorageClassMissing, "CreateVolume", noClass.Error())
		return done(ctrl.Result{RequeueAfter: r.opts.RecheckInterval}, nil)
	case errors.As(err, &conflict) && conflict.Kind == "PersistentVolumeClaim":
		return r.applied(p, "DataClaim", err)
	default:
		return r.applied(p, "NodeConfigMap", err)
	}
}

// reportPersistenceFaults names, in one Warning, the servers whose last write of their data
// to disk failed (model.NodeState.PersistenceFaults): most often a full volume. Such a server
// refuses writes until it can write again; the rest of the cluster serves on.
func (p *pass) reportPersistenceFaults() {
	snap := p.snapshot()
	if snap == nil {
		return
	}
	var faults []string
	for _, st := range snap.Nodes {
		if st.Reachable && len(st.PersistenceFaults) > 0 {
			faults = append(faults, fmt.Sprintf("%s (%s: err)", st.Name, strings.Join(st.PersistenceFaults, ", ")))
		}
	}
	if len(faults) == 0 {
		p.settle(ReasonPersistenceFailing)
		return
	}
	sort.Strings(faults)
	p.raise(ReasonPersistenceFailing, "Persistence", "cannot write their data to disk, so they refuse writes: "+strings.Join(faults, "; ")+
		"; is the volume full? Grow spec.persistence.size where the StorageClass allows expansion, or free space")
}

// reportUnboundClaims names, in one Warning, the data claims that have not bound for
// Options.SlowStart: their provisioner fails or is missing, or the class cannot place them.
// Until a claim binds its pod cannot start, and the pod's own reason often only says it waits
// for the volume.
func (r *Reconciler) reportUnboundClaims(_ context.Context, p *pass) *outcome {
	if stuck := unboundClaims(p.nodes, p.claimOf, r.opts.Now(), r.opts.SlowStart); len(stuck) > 0 {
		p.raise(ReasonVolumeNotBound, "BindVolume", "data claims not bound after "+r.opts.SlowStart.String()+": "+strings.Join(stuck, "; ")+
			"; see `kubectl describe pvc` for the provisioner's reason")
	} else {
		p.settle(ReasonVolumeNotBound)
	}
	return nil
}

// unboundClaims describes the claims of nodes (claimOf) still Pending slow after they were made.
func unboundClaims(nodes []views.Node, claimOf func(views.Node) *corev1.PersistentVolumeClaim, now time.Time, slow time.Duration) []string {
	var out []string
	for _, n := range nodes {
		c := claimOf(n)
		if c == nil || c.Status.Phase != corev1.ClaimPending || c.DeletionTimestamp != nil || now.Sub(c.CreationTimestamp.Time) < slow {
			continue
		}
		class := "the default class"
		if c.Spec.StorageClassName != nil {
			class = strconv.Quote(*c.Spec.StorageClassName)
		}
		out = append(out, fmt.Sprintf("%s of ValkeyNode %s (StorageClass %s)", c.Name, n.Name(), class))
	}
	sort.Strings(out)
	return out
}
