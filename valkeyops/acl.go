package valkeyops

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"sort"
	"strings"

	"github.com/valkey-io/valkey-go"
)

// OperatorUser is the ACL user the operator authenticates as.
const OperatorUser = "operator"

// ACLRule allows or denies one category (without "@") or one command (e.g. "config|get").
type ACLRule struct {
	Name  string
	Allow bool
}

// KeyPattern grants access to keys matching Pattern; Access is read, write or readwrite.
type KeyPattern struct {
	Pattern string
	Access  string
}

// ACLPermission is one set of rules: the first of a user is its root permission, the rest
// become selectors.
type ACLPermission struct {
	Categories, Commands []ACLRule
	Keys                 []KeyPattern
	Channels             []string
}

// ACLUser is one spec user; PasswordHashes are hex SHA-256 digests.
type ACLUser struct {
	Name           string
	PasswordHashes []string
	Permissions    []ACLPermission // first = root perms, rest = selectors
}

// ACLSpec is everything the ACL file holds. The default and operator passwords are plaintext
// here and appear in the rendered text only as hashes.
type ACLSpec struct {
	DefaultPassword, OperatorPassword string
	Users                             []ACLUser
}

// HashPassword is the hex SHA-256 Valkey stores for a password ("#<hash>" in ACL rules).
func HashPassword(p string) string {
	h := sha256.Sum256([]byte(p))
	return hex.EncodeToString(h[:])
}

var (
	aclNameRe    = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:@-]*$`)
	aclCommandRe = regexp.MustCompile(`^[a-z0-9_-]+(\|[a-z0-9_-]+)?$`)
	aclCatRe     = regexp.MustCompile(`^[a-z_-]+$`)
	aclHashRe    = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// ValidateACL reports the first problem with spec as an ErrInvalidSpec-wrapping error naming
// the user; RenderACL and ApplyACL assume a valid spec.
func ValidateACL(spec ACLSpec) error {
	if spec.DefaultPassword == "" || spec.OperatorPassword == "" {
		return opErr("", "acl-validate", fmt.Errorf("%w: default and operator passwords are required", ErrInvalidSpec))
	}
	seen := map[string]bool{"default": true, OperatorUser: true}
	for _, u := range spec.Users {
		bad := func(format string, args ...any) error {
			return opErr("", "acl-validate", fmt.Errorf("%w: user %q: %s", ErrInvalidSpec, u.Name, fmt.Sprintf(format, args...)))
		}
		if !aclNameRe.MatchString(u.Name) {
			return bad("invalid user name")
		}
		if seen[u.Name] {
			return bad("duplicate or reserved user name")
		}
		seen[u.Name] = true
		for _, h := range u.PasswordHashes {
			if !aclHashRe.MatchString(strings.ToLower(h)) {
				return bad("password hash must be 64 hex digits")
			}
		}
		for _, p := range u.Permissions {
			for _, c := range p.Categories {
				if !aclCatRe.MatchString(strings.ToLower(strings.TrimPrefix(c.Name, "@"))) {
					return bad("invalid category %q", c.Name)
				}
			}
			for _, c := range p.Commands {
				if !aclCommandRe.MatchString(strings.ToLower(c.Name)) {
					return bad("invalid command %q", c.Name)
				}
			}
			for _, k := range p.Keys {
				if k.Pattern == "" || strings.ContainsAny(k.Pattern, " \t\r\n()") {
					return bad("invalid key pattern %q", k.Pattern)
				}
				switch k.Access {
				case "read", "write", "readwrite", "":
				default:
					return bad("key access must be read, write or readwrite, got %q", k.Access)
				}
			}
			for _, ch := range p.Channels {
				if ch == "" || strings.ContainsAny(ch, " \t\r\n()") {
					return bad("invalid channel pattern %q", ch)
				}
			}
		}
	}
	return nil
}

// aclUserRules are the rules of one user after its name, in the form ACL SETUSER accepts and
// the ACL file holds.
type aclUserRules struct {
	name      string
	hashes    []string
	root      aclPermRules
	selectors []aclPermRules
}

type aclPermRules struct {
	commands []string // e.g. "-@all", "+@read", "+get"
	keys     []string // e.g. "%R~foo:*", "~bar:*"
	channels []string // e.g. "&ch"
}

func (p aclPermRules) tokens(selector bool) []string {
	var out []string
	out = append(out, p.keys...)
	out = append(out, "resetchannels")
	out = append(out, p.channels...)
	out = append(out, p.commands...)
	if selector {
		return []string{"(" + strings.Join(out, " ") + ")"}
	}
	return out
}

// tokens is the full rule list for ACL SETUSER (after "reset") and for the file line.
func (u aclUserRules) tokens() []string {
	out := []string{"on"}
	for _, h := range u.hashes {
		out = append(out, "#"+h)
	}
	out = append(out, u.root.tokens(false)...)
	for _, s := range u.selectors {
		out = append(out, s.tokens(true)...)
	}
	return out
}

func allAccess() aclPermRules {
	return aclPermRules{commands: []string{"+@all"}, keys: []string{"~*"}, channels: []string{"&*"}}
}

func permRules(p ACLPermission) aclPermRules {
	r := aclPermRules{commands: []string{"-@all"}}
	for _, c := range p.Categories {
		r.commands = append(r.commands, sign(c.Allow)+"@"+strings.ToLower(strings.TrimPrefix(c.Name, "@")))
	}
	for _, c := range p.Commands {
		r.commands = append(r.commands, sign(c.Allow)+strings.ToLower(c.Name))
	}
	for _, k := range p.Keys {
		switch k.Access {
		case "read":
			r.keys = append(r.keys, "%R~"+k.Pattern)
		case "write":
			r.keys = append(r.keys, "%W~"+k.Pattern)
		default:
			r.keys = append(r.keys, "~"+k.Pattern)
		}
	}
	for _, ch := range p.Channels {
		r.channels = append(r.channels, "&"+ch)
	}
	return r
}

func sign(allow bool) string {
	if allow {
		return "+"
	}
	return "-"
}

// users returns every user of the spec in file order: default, operator, then spec users.
// The default user keeps full access for applications; the operator's user gets +@all because
// it needs every command it issues, including those MIGRATE, replication and atomic slot
// migration run on its behalf (a missing one stalls rebalances or loses keys in a roll).
func (spec ACLSpec) users() []aclUserRules {
	out := []aclUserRules{
		{name: "default", hashes: []string{HashPassword(spec.DefaultPassword)}, root: allAccess()},
		{name: OperatorUser, hashes: []string{HashPassword(spec.OperatorPassword)}, root: allAccess()},
	}
	for _, u := range spec.Users {
		r := aclUserRules{name: u.Name, root: aclPermRules{commands: []string{"-@all"}}}
		for _, h := range u.PasswordHashes {
			r.hashes = append(r.hashes, strings.ToLower(h))
		}
		for i, p := range u.Permissions {
			if i == 0 {
				r.root = permRules(p)
			} else {
				r.selectors = append(r.selectors, permRules(p))
			}
		}
		out = append(out, r)
	}
	return out
}

// RenderACL renders the ACL file text: one "user" line per user, passwords only as
// #<sha256>. The output is deterministic so the ConfigMap changes only when the spec does.
func RenderACL(spec ACLSpec) string {
	var b strings.Builder
	for _, u := range spec.users() {
		b.WriteString("user " + u.name + " " + strings.Join(u.tokens(), " ") + "\n")
	}
	return b.String()
}

// ApplyACL makes every node's live users match spec (ACL SETUSER ... reset, ACL DELUSER for
// users no longer in the spec) and then verifies each user with ACL GETUSER. The file is not
// saved: nodes load the rendered ConfigMap on restart.
func (a *Admin) ApplyACL(ctx context.Context, nodes []Node, spec ACLSpec) error {
	if err := ValidateACL(spec); err != nil {
		return err
	}
	users := spec.users()
	want := map[string]bool{}
	for _, u := range users {
		want[u.name] = true
	}
	return parallel(nodes, func(n Node) error {
		// The operator's own user goes first so nothing after it can lock the operator out.
		cmds := make([][]string, 0, len(users))
		for _, u := range users {
			cmds = append(cmds, append([]string{"ACL", "SETUSER", u.name, "reset"}, u.tokens()...))
		}
		if _, err := a.multi(ctx, n, "acl-setuser", cmds); err != nil {
			return err
		}
		msg, err := a.cmd(ctx, n, "acl-users", "ACL", "USERS")
		if err != nil {
			return err
		}
		live, err := msg.AsStrSlice()
		if err != nil {
			return opErr(n.Name, "acl-users", err)
		}
		for _, name := range live {
			if !want[name] {
				if _, err := a.cmd(ctx, n, "acl-deluser", "ACL", "DELUSER", name); err != nil {
					return err
				}
			}
		}
		for _, u := range users {
			if err := a.verifyUser(ctx, n, u); err != nil {
				return err
			}
		}
		return nil
	})
}

func (a *Admin) verifyUser(ctx context.Context, n Node, u aclUserRules) error {
	msg, err := a.cmd(ctx, n, "acl-verify", "ACL", "GETUSER", u.name)
	if err != nil {
		return err
	}
	got, err := parseGetUser(msg)
	if err != nil {
		return opErr(n.Name, "acl-verify", fmt.Errorf("user %s: %w", u.name, err))
	}
	mismatch := func(what, have, want string) error {
		return opErr(n.Name, "acl-verify", fmt.Errorf("user %s: %s is %q, want %q", u.name, what, have, want))
	}
	if !got.on {
		return mismatch("state", "off", "on")
	}
	wantHashes := append([]string(nil), u.hashes...)
	sort.Strings(wantHashes)
	sort.Strings(got.passwords)
	if strings.Join(got.passwords, ",") != strings.Join(wantHashes, ",") {
		return opErr(n.Name, "acl-verify", fmt.Errorf("user %s: password hashes differ", u.name))
	}
	perms := append([]aclPermRules{u.root}, u.selectors...)
	if len(got.perms) != len(perms) {
		return mismatch("selector count", fmt.Sprint(len(got.perms)-1), fmt.Sprint(len(perms)-1))
	}
	for i, p := range perms {
		g := got.perms[i]
		if w := strings.Join(p.commands, " "); g.commands != w {
			return mismatch("commands", g.commands, w)
		}
		if w := strings.Join(p.keys, " "); g.keys != w {
			return mismatch("keys", g.keys, w)
		}
		if w := strings.Join(p.channels, " "); g.channels != w {
			return mismatch("channels", g.channels, w)
		}
	}
	return nil
}

type getUser struct {
	on        bool
	passwords []string
	perms     []struct{ commands, keys, channels string } // [0] root, rest selectors
}

// parseGetUser reads an ACL GETUSER reply (RESP3 map or RESP2 flat array).
func parseGetUser(msg valkey.ValkeyMessage) (getUser, error) {
	var g getUser
	m, err := msg.AsMap()
	if err != nil {
		return g, err
	}
	fl := m["flags"]
	flags, _ := fl.AsStrSlice()
	for _, f := range flags {
		if f == "on" {
			g.on = true
		}
	}
	pw := m["passwords"]
	g.passwords, _ = pw.AsStrSlice()
	perm := func(m map[string]valkey.ValkeyMessage) struct{ commands, keys, channels string } {
		var p struct{ commands, keys, channels string }
		str := func(k string) string {
			v := m[k]
			s, _ := v.ToString()
			return s
		}
		p.commands, p.keys, p.channels = str("commands"), str("keys"), str("channels")
		return p
	}
	g.perms = append(g.perms, perm(m))
	sel := m["selectors"]
	list, _ := sel.ToArray()
	for _, s := range list {
		sm, err := s.AsMap()
		if err != nil {
			return g, err
		}
		g.perms = append(g.perms, perm(sm))
	}
	return g, nil
}
