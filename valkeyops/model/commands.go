package model

import (
	"embed"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Command tables: the commands (and subcommands) each Valkey release knows, one file per
// release in commands/, one line per command: its name, then its subcommands. Valkey refuses
// an ACL rule naming a command it does not know, and a server whose ACL file holds one does
// not start, so every command a spec names is checked against the tables of the releases the
// cluster runs. `hack/valkey-commands.sh` writes the files from the local images; an
// integration test compares them with the live servers.
//
//go:embed commands/*.txt
var commandFiles embed.FS

// CommandTable maps each command name to its subcommands (empty for a command without any).
type CommandTable map[string][]string

// Format renders the table as a command file.
func (t CommandTable) Format() string {
	var b strings.Builder
	for _, name := range slices.Sorted(maps.Keys(t)) {
		b.WriteString(strings.Join(append([]string{name}, t[name]...), " ") + "\n")
	}
	return b.String()
}

func parseCommandTable(text string) CommandTable {
	t := CommandTable{}
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		if len(f) > 0 {
			t[f[0]] = f[1:]
		}
	}
	return t
}

// release is one command file: Valkey major.minor and its table.
type release struct {
	major, minor int
	table        CommandTable
}

func (r release) String() string { return fmt.Sprintf("%d.%d", r.major, r.minor) }

// releases are the embedded tables, oldest first, parsed once: every pass of every cluster
// checks its ACL against them.
var releases = sync.OnceValue(parseReleases)

func parseReleases() []release {
	entries, err := commandFiles.ReadDir("commands")
	if err != nil {
		panic(err) // embedded at build time
	}
	var out []release
	for _, e := range entries {
		major, minor, ok := parseMajorMinor(strings.TrimSuffix(strings.TrimPrefix(e.Name(), "valkey-"), ".txt"))
		if !ok {
			continue
		}
		b, err := commandFiles.ReadFile("commands/" + e.Name())
		if err != nil {
			panic(err)
		}
		out = append(out, release{major, minor, parseCommandTable(string(b))})
	}
	slices.SortFunc(out, func(a, b release) int { return (a.major-b.major)*1000 + a.minor - b.minor })
	return out
}

func parseMajorMinor(v string) (int, int, bool) {
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return 0, 0, false
	}
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(parts[1])
	return major, minor, err1 == nil && err2 == nil
}

// releaseFor is the table for a Valkey version ("8.0.1"): its own release's, else the newest
// older one (a command added since is refused: safe), else the oldest.
func releaseFor(version string) release {
	all := releases()
	major, minor, ok := parseMajorMinor(version)
	if !ok {
		return all[0]
	}
	best := all[0]
	for _, r := range all {
		if r.major < major || (r.major == major && r.minor <= minor) {
			best = r
		}
	}
	return best
}

// KnownCommands is the embedded table used for a Valkey version (shared: read it, do not
// change it), and the release it is for.
func KnownCommands(version string) (CommandTable, string) {
	r := releaseFor(version)
	return r.table, r.String()
}

// CheckCommands reports the first command rule of spec that a server of one of versions
// would refuse (ErrInvalidSpec), nil when every release accepts them all. With no version
// known, every embedded release must accept them. Valkey's rules: the name is a command;
// name|sub names one of its subcommands, or, for a command without subcommands, its first
// argument, which may only be allowed, never denied.
func CheckCommands(spec ACLSpec, versions []string) error {
	var rels []release
	if len(versions) == 0 {
		rels = releases()
	}
	for _, v := range versions {
		rels = append(rels, releaseFor(v))
	}
	for _, u := range spec.Users {
		for _, p := range u.Permissions {
			for _, c := range p.Commands {
				for _, r := range rels {
					if why := r.table.refuses(c); why != "" {
						return NewOpError("", "acl-validate", fmt.Errorf("%w: user %q: %s%s: %s (Valkey %s)", ErrInvalidSpec, u.Name, sign(c.Allow), c.Name, why, r))
					}
				}
			}
		}
	}
	return nil
}

// refuses says why Valkey would refuse the rule ("" when it accepts it).
func (t CommandTable) refuses(c ACLRule) string {
	name, sub, hasSub := strings.Cut(strings.ToLower(c.Name), "|")
	subs, ok := t[name]
	switch {
	case !ok:
		return "no such command"
	case !hasSub:
		return ""
	case len(subs) > 0 && !slices.Contains(subs, sub):
		return "no such subcommand"
	case len(subs) == 0 && !c.Allow:
		return "a first argument can only be allowed, not denied"
	}
	return ""
}
