package render

import (
	"github.com/gomomento/valkey-operator/reconciler/views"
	"github.com/gomomento/valkey-operator/valkeyops/model"
)

// ACLSpec assembles the ACL input from the cluster's users and the ValkeyRoles they name.
// A permission entry whose role does not exist is left out (fewer rights, never more) and
// its role name is returned in missing so the caller can warn.
func ACLSpec(users []views.ACLUser, defaultUserOn bool, role func(name string) (views.Role, bool), defaultPassword, operatorPassword string) (spec model.ACLSpec, missing []string) {
	spec = model.ACLSpec{DefaultPassword: defaultPassword, OperatorPassword: operatorPassword, DefaultUserOff: !defaultUserOn}
	for _, u := range users {
		out := model.ACLUser{Name: u.Username, PasswordHashes: append([]string(nil), u.PasswordHashes...)}
		for _, p := range u.Permissions {
			r, ok := role(p.RoleRef)
			if !ok {
				missing = append(missing, p.RoleRef)
				continue
			}
			perm := model.ACLPermission{Channels: append([]string(nil), p.Channels...)}
			for _, c := range r.Categories() {
				perm.Categories = append(perm.Categories, model.ACLRule{Name: c.Name, Allow: c.Allow})
			}
			for _, c := range r.Commands() {
				perm.Commands = append(perm.Commands, model.ACLRule{Name: c.Name, Allow: c.Allow})
			}
			for _, k := range p.Keys {
				perm.Keys = append(perm.Keys, model.KeyPattern{Pattern: k.Pattern, Access: k.Access})
			}
			out.Permissions = append(out.Permissions, perm)
		}
		spec.Users = append(spec.Users, out)
	}
	return spec, missing
}
