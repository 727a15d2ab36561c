package views

// The ACL types are spec.acl of a ValkeyCluster exactly as the schema shapes it, so they
// decode as they are; the views only add the schema's default for a key's access.

// KeyPermission is one key pattern of an ACL permission.
type KeyPermission struct {
	Pattern string `json:"pattern"`
	Access  string `json:"access,omitempty"` // read|write|readwrite
}

// ACLPermission is one entry of spec.acl[].permissions.
type ACLPermission struct {
	RoleRef  string          `json:"roleRef"`
	Keys     []KeyPermission `json:"keys,omitempty"`
	Channels []string        `json:"channels,omitempty"`
}

// ACLUser is one entry of spec.acl.
type ACLUser struct {
	Username       string          `json:"username"`
	PasswordHashes []string        `json:"passwordHashes,omitempty"`
	Permissions    []ACLPermission `json:"permissions,omitempty"`
}

// accessDefault is the schema default of spec.acl[].permissions[].keys[].access. The API
// server fills it in, but an object that never went through it (a test, a dry render) may
// lack it, so the views apply it on read as well.
const accessDefault = "readwrite"

// ACL reads spec.acl, each key's access defaulted. The lists are freshly decoded, so the
// default is filled in place.
func (c Cluster) ACL() []ACLUser {
	users := c.spec().ACL
	for _, u := range users {
		for _, p := range u.Permissions {
			for i := range p.Keys {
				if p.Keys[i].Access == "" {
					p.Keys[i].Access = accessDefault
				}
			}
		}
	}
	return users
}

// RoleRefs lists every ValkeyRole named by spec.acl.
func (c Cluster) RoleRefs() []string {
	var out []string
	for _, u := range c.ACL() {
		for _, p := range u.Permissions {
			out = append(out, p.RoleRef)
		}
	}
	return out
}

// SetACL writes spec.acl (nil or empty removes it).
func (c Cluster) SetACL(users []ACLUser) { c.editSpec(func(w *clusterSpec) { w.ACL = users }) }
