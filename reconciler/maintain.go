package reconciler

import (
	"context"
	"slices"
	"strings"

	"github.com/gomomento/valkey-operator/reconciler/render"
	"github.com/gomomento/valkey-operator/reconciler/resolve"
	"github.com/gomomento/valkey-operator/reconciler/views"
	"github.com/gomomento/valkey-operator/valkeyops/model"
	corev1 "k8s.io/api/core/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The maintenance steps keep the objects every cluster owns in shape, in every state
// (docs/status.md: even while Invalid). Each is one server-side apply of what the operator
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

// ensureAuthSecret keeps the auth Secret and the operator's record of the password the
// servers accept, and reads the passwords of the pass. A password is never regenerated on
// its own: the user changes it by editing the Secret, and a missing key (or a deleted
// Secret) is generated anew, with a Warning Event. A changed operator password is not
// logged in with at once: the running servers do not know it yet. The pass logs in with the
// recorded one (operatorPassword) while it still differs from the wanted one
// (operatorPasswordWanted), and syncCredentials rotates the servers from one to the other.
func (r *Reconciler) ensureAuthSecret(ctx context.Context, p *pass) *outcome {
	name := render.AuthSecretName(p.key.Name)
	live := &corev1.Secret{}
	var pw map[string]string
	var login string
	err := apply(ctx, r, p, owned[*corev1.Secret, *corev1ac.SecretApplyConfiguration]{
		kind: "Secret", name: name, live: live,
		desire: func(exists bool) (*corev1ac.SecretApplyConfiguration, error) {
			pw = map[string]string{}
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
					p.raise(ReasonSecretUnavailable, "EnsureAuthSecret", "auth Secret "+name+" lacked key "+k+"; generated a new value")
				}
			}
			var recorded bool
			var err error
			login, recorded, err = r.loginPassword(ctx, p)
			if err != nil {
				return nil, err
			}
			if login == "" {
				// Nothing recorded: a new cluster, or one from before the record existed,
				// whose servers were all started with the Secret's operator password.
				login = pw[render.AuthOperatorPasswordKey]
			}
			if !exists && recorded {
				p.raise(ReasonSecretUnavailable, "EnsureAuthSecret", "auth Secret "+name+" was missing; generated new passwords and rotating every node onto them")
			}
			return render.AuthSecret(p.key.Name, p.key.Namespace, pw[render.AuthPasswordKey], pw[render.AuthOperatorPasswordKey], login).
				WithOwnerReferences(p.clusterOwner()), nil
		},
		extract: corev1ac.ExtractSecret,
	})
	if out := r.applied(p, "Secret", err); out != nil {
		return out
	}
	// Recorded after the auth Secret, so a record always has the Secret it belongs with.
	if out := r.applied(p, "AuthRecord", r.recordLogin(ctx, p, login)); out != nil {
		return out
	}
	// Never dial with a password that did not reach the API server.
	p.defaultPassword, p.operatorPasswordWanted = pw[render.AuthPasswordKey], pw[render.AuthOperatorPasswordKey]
	p.operatorPassword = login
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
	spec, missing := render.ACLSpec(p.cluster.ACL(), p.cluster.DefaultUserOn(), role, p.defaultPassword, p.operatorPassword)
	// Both sides of an operator password rotation: a node started now must accept the
	// password the operator logs in with and the one it is rotating to.
	spec = rotating(spec, p.operatorPassword, p.operatorPasswordWanted)
	if lookupErr != nil {
		return done(ctrl.Result{}, lookupErr)
	}
	if len(missing) > 0 {
		p.raise(ReasonRoleMissing, "RenderACL", "ValkeyRole not found, permissions granted by it are left out: "+strings.Join(missing, ", "))
	} else {
		p.settle(ReasonRoleMissing)
	}
	// The CRD refuses what it can; what it cannot see (a ValkeyRole's rules combined with a
	// user's, a command the cluster's Valkey release does not know) is checked here. A spec
	// Valkey would refuse never reaches a node: the last good file stays and nothing is
	// applied live until the spec is fixed.
	versions, err := r.aclVersions(ctx, p)
	if err != nil {
		return done(ctrl.Result{}, err)
	}
	spec.ReplicationSyncsSlots = model.ReplicationSyncsSlots(versions)
	err = model.ValidateACL(spec)
	if err == nil {
		err = model.CheckCommands(spec, versions)
	}
	if err != nil {
		p.raise(ReasonACLRejected, "RenderACL", "spec.acl not applied, the nodes keep the last valid ACL: "+err.Error())
		return nil
	}
	p.settle(ReasonACLRejected)
	p.acl = spec
	err = apply(ctx, r, p, owned[*corev1.ConfigMap, *corev1ac.ConfigMapApplyConfiguration]{
		kind: "ConfigMap", name: render.ACLConfigMapName(p.key.Name), live: &corev1.ConfigMap{},
		desire: func(bool) (*corev1ac.ConfigMapApplyConfiguration, error) {
			return render.ACLConfigMap(p.key.Name, p.key.Namespace, model.RenderACL(spec)).
				WithOwnerReferences(p.clusterOwner()), nil
		},
		extract: corev1ac.ExtractConfigMap,
	})
	return r.applied(p, "ConfigMap", err)
}

// aclVersions are the Valkey versions whose servers must accept the ACL: the one configRef
// resolves to (the next nodes run it) and those of the cluster's ValkeyNodes (a roll from
// one release to another runs both). None while nothing resolves and no node exists; every
// known release must accept the ACL then.
func (r *Reconciler) aclVersions(ctx context.Context, p *pass) ([]string, error) {
	var out []string
	if res, err := resolve.Resolve(ctx, cacheLookup{r.client}, p.cluster.ConfigRef()); err == nil && res.Version != "" {
		out = append(out, res.Version)
	}
	list := views.NewNodeListObject()
	if err := r.client.List(ctx, list, client.InNamespace(p.key.Namespace), client.MatchingLabels{render.LabelCluster: p.key.Name}); err != nil {
		return nil, err
	}
	for i := range list.Items {
		if v := (views.Node{U: &list.Items[i]}).Spec().Version; v != "" && !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	return out, nil
}
