package valkeyops

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/valkey-io/valkey-go"
)

// Reading what a node holds, so a caller can tell whether anything needs changing before it
// changes anything: a converged cluster must see no ACL or CONFIG write at all. The
// comparison is pure (ACLDrift) so it can be tested without servers.

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

// compareUser says how got differs from want, never naming a hash.
func compareUser(want, got UserACL) error {
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
			if err := compareUser(w, h); err != nil {
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

// AuthState is what one node holds of the operator-managed credentials: its ACL users and the
// login its replication uses. The masterauth password itself never leaves this package; only
// its hash does, which is what the ACL file and ACL GETUSER hold anyway.
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

// ReadAuth reads, from every node in parallel and without changing anything, its ACL users
// (ACL USERS, then ACL GETUSER for each) and its replication login (CONFIG GET). A node that
// cannot be read is reported in its AuthState.Err, never dropped; the error is only for a
// context that ended.
func (a *Admin) ReadAuth(ctx context.Context, nodes []Node) ([]AuthState, error) {
	out := make([]AuthState, len(nodes))
	_ = parallelIdx(len(nodes), func(i int) error {
		out[i] = a.readAuth(ctx, nodes[i])
		return nil
	})
	if err := ctx.Err(); err != nil {
		return nil, opErr("", "acl-read", err)
	}
	return out, nil
}

func (a *Admin) readAuth(ctx context.Context, n Node) AuthState {
	st := AuthState{Node: n}
	msg, err := a.cmd(ctx, n, "acl-read", "ACL", "USERS")
	if err != nil {
		st.Err = err
		return st
	}
	names, err := msg.AsStrSlice()
	if err != nil {
		st.Err = opErr(n.Name, "acl-read", err)
		return st
	}
	cmds := [][]string{{"CONFIG", "GET", "masteruser"}, {"CONFIG", "GET", "masterauth"}}
	for _, name := range names {
		cmds = append(cmds, []string{"ACL", "GETUSER", name})
	}
	res, err := a.multi(ctx, n, "acl-read", cmds)
	if err != nil {
		st.Err = err
		return st
	}
	if st.MasterUser, err = configValue(res[0], "masteruser"); err == nil {
		var auth string
		if auth, err = configValue(res[1], "masterauth"); auth != "" {
			st.MasterAuthHash = HashPassword(auth)
		}
	}
	if err != nil {
		st.Err = opErr(n.Name, "acl-read", err)
		return st
	}
	st.Users = map[string]UserACL{}
	for i, name := range names {
		msg, err := res[2+i].ToMessage()
		if err == nil {
			st.Users[name], err = parseGetUser(msg)
		}
		if err != nil {
			// A user deleted between ACL USERS and ACL GETUSER reads as nil: the next read
			// sees the node settled.
			st.Err = opErr(n.Name, "acl-read", fmt.Errorf("user %s: %w", name, err))
			st.Users = nil
			return st
		}
	}
	return st
}

// configValue reads the one value of a CONFIG GET reply (a RESP3 map or a RESP2 pair).
func configValue(r valkey.ValkeyResult, key string) (string, error) {
	m, err := r.AsStrMap()
	if err != nil {
		return "", fmt.Errorf("CONFIG GET %s: %w", key, err)
	}
	return m[key], nil
}

// ReplicationLogin is the login replicas use (masteruser, masterauth) on a cluster whose
// operator logs in with operatorPassword: the replication user, never the operator's.
func ReplicationLogin(operatorPassword string) (user, password string) {
	return ReplicationUser, ReplicationPassword(operatorPassword)
}

// setReplicationLogin sets n's replication login to the one that goes with the password
// this Admin logs in with.
func (a *Admin) setReplicationLogin(ctx context.Context, n Node) error {
	_, err := a.cmd(ctx, n, "set-replication-auth", a.replicationLoginCmd()...)
	return err
}

// replicationLoginCmd sets a node's replication login (see setReplicationLogin).
func (a *Admin) replicationLoginCmd() []string {
	user, pw := ReplicationLogin(a.opts.Credentials.Password)
	return []string{"CONFIG", "SET", "masteruser", user, "masterauth", pw}
}

// SyncReplicationAuth sets, on every node, the login its replication uses (masteruser and
// masterauth) to the one that goes with the password this Admin logs in with, as Bootstrap
// does, and verifies it by reading it back. Replicas use it the next time they connect to
// their primary; an established replication link is not disturbed.
func (a *Admin) SyncReplicationAuth(ctx context.Context, nodes []Node) error {
	user, pw := ReplicationLogin(a.opts.Credentials.Password)
	want := HashPassword(pw)
	return parallel(nodes, func(n Node) error {
		if err := a.setReplicationLogin(ctx, n); err != nil {
			return err
		}
		res, err := a.multi(ctx, n, "verify-replication-auth", [][]string{{"CONFIG", "GET", "masteruser"}, {"CONFIG", "GET", "masterauth"}})
		if err != nil {
			return err
		}
		gotUser, err := configValue(res[0], "masteruser")
		if err != nil {
			return opErr(n.Name, "verify-replication-auth", err)
		}
		gotAuth, err := configValue(res[1], "masterauth")
		if err != nil {
			return opErr(n.Name, "verify-replication-auth", err)
		}
		if gotUser != user || HashPassword(gotAuth) != want {
			return opErr(n.Name, "verify-replication-auth", errors.New("the replication login read back differs from the one set"))
		}
		return nil
	})
}

// parseGetUser reads an ACL GETUSER reply (RESP3 map or RESP2 flat array). A user that does
// not exist (a nil reply) is an error.
func parseGetUser(msg valkey.ValkeyMessage) (UserACL, error) {
	var u UserACL
	if msg.IsNil() {
		return u, errors.New("no such user")
	}
	m, err := msg.AsMap()
	if err != nil {
		return u, err
	}
	fl := m["flags"]
	flags, _ := fl.AsStrSlice()
	u.On = slices.Contains(flags, "on")
	pw := m["passwords"]
	u.Hashes, _ = pw.AsStrSlice()
	sort.Strings(u.Hashes)
	sel := func(m map[string]valkey.ValkeyMessage) ACLSelector {
		str := func(k string) string {
			v := m[k]
			s, _ := v.ToString()
			return s
		}
		return ACLSelector{Commands: str("commands"), Keys: str("keys"), Channels: str("channels")}
	}
	u.Selectors = append(u.Selectors, sel(m))
	sels := m["selectors"]
	list, _ := sels.ToArray()
	for _, s := range list {
		sm, err := s.AsMap()
		if err != nil {
			return u, err
		}
		u.Selectors = append(u.Selectors, sel(sm))
	}
	return u, nil
}
