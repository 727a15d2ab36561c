package model

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
)

// OperatorUser is the ACL user the operator authenticates as.
const OperatorUser = "operator"

// ReplicationUser is the ACL user replicas log in to their primary as (masteruser), and the
// one a Valkey 9 source node logs in to the target as for an atomic slot migration. It may
// run only what those links need (replicationAccess: on Valkey 9, that includes the write
// commands on every key), so its password, which every node holds in its config
// (masterauth) and which CONFIG GET would show an administrator, opens nothing else.
const ReplicationUser = "replication"

// ReplicationPassword derives the replication user's password from the operator password
// (HMAC-SHA256, hex). Derived rather than stored: it needs no state of its own, it changes
// exactly when the operator password is rotated (and rotates by the same two phases), and
// it reveals nothing of the operator password it was derived from.
func ReplicationPassword(operatorPassword string) string {
	return derivePassword(operatorPassword, "valkey-operator/replication")
}

// ReplicationLogin is the login replicas use (masteruser, masterauth) on a cluster whose
// operator logs in with operatorPassword: the replication user, never the operator's.
func ReplicationLogin(operatorPassword string) (user, password string) {
	return ReplicationUser, ReplicationPassword(operatorPassword)
}

// derivePassword is HMAC-SHA256(operatorPassword, label) in hex.
func derivePassword(operatorPassword, label string) string {
	m := hmac.New(sha256.New, []byte(operatorPassword))
	m.Write([]byte(label))
	return hex.EncodeToString(m.Sum(nil))
}

// syncSlotsCommand is what a Valkey 9 source node runs on the target of an atomic slot
// migration, logged in as the replication user.
const syncSlotsCommand = "cluster|syncslots"

// ReplicationSyncsSlots reports whether every release of versions knows CLUSTER SYNCSLOTS,
// so the replication user may be granted it: an ACL file naming a command its server does
// not know stops that server at start-up, so while any node runs an older release (or no
// version is known) the grant is left out, and atomic migrations fall back to MIGRATE.
func ReplicationSyncsSlots(versions []string) bool {
	if len(versions) == 0 {
		return false
	}
	for _, v := range versions {
		if t, _ := KnownCommands(v); t.refuses(ACLRule{Name: syncSlotsCommand, Allow: true}) != "" {
			return false
		}
	}
	return true
}

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
	// OperatorExtraHashes are further SHA-256 hex digests the operator's user accepts besides
	// OperatorPassword's. A password rotation needs them: the new password must be accepted
	// everywhere before anyone logs in with it, and the old one must stay accepted while a
	// connection or a replica's masterauth may still use it.
	OperatorExtraHashes []string
	// ReplicationExtraHashes are, likewise, further hashes the replication user accepts
	// besides ReplicationPassword(OperatorPassword)'s, while its password rotates.
	ReplicationExtraHashes []string
	// ExporterExtraHashes are further hashes the exporter user accepts besides
	// ExporterPassword(OperatorPassword)'s: while its password rotates, and, on one node, the
	// hash of the password that node's exporter was started with (it reads its password
	// file once, so it keeps using that one until its pod is replaced).
	ExporterExtraHashes []string
	// BackupExtraHashes are further hashes the backup user accepts besides
	// BackupPassword(OperatorPassword)'s, while its password rotates.
	BackupExtraHashes []string
	// ReplicationSyncsSlots grants the replication user CLUSTER SYNCSLOTS (see
	// ReplicationSyncsSlots); set it only when every server of the cluster knows it.
	ReplicationSyncsSlots bool
	// DefaultUserOff turns the default user off: no one can log in with DefaultPassword.
	DefaultUserOff bool
	Users          []ACLUser
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
// the user; RenderACL and valkeyops' Admin.ApplyACL assume a valid spec.
func ValidateACL(spec ACLSpec) error {
	if spec.DefaultPassword == "" || spec.OperatorPassword == "" {
		return NewOpError("", "acl-validate", fmt.Errorf("%w: default and operator passwords are required", ErrInvalidSpec))
	}
	for _, extra := range []struct {
		user   string
		hashes []string
	}{{OperatorUser, spec.OperatorExtraHashes}, {ReplicationUser, spec.ReplicationExtraHashes}, {ExporterUser, spec.ExporterExtraHashes}, {BackupUser, spec.BackupExtraHashes}} {
		for _, h := range extra.hashes {
			if !aclHashRe.MatchString(strings.ToLower(h)) {
				return NewOpError("", "acl-validate", fmt.Errorf("%w: user %q: password hash must be 64 hex digits", ErrInvalidSpec, extra.user))
			}
		}
	}
	seen := map[string]bool{"default": true, OperatorUser: true, ReplicationUser: true, ExporterUser: true, BackupUser: true}
	for _, u := range spec.Users {
		bad := func(format string, args ...any) error {
			return NewOpError("", "acl-validate", fmt.Errorf("%w: user %q: %s", ErrInvalidSpec, u.Name, fmt.Sprintf(format, args...)))
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
				if !validPattern(k.Pattern) {
					return bad("invalid key pattern %q", k.Pattern)
				}
				switch k.Access {
				case "read", "write", "readwrite", "":
				default:
					return bad("key access must be read, write or readwrite, got %q", k.Access)
				}
			}
			for _, ch := range p.Channels {
				if !validPattern(ch) {
					return bad("invalid channel pattern %q", ch)
				}
			}
		}
	}
	return nil
}

// validPattern reports whether p can stand in an ACL rule (~p, &p) as one word of the ACL
// file: not empty, and no space, control character, parenthesis (selectors) or quote (the
// file's parser reads quotes as quoting). The CRD refuses the same characters.
func validPattern(p string) bool {
	if p == "" {
		return false
	}
	for i := 0; i < len(p); i++ {
		if c := p[i]; c <= ' ' || c == 0x7f || strings.IndexByte(`()"'`, c) >= 0 {
			return false
		}
	}
	return true
}

// aclUserRules are the rules of one user after its name, in the form ACL SETUSER accepts and
// the ACL file holds.
type aclUserRules struct {
	name      string
	off       bool
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
	if u.off {
		out = []string{"off"}
	}
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

// appAccess is what the default user, the applications' shared login, may do: every key,
// channel and data command, but nothing administrative or dangerous (no ACL, CONFIG,
// CLUSTER changes, SHUTDOWN, DEBUG, REPLICAOF, FLUSHALL, KEYS, MIGRATE, ...), so its
// password cannot lock the operator out, read the replication password or reshape the
// cluster. INFO, which -@dangerous also takes, is given back: it is read-only statistics
// that clients and health checks ask for. Cluster clients' topology reads (CLUSTER SHARDS,
// SLOTS, NODES) are neither admin nor dangerous. A role grants more to users of spec.acl.
func appAccess() aclPermRules {
	return aclPermRules{commands: []string{"+@all", "-@admin", "-@dangerous", "+info"}, keys: []string{"~*"}, channels: []string{"&*"}}
}

// replicationAccess is what a replica needs on its primary (PSYNC/SYNC, REPLCONF, PING)
// and, with syncSlots, what a Valkey 9 atomic slot migration's source runs on its target.
//
// Without syncSlots: no key or channel, since the replication stream a replica pulls is
// applied by the replica as its primary's (a client with no user), not as this user's.
//
// With syncSlots the source pushes instead: it logs in to the target as this user (its
// primaryuser) and the target runs the migrated slots' snapshot (SELECT, then SET, RPUSH,
// HSET, PEXPIREAT, ... per key) and every later write to them (DEL, UNLINK, MULTI/EXEC around
// a transaction's or script's effects, ...) as commands of this user, so every key with data
// needs write rights here or the migration fails ("NOPERM ... 'select'" in the target's log)
// and falls back to MIGRATE. Granted: the write commands on every key, minus the dangerous
// ones (FLUSHALL, FLUSHDB, SWAPDB, RESTORE, MIGRATE, SORT, ...; a migration whose stream
// carries one fails and falls back), plus SELECT, MULTI and EXEC. The key pattern is ~*, not
// the write-only %W~*: writes are replayed as clients sent them, and INCR, HINCRBY, LPOP, ...
// read the key they change (with %W~* the target answers "NOPERM No permissions to access a
// key"), so whoever holds this password on Valkey 9 can change keys and read values back
// through such writes (INCR, GETDEL, LPOP), though no read-only command (GET, SCAN, KEYS), no
// CONFIG, ACL or cluster change. -@dangerous comes before the replication commands and
// CLUSTER SYNCSLOTS, which are dangerous too.
func replicationAccess(syncSlots bool) aclPermRules {
	if !syncSlots {
		return aclPermRules{commands: []string{"-@all", "+psync", "+sync", "+replconf", "+ping"}}
	}
	return aclPermRules{
		commands: []string{"-@all", "+@write", "-@dangerous", "+select", "+multi", "+exec",
			"+psync", "+sync", "+replconf", "+ping", "+" + syncSlotsCommand},
		keys: []string{"~*"},
	}
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

// users returns every user of the spec in file order: default, operator, replication,
// exporter, backup, then spec users.
// The default user gets the applications' access (appAccess), or is off; the operator's user
// gets +@all because it needs every command it issues, including those MIGRATE, replication
// and atomic slot migration run on its behalf (a missing one stalls rebalances or loses keys
// in a roll).
func (spec ACLSpec) users() []aclUserRules {
	out := []aclUserRules{
		{name: "default", off: spec.DefaultUserOff, hashes: []string{HashPassword(spec.DefaultPassword)}, root: appAccess()},
		{name: OperatorUser, hashes: spec.operatorHashes(), root: allAccess()},
		{name: ReplicationUser, hashes: loginFirst(ReplicationPassword(spec.OperatorPassword), spec.ReplicationExtraHashes), root: replicationAccess(spec.ReplicationSyncsSlots)},
		{name: ExporterUser, hashes: loginFirst(ExporterPassword(spec.OperatorPassword), spec.ExporterExtraHashes), root: exporterAccess()},
		{name: BackupUser, hashes: loginFirst(BackupPassword(spec.OperatorPassword), spec.BackupExtraHashes), root: backupAccess()},
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

// operatorHashes are the operator user's hashes (see loginFirst).
func (spec ACLSpec) operatorHashes() []string {
	return loginFirst(spec.OperatorPassword, spec.OperatorExtraHashes)
}

// loginFirst are a user's hashes: its login password's first, then the extra ones sorted
// and without repeats, so the rendered file depends only on the set.
func loginFirst(password string, extraHashes []string) []string {
	login := HashPassword(password)
	var extra []string
	for _, h := range extraHashes {
		if h = strings.ToLower(h); h != login {
			extra = append(extra, h)
		}
	}
	sort.Strings(extra)
	return append([]string{login}, slices.Compact(extra)...)
}

// ACLLine is one user of a spec as a server is told it: its name and its rules, in the order
// the ACL file lists them after "user <name>" and ACL SETUSER takes them after "reset".
type ACLLine struct {
	User  string
	Rules []string
}

// Lines are the spec's users in file order (see users).
func (spec ACLSpec) Lines() []ACLLine {
	users := spec.users()
	out := make([]ACLLine, len(users))
	for i, u := range users {
		out[i] = ACLLine{User: u.name, Rules: u.tokens()}
	}
	return out
}

// RenderACL renders the ACL file text: one "user" line per user, passwords only as
// #<sha256>. The output is deterministic so the ConfigMap changes only when the spec does.
func RenderACL(spec ACLSpec) string {
	var b strings.Builder
	for _, l := range spec.Lines() {
		b.WriteString("user " + l.User + " " + strings.Join(l.Rules, " ") + "\n")
	}
	return b.String()
}
