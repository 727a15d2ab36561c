package model

import "strings"

// ConfigRejection is what valkey-server prints when it refuses its configuration at start-up
// and exits: the directive it stopped at, the line as it read it, and why.
type ConfigRejection struct {
	Directive string // e.g. maxmemory-policy
	Line      string // the offending line, e.g. maxmemory-policy "bogus"
	Reason    string // e.g. wrong number of arguments
}

// ParseConfigRejection finds valkey-server's fatal configuration error in the tail of its
// output (a terminated container's message). Valkey 8 and 9 both print
//
//	*** FATAL CONFIG FILE ERROR (Version 8.0.1) ***
//	Reading the configuration file, at line 2
//	>>> 'maxmemory-policy "noeviction" "--port" "6380"'
//	wrong number of arguments
//
// for a bad line of the config file and for a bad command-line directive alike.
func ParseConfigRejection(output string) (ConfigRejection, bool) {
	lines := strings.Split(strings.ReplaceAll(output, "\r\n", "\n"), "\n")
	fatal := -1
	for i, l := range lines {
		if strings.Contains(l, "FATAL CONFIG FILE ERROR") {
			fatal = i
		}
	}
	if fatal < 0 {
		return ConfigRejection{}, false
	}
	for i := fatal + 1; i < len(lines); i++ {
		quoted, ok := strings.CutPrefix(strings.TrimSpace(lines[i]), ">>> ")
		if !ok {
			continue
		}
		line := strings.TrimSuffix(strings.TrimPrefix(quoted, "'"), "'")
		r := ConfigRejection{Line: line}
		r.Directive, _, _ = strings.Cut(strings.TrimSpace(line), " ")
		if i+1 < len(lines) {
			r.Reason = strings.TrimSpace(lines[i+1])
		}
		return r, true
	}
	return ConfigRejection{Reason: "unreadable configuration"}, true
}
