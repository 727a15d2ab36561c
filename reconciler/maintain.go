package reconciler

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/gomomento/valkey-operator/reconciler/render"
	"github.com/gomomento/valkey-operator/reconciler/views"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
)

// ownerRef makes owner the controlling owner, so deleting it cascades to the object.
func ownerRef(owner metav1.Object, apiVersion, kind string) metav1.OwnerReference {
	return metav1.OwnerReference{
		APIVersion: apiVersion, Kind: kind, Name: owner.GetName(), UID: owner.GetUID(),
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
	}
}

func (p *pass) clusterOwnerRef() metav1.OwnerReference {
	return ownerRef(p.obj, p.obj.GetAPIVersion(), p.obj.GetKind())
}

// withLabels reports whether have carries every label of want, adding the missing ones.
func withLabels(obj metav1.Object, want map[string]string) (changed bool) {
	l := obj.GetLabels()
	if l == nil {
		l = map[string]string{}
	}
	for k, v := range want {
		if l[k] != v {
			l[k] = v
			changed = true
		}
	}
	if changed {
		obj.SetLabels(l)
	}
	return changed
}

// ensureService keeps the headless Service in shape. Only the fields the operator owns are
// compared, so API-server defaults never cause a write.
func (r *Reconciler) ensureService(ctx context.Context, p *pass) *outcome {
	want := render.Service(p.key.Name, p.key.Namespace)
	have := &corev1.Service{}
	err := r.client.Get(ctx, types.NamespacedName{Namespace: want.Namespace, Name: want.Name}, have)
	if apierrors.IsNotFound(err) {
		want.OwnerReferences = []metav1.OwnerReference{p.clusterOwnerRef()}
		if err := r.client.Create(ctx, want); err != nil && !apierrors.IsAlreadyExists(err) {
			return done(ctrl.Result{}, err)
		}
		p.log.Info("created Service", "service", want.Name)
		return nil
	}
	if err != nil {
		return done(ctrl.Result{}, err)
	}
	upd := have.DeepCopy()
	changed := withLabels(upd, want.Labels)
	if !maps.Equal(upd.Spec.Selector, want.Spec.Selector) {
		upd.Spec.Selector, changed = want.Spec.Selector, true
	}
	if !upd.Spec.PublishNotReadyAddresses {
		upd.Spec.PublishNotReadyAddresses, changed = true, true
	}
	if !portsMatch(upd.Spec.Ports, want.Spec.Ports) {
		upd.Spec.Ports, changed = want.Spec.Ports, true
	}
	if !changed {
		return nil
	}
	if err := r.client.Update(ctx, upd); err != nil {
		return done(ctrl.Result{}, err)
	}
	p.log.Info("updated Service", "service", want.Name)
	return nil
}

func portsMatch(have, want []corev1.ServicePort) bool {
	if len(have) != len(want) {
		return false
	}
	key := func(p corev1.ServicePort) string {
		proto := p.Protocol
		if proto == "" {
			proto = corev1.ProtocolTCP
		}
		return fmt.Sprintf("%s/%s/%d/%s", p.Name, proto, p.Port, p.TargetPort.String())
	}
	var a, b []string
	for i := range have {
		a = append(a, key(have[i]))
		b = append(b, key(want[i]))
	}
	sort.Strings(a)
	sort.Strings(b)
	return slices.Equal(a, b)
}

// ensureAuthSecret creates the auth Secret once. An existing password is never replaced; a
// key that is missing altogether (someone deleted it) is generated on its own.
func (r *Reconciler) ensureAuthSecret(ctx context.Context, p *pass) *outcome {
	name := render.AuthSecretName(p.key.Name)
	have := &corev1.Secret{}
	err := r.client.Get(ctx, types.NamespacedName{Namespace: p.key.Namespace, Name: name}, have)
	if apierrors.IsNotFound(err) {
		want, err := render.AuthSecret(p.key.Name, p.key.Namespace, r.opts.Random)
		if err != nil {
			return done(ctrl.Result{}, err)
		}
		want.OwnerReferences = []metav1.OwnerReference{p.clusterOwnerRef()}
		if err := r.client.Create(ctx, want); err != nil {
			if apierrors.IsAlreadyExists(err) {
				// Created by an earlier pass the cache has not shown yet: use that one.
				return done(ctrl.Result{RequeueAfter: r.opts.PollInterval}, nil)
			}
			return done(ctrl.Result{}, err)
		}
		p.log.Info("created auth Secret", "secret", name)
		have = want
	} else if err != nil {
		return done(ctrl.Result{}, err)
	}

	upd := have.DeepCopy()
	changed := withLabels(upd, render.Labels(p.key.Name))
	for _, k := range []string{render.AuthPasswordKey, render.AuthOperatorPasswordKey} {
		if len(upd.Data[k]) > 0 {
			continue
		}
		pw, err := render.NewPassword(r.opts.Random)
		if err != nil {
			return done(ctrl.Result{}, err)
		}
		if upd.Data == nil {
			upd.Data = map[string][]byte{}
		}
		upd.Data[k] = []byte(pw)
		changed = true
		r.warn(p, ReasonSecretUnavailable, "EnsureAuthSecret", "auth Secret "+name+" lacked key "+k+"; generated a new value")
	}
	if conf := render.ReplicationConf(string(upd.Data[render.AuthOperatorPasswordKey])); !bytes.Equal(upd.Data[render.AuthReplicationConfKey], conf) {
		upd.Data[render.AuthReplicationConfKey] = conf
		changed = true
	}
	if changed {
		if err := r.client.Update(ctx, upd); err != nil {
			return done(ctrl.Result{}, err)
		}
	}
	p.defaultPassword = string(upd.Data[render.AuthPasswordKey])
	p.operatorPassword = string(upd.Data[render.AuthOperatorPasswordKey])
	return nil
}

// ensureACL renders the ACL file from spec.acl and the ValkeyRoles it names.
func (r *Reconciler) ensureACL(ctx context.Context, p *pass) *outcome {
	var lookupErr error
	role := func(name string) (views.Role, bool) {
		u := views.NewRoleObject()
		if err := r.client.Get(ctx, types.NamespacedName{Name: name}, u); err != nil {
			if !apierrors.IsNotFound(err) {
				lookupErr = err
			}
			return views.Role{}, false
		}
		return views.Role{U: u}, true
	}
	spec, missing := render.ACLSpec(p.cluster.ACL(), role, p.defaultPassword, p.operatorPassword)
	if lookupErr != nil {
		return done(ctrl.Result{}, lookupErr)
	}
	if len(missing) > 0 {
		r.warn(p, ReasonRoleMissing, "RenderACL", "ValkeyRole not found, permissions granted by it are left out: "+strings.Join(missing, ", "))
	} else {
		r.clearWarning(p, ReasonRoleMissing)
	}
	want := render.ACLConfigMap(p.key.Name, p.key.Namespace, r.opts.Valkey.RenderACL(spec))

	have := &corev1.ConfigMap{}
	err := r.client.Get(ctx, types.NamespacedName{Namespace: want.Namespace, Name: want.Name}, have)
	if apierrors.IsNotFound(err) {
		want.OwnerReferences = []metav1.OwnerReference{p.clusterOwnerRef()}
		if err := r.client.Create(ctx, want); err != nil && !apierrors.IsAlreadyExists(err) {
			return done(ctrl.Result{}, err)
		}
		p.log.Info("created ACL ConfigMap", "configmap", want.Name)
		return nil
	}
	if err != nil {
		return done(ctrl.Result{}, err)
	}
	upd := have.DeepCopy()
	changed := withLabels(upd, want.Labels)
	if upd.Data[render.ACLFileKey] != want.Data[render.ACLFileKey] {
		if upd.Data == nil {
			upd.Data = map[string]string{}
		}
		upd.Data[render.ACLFileKey] = want.Data[render.ACLFileKey]
		changed = true
	}
	if !changed {
		return nil
	}
	if err := r.client.Update(ctx, upd); err != nil {
		return done(ctrl.Result{}, err)
	}
	p.log.Info("updated ACL ConfigMap", "configmap", want.Name)
	return nil
}
