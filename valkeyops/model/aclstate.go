package model

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// What a node holds of the ACL (as valkeyops' Admin.ReadAuth reads it) compared with a spec, so
// a caller can tell whether anything needs changing before it changes anything: a converged
// cluster must see no ACL or CONFIG write at all.

// ACLSelector is one set of permissions as ACL GETUSER reports it: the root permissions of a
// user or one of its selectors. Each field is the server's own space-separated text.
type ACLSelector struct {
	Commands, Keys, Channels string
}

// UserACL is one user as ACL GETUSER reports it, reduced to what the operator sets.
type UserACL struct {
	On bool
	// Hashes are the SHA-256 hex digests of its passwords, sorted.
	Hashes []string
	// Selectors holds the root permissions first, then each selector in order.
	Selectors []ACLSelector
}

// expected is the user as ACL GETUSER reports it once the rules are applied: Valkey keeps
// the rules in the order given, so the text is the rules joined by spaces (proven against
// real servers by the integration suite).
func (u aclUserRules) expected() UserACL {
	out := UserACL{On: !u.off, Hashes: slices.Sorted(slices.Values(u.hashes))}
	for _, p := range append([]aclPermRules{u.root}, u.selectors...) {
		out.Selectors = append(out.Selectors, ACLSelector{
			Commands: strings.Join(p.commands, " "),
			Keys:     strings.Join(p.keys, " "),
			Channels: strings.Join(p.channels, " "),
		})
	}
	return out
}

// Expected returns every user of spec as ACL GETUSER reports it on a node that holds spec.
func (spec ACLSpec) Expected() map[string]UserACL {
	out := map[string]UserACL{}
	for _, u := range spec.users() {
		out[u.name] = u.expected()
	}
	return out
}

// CompareUser says how got differs from want, never naming a hash.
func CompareUser(want, got UserACL) error {
	if got.On != want.On {
		return fmt.Errorf("state is %q, want %q", onOff(got.On), onOff(want.On))
	}
	if !slices.Equal(slices.Sorted(slices.Values(got.Hashes)), want.Hashes) {
		return errors.New("password hashes differ")
	}
	if len(got.Selectors) != len(want.Selectors) {
		return fmt.Errorf("selector count is %d, want %d", len(got.Selectors)-1, len(want.Selectors)-1)
	}
	for i, w := range want.Selectors {
		g := got.Selectors[i]
		for _, f := range []struct{ what, have, want string }{
			{"commands", g.Commands, w.Commands}, {"keys", g.Keys, w.Keys}, {"channels", g.Channels, w.Channels},
		} {
			if f.have != f.want {
				return fmt.Errorf("%s is %q, want %q", f.what, f.have, f.want)
			}
		}
	}
	return nil
}

func onOff(on bool) string {
	if on {
		return "on"
	}
	return "off"
}

// ACLDrift lists how the users a node holds differ from spec, one line per user in name
// order ("user app: password hashes differ", "user old: not in the spec"); nil when the node
// holds exactly spec. Lines name users and rules, never passwords or hashes.
func ACLDrift(spec ACLSpec, held map[string]UserACL) []string {
	want := spec.Expected()
	names := map[string]bool{}
	for k := range want {
		names[k] = true
	}
	for k := range held {
		names[k] = true
	}
	var out []string
	for _, name := range slices.Sorted(maps.Keys(names)) {
		w, inSpec := want[name]
		h, isHeld := held[name]
		switch {
		case !isHeld:
			out = append(out, fmt.Sprintf("user %s: missing", name))
		case !inSpec:
			out = append(out, fmt.Sprintf("user %s: not in the spec", name))
		default:
			if err := CompareUser(w, h); err != nil {
				out = append(out, fmt.Sprintf("user %s: %v", name, err))
			}
		}
	}
	return out
}

// DriftedUsers names the users of an ACLDrift result, in its order.
func DriftedUsers(drift []string) []string {
	var out []string
	for _, d := range drift {
		name, _, _ := strings.Cut(strings.TrimPrefix(d, "user "), ":")
		out = append(out, name)
	}
	return out
}

// AuthState is what one node holds of the operator-managed credentials (valkeyops'
// Admin.ReadAuth reads it): its ACL users and the login its replication uses. The masterauth
// password itself is never kept; only its hash is, which is what the ACL file and ACL GETUSER
// hold anyway.
type AuthState struct {
	Node Node
	// Err is why the node could not be read (unreachable, or it refused the operator's
	// login); the other fields are then empty.
	Err   error
	Users map[string]UserACL
	// MasterUser and MasterAuthHash are the replication login (masteruser, and the hash of
	// masterauth; "" when unset).
	MasterUser, MasterAuthHash string
}
