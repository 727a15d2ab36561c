package views

import (
	"github.com/gomomento/valkey-operator/crds"
	"github.com/tidwall/gjson"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Cluster states, serialized exactly as the seed shows them.
const (
	StateCreating = "Creating"
	StateActive   = "Active"
	StateUpdating = "Updating"
	StateInvalid  = "Invalid"
)

// Cluster is the typed view of a ValkeyCluster.
type Cluster struct{ U *unstructured.Unstructured }

// NewClusterObject returns an empty ValkeyCluster object with its GVK set.
func NewClusterObject() *unstructured.Unstructured { return object(crds.KindCluster) }

// NewClusterListObject returns an empty ValkeyClusterList with its GVK set.
func NewClusterListObject() *unstructured.UnstructuredList { return list(crds.KindCluster) }

func (c Cluster) Name() string      { return c.U.GetName() }
func (c Cluster) Namespace() string { return c.U.GetNamespace() }
func (c Cluster) ConfigRef() string { return getString(c.U, "spec", "configRef") }

// Shards is the live spec.shards value.
func (c Cluster) Shards() int {
	n, _ := getInt(c.U, "spec", "shards")
	return int(n)
}

// ReplicasPerShard is the live spec.replicasPerShard, 1 when absent (the schema default).
func (c Cluster) ReplicasPerShard() int {
	n, ok := getInt(c.U, "spec", "replicasPerShard")
	if !ok {
		return 1
	}
	return int(n)
}

// TLSSecretRef is the name of the TLS Secret, "" when TLS is off.
func (c Cluster) TLSSecretRef() string { return getString(c.U, "spec", "tls", "secretRef") }

// TLSEnabled reports whether spec.tls is present at all.
func (c Cluster) TLSEnabled() bool { return field(c.U, "spec", "tls") != nil }

func (c Cluster) Placement() Placement { return getPlacement(c.U, "spec", "placement") }

func (c Cluster) PodAnnotations() map[string]string {
	return getStringMap(c.U, "spec", "podAnnotations")
}

// KeyPermission is one key pattern of an ACL permission.
type KeyPermission struct {
	Pattern string
	Access  string // read|write|readwrite
}

// ACLPermission is one entry of spec.acl[].permissions.
type ACLPermission struct {
	RoleRef  string
	Keys     []KeyPermission
	Channels []string
}

// ACLUser is one entry of spec.acl.
type ACLUser struct {
	Username       string
	PasswordHashes []string
	Permissions    []ACLPermission
}

// ACL reads spec.acl.
func (c Cluster) ACL() []ACLUser {
	var out []ACLUser
	rawJSON(c.U, "spec", "acl").ForEach(func(_, user gjson.Result) bool {
		u := ACLUser{Username: user.Get("username").String()}
		for _, h := range user.Get("passwordHashes").Array() {
			u.PasswordHashes = append(u.PasswordHashes, h.String())
		}
		for _, p := range user.Get("permissions").Array() {
			perm := ACLPermission{RoleRef: p.Get("roleRef").String()}
			for _, k := range p.Get("keys").Array() {
				access := k.Get("access").String()
				if access == "" {
					access = "readwrite"
				}
				perm.Keys = append(perm.Keys, KeyPermission{Pattern: k.Get("pattern").String(), Access: access})
			}
			for _, ch := range p.Get("channels").Array() {
				perm.Channels = append(perm.Channels, ch.String())
			}
			u.Permissions = append(u.Permissions, perm)
		}
		out = append(out, u)
		return true
	})
	return out
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

// TargetSpec is the status.targetSpec snapshot: the topology only.
type TargetSpec struct {
	Shards           int
	ReplicasPerShard int
}

// Status is the whole operator-written part of a ValkeyCluster status. status.nodes is
// schema-reserved and never written, so it is deliberately absent here.
type Status struct {
	State   string // as stored; "" when never written
	Target  *TargetSpec
	Message string
}

// Status reads the stored status.
func (c Cluster) Status() Status {
	s := Status{State: getString(c.U, "status", "state"), Message: getString(c.U, "status", "message")}
	if field(c.U, "status", "targetSpec") != nil {
		sh, _ := getInt(c.U, "status", "targetSpec", "shards")
		rp, _ := getInt(c.U, "status", "targetSpec", "replicasPerShard")
		s.Target = &TargetSpec{Shards: int(sh), ReplicasPerShard: int(rp)}
	}
	return s
}

// EffectiveState maps the stored state to the one the operator acts on: a status never
// written is Creating, and the reserved Updating is treated as Active (seed semantics).
func (c Cluster) EffectiveState() string {
	switch s := getString(c.U, "status", "state"); s {
	case "":
		return StateCreating
	case StateUpdating:
		return StateActive
	default:
		return s
	}
}

// SetStatus writes state, targetSpec and message, leaving every other status field (nodes)
// untouched.
func (c Cluster) SetStatus(s Status) {
	setString(c.U, s.State, "status", "state")
	setString(c.U, s.Message, "status", "message")
	if s.Target == nil {
		setOrRemove(c.U, nil, "status", "targetSpec")
	} else {
		setOrRemove(c.U, map[string]any{
			"shards":           int64(s.Target.Shards),
			"replicasPerShard": int64(s.Target.ReplicasPerShard),
		}, "status", "targetSpec")
	}
}

// Equal compares two statuses field by field.
func (s Status) Equal(o Status) bool {
	if s.State != o.State || s.Message != o.Message {
		return false
	}
	if (s.Target == nil) != (o.Target == nil) {
		return false
	}
	return s.Target == nil || *s.Target == *o.Target
}

// Spec setters, used by tests and tools that build clusters.

func (c Cluster) SetConfigRef(s string)     { setString(c.U, s, "spec", "configRef") }
func (c Cluster) SetShards(n int)           { setOrRemove(c.U, int64(n), "spec", "shards") }
func (c Cluster) SetReplicasPerShard(n int) { setOrRemove(c.U, int64(n), "spec", "replicasPerShard") }
func (c Cluster) SetPlacement(p Placement)  { setPlacement(c.U, p, "spec", "placement") }
func (c Cluster) SetPodAnnotations(m map[string]string) {
	setStringMap(c.U, m, "spec", "podAnnotations")
}

// SetTLSSecretRef turns TLS on with the given Secret ("" removes spec.tls).
func (c Cluster) SetTLSSecretRef(s string) {
	if s == "" {
		setOrRemove(c.U, nil, "spec", "tls")
		return
	}
	setOrRemove(c.U, map[string]any{"secretRef": s}, "spec", "tls")
}

// SetACL writes spec.acl.
func (c Cluster) SetACL(users []ACLUser) {
	if len(users) == 0 {
		setOrRemove(c.U, nil, "spec", "acl")
		return
	}
	l := make([]any, 0, len(users))
	for _, u := range users {
		hashes := make([]any, len(u.PasswordHashes))
		for i, h := range u.PasswordHashes {
			hashes[i] = h
		}
		perms := make([]any, 0, len(u.Permissions))
		for _, p := range u.Permissions {
			pm := map[string]any{"roleRef": p.RoleRef}
			if len(p.Keys) > 0 {
				keys := make([]any, len(p.Keys))
				for i, k := range p.Keys {
					keys[i] = map[string]any{"pattern": k.Pattern, "access": k.Access}
				}
				pm["keys"] = keys
			}
			if len(p.Channels) > 0 {
				ch := make([]any, len(p.Channels))
				for i, c := range p.Channels {
					ch[i] = c
				}
				pm["channels"] = ch
			}
			perms = append(perms, pm)
		}
		l = append(l, map[string]any{"username": u.Username, "passwordHashes": hashes, "permissions": perms})
	}
	setOrRemove(c.U, l, "spec", "acl")
}
