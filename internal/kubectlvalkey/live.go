// Package kubectlvalkey is the `kubectl valkey` plugin (cmd/kubectl-valkey): a status report
// of a ValkeyCluster read with the user's own kubeconfig and RBAC, and the failover and
// rebalance requests the operator carries out (views.RequestAnnotation). The pure parts (the
// servers' replies, the report and its rendering) are apart from the Kubernetes calls.
package kubectlvalkey

import (
	"errors"
	"fmt"
	"strings"

	"github.com/gomomento/valkey-operator/valkeyops/model"
)

// Live server data comes from valkey-cli run in each server's own container through
// pods/exec (pod IPs are not reachable from a laptop), logged in as the default user with the
// application password of the {cluster}-auth Secret, never the operator's. The script goes on
// valkey-cli's stdin, so the password is in no command line, and it holds read-only commands
// only: the same CLUSTER NODES, CLUSTER INFO and INFO the operator observes with.

// section markers: ECHO replies that split valkey-cli's output into one reply per command.
const (
	markNodes = "@@kubectl-valkey:cluster-nodes"
	markInfo  = "@@kubectl-valkey:cluster-info"
	markState = "@@kubectl-valkey:info"
	markEnd   = "@@kubectl-valkey:end"
)

// LiveScript is valkey-cli's stdin: AUTH, then each read between ECHO markers.
func LiveScript(password string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "AUTH %s\n", quote(password))
	for _, step := range [][2]string{
		{markNodes, "CLUSTER NODES"},
		{markInfo, "CLUSTER INFO"},
		{markState, "INFO replication server keyspace persistence"},
	} {
		fmt.Fprintf(&b, "ECHO %s\n%s\n", step[0], step[1])
	}
	fmt.Fprintf(&b, "ECHO %s\n", markEnd)
	return b.String()
}

// quote makes s one argument of a valkey-cli input line (double-quoted, escaped).
func quote(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`, "\r", `\r`)
	return `"` + r.Replace(s) + `"`
}

// ErrAuth: the server refused the application password (the default user is off, or the
// password in the Secret is not the one the servers hold yet).
var ErrAuth = errors.New("the server refused the application password")

// ParseLive reads valkey-cli's output for LiveScript into the server's own view of itself,
// with model.ParseNodeState, the operator's own reader.
func ParseLive(n model.Node, out string) (model.NodeState, error) {
	sections := map[string]string{}
	var cur string
	var buf []string
	first := ""
	for _, line := range strings.Split(strings.ReplaceAll(out, "\r\n", "\n"), "\n") {
		t := strings.TrimSpace(line)
		if strings.HasPrefix(t, "@@kubectl-valkey:") {
			if cur != "" {
				sections[cur] = strings.Join(buf, "\n")
			}
			cur, buf = t, nil
			continue
		}
		if cur == "" {
			if first == "" && t != "" {
				first = t
			}
			continue
		}
		buf = append(buf, line)
	}
	if first != "OK" {
		return model.NodeState{}, fmt.Errorf("%w: %s", ErrAuth, first)
	}
	if _, ok := sections[markState]; !ok {
		return model.NodeState{}, fmt.Errorf("valkey-cli's output ended early: %q", trimTo(out, 200))
	}
	for _, k := range []string{markNodes, markInfo, markState} {
		if s := strings.TrimSpace(sections[k]); strings.HasPrefix(s, "ERR") || strings.HasPrefix(s, "NOAUTH") || strings.HasPrefix(s, "NOPERM") {
			return model.NodeState{}, fmt.Errorf("%s: %s", strings.TrimPrefix(k, "@@kubectl-valkey:"), trimTo(s, 200))
		}
	}
	return model.ParseNodeState(n, sections[markNodes], sections[markInfo], sections[markState])
}

func trimTo(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}
