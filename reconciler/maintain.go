package reconciler

import (
	"context"
	"strings"

	"github.com/gomomento/valkey-operator/reconciler/render"
	"github.com/gomomento/valkey-operator/reconciler/views"
	"github.com/gomomento/valkey-operator/valkeyops"
	corev1 "k8s.io/api/core/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
)

// The maintenance steps keep the objects every cluster owns in shape, in every state (the
// seed requires them even while Invalid). Each is one server-side apply of what the operator
// owns, sent only when that differs from what the API server holds.

// ensureService keeps the headless Service.
func (r *Reconciler) ensureService(ctx context.Context, p *pass) *outcome {
	err := apply(ctx, r, p, owned[*corev1.Service, *corev1ac.ServiceApplyConfiguration]{
		kind: "Service", name: render.ServiceName(p.key.Name), live: &corev1.Service{},
		desire: func(bool) (*corev1ac.ServiceApplyConfiguration, error) {
			return render.Service(p.key.Name, p.key.Namespace).WithOwnerReferences(p.clusterOwner()), nil
		},
		extract: corev1ac.ExtractService,
	})
	return r.applied(p, "Service", err)
}

// ensureAuthSecret keeps the auth Secret and reads the passwords the pass logs in with. A
// password, once generated, is never replaced; a key that is missing altogether (someone
// deleted it) is generated on its own, with a Warning Event.
func (r *Reconciler) ensureAuthSecret(ctx context.Context, p *pass) *outcome {
	name := render.AuthSecretName(p.key.Name)
	live := &corev1.Secret{}
	err := apply(ctx, r, p, owned[*corev1.Secret, *corev1ac.SecretApplyConfiguration]{
		kind: "Secret", name: name, live: live,
		desire: func(exists bool) (*corev1ac.SecretApplyConfiguration, error) {
			pw := map[string]string{}
			for _, k := range []string{render.AuthPasswordKey, render.AuthOperatorPasswordKey} {
				if exists && len(live.Data[k]) > 0 {
					pw[k] = string(live.Data[k])
					continue
				}
				v, err := render.NewPassword(r.opts.Random)
				if err != nil {
					return nil, err
				}
				pw[k] = v
				if exists {
					r.warn(p, ReasonSecretUnavailable, "EnsureAuthSecret", "auth Secret "+name+" lacked key "+k+"; generated a new value")
				}
			}
			p.defaultPassword, p.operatorPassword = pw[render.AuthPasswordKey], pw[render.AuthOperatorPasswordKey]
			return render.AuthSecret(p.key.Name, p.key.Namespace, p.defaultPassword, p.operatorPassword).
				WithOwnerReferences(p.clusterOwner()), nil
		},
		extract: corev1ac.ExtractSecret,
	})
	if out := r.applied(p, "Secret", err); out != nil {
		// Never dial with a password that did not reach the API server.
		p.defaultPassword, p.operatorPassword = "", ""
		return out
	}
	return nil
}

// ensureACL keeps the ACL ConfigMap: the file rendered from spec.acl and the ValkeyRoles it
// names, passwords only as hashes.
func (r *Reconciler) ensureACL(ctx context.Context, p *pass) *outcome {
	var lookupErr error
	role := func(name string) (views.Role, bool) {
		u := views.NewRoleObject()
		ok, err := getOptional(ctx, r.client, name, u)
		if err != nil {
			lookupErr = err
		}
		return views.Role{U: u}, ok
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
	err := apply(ctx, r, p, owned[*corev1.ConfigMap, *corev1ac.ConfigMapApplyConfiguration]{
		kind: "ConfigMap", name: render.ACLConfigMapName(p.key.Name), live: &corev1.ConfigMap{},
		desire: func(bool) (*corev1ac.ConfigMapApplyConfiguration, error) {
			return render.ACLConfigMap(p.key.Name, p.key.Namespace, valkeyops.RenderACL(spec)).
				WithOwnerReferences(p.clusterOwner()), nil
		},
		extract: corev1ac.ExtractConfigMap,
	})
	return r.applied(p, "ConfigMap", err)
}
