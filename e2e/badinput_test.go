//go:build e2e

package e2e

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valkey-io/valkey-go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gomomento/valkey-operator/internal/testcerts"
	"github.com/gomomento/valkey-operator/reconciler/render"
	"github.com/gomomento/valkey-operator/valkeyops/model"
)

// TestBadInputLeavesRunningClusterUntouched is reconciler/badinput_test.go on real parts: the
// bad-input suite of the security review (issue #11) applied with the real kubectl to the
// objects a running 2x1 cluster uses, with an ACL user and a ValkeyRole of its own. Each input
// is refused by the API server with the CRD's message, or, where no schema can see the problem,
// named in a Warning Event. Then the operator makes more passes over the running cluster with
// every bad input in place, and the running servers show that nothing reached them: on every
// server the counters of write and administrative commands (INFO commandstats), ACL LIST,
// CONFIG GET * and the stable parts of CLUSTER NODES are what they were before the first bad
// input, no server restarted, no pod was replaced, no object of the cluster was written, and
// the cluster is still Active with no message.
func TestBadInputLeavesRunningClusterUntouched(t *testing.T) {
	n := newNamespace(t, "e2e-badinput")
	const running = "running"
	applyMenu(n)
	// A ValkeyConfig and a ValkeyRole of this test's own (both are cluster-scoped): the bad
	// edits below reach no other test's cluster, whatever happens to them.
	cfg := n.ownConfig("valkey-8.0", "allkeys-lru")
	role := n.name + "-app"
	_, err := kubectlRun(badInputJSON(t, map[string]any{
		"apiVersion": "valkey.gomomento.com/v1alpha1", "kind": "ValkeyRole", "metadata": map[string]any{"name": role},
		"spec": map[string]any{"categories": []any{map[string]any{"name": "read", "access": "allow"}}},
	}), "apply", "-f", "-")
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = kubectlRun("", "delete", "valkeyrole", role, "--wait=false") })
	appHash := sha256Hex(randomPassword(t))
	appUser := func(username, pattern string) []any {
		return []any{map[string]any{"username": username, "passwordHashes": []string{appHash},
			"permissions": []any{map[string]any{"roleRef": role, "keys": []any{map[string]any{"pattern": pattern, "access": "read"}}}}}}
	}
	n.kubectlIn(badInputJSON(t, map[string]any{
		"apiVersion": "valkey.gomomento.com/v1alpha1", "kind": "ValkeyCluster", "metadata": map[string]any{"name": running},
		"spec": map[string]any{"configRef": cfg, "shards": 2, "replicasPerShard": 1, "acl": appUser("app", "app:*")},
	}), "apply", "-f", "-")
	n.waitState(running, "Active", 3*time.Minute)
	opPw := n.secretValue(running+"-auth", render.AuthOperatorPasswordKey)

	// One pass more before the first snapshot, so that whatever the first passes of an Active
	// cluster still do is done. A pass is counted on the servers: of the commands they get
	// now, CLUSTER NODES comes only from the operator's observation, once per pass and server.
	pokes := 0
	morePasses := func(count int) {
		t.Helper()
		for range count {
			since := n.commandCalls(running, opPw)
			// A harmless edit of the role the cluster uses wakes its controller at once, instead
			// of after the 30 s an idle Active cluster waits between passes.
			pokes++
			n.kubectl("annotate", "valkeyrole", role, fmt.Sprintf("e2e.valkey.gomomento.com/poke=%d", pokes), "--overwrite")
			n.waitObserved(running, opPw, since, 1)
		}
	}
	morePasses(1)
	n.badInputWaitConverged(running, opPw, 4)
	writeCommands := badInputWriteCommands(t, n.podIPs(running)[0], opPw)
	before := n.badInputSnapshot(running, opPw, writeCommands)
	require.Len(t, before.Servers, 4, "every server of the running cluster is read")
	require.Greater(t, len(before.Objects), 8, "the running cluster's objects are found")
	stateEvents := n.badInputEvents(running, "StateChanged", "")
	for pod, server := range before.Servers {
		t.Logf("e2e: %s: %d CONFIG GET settings, %d ACL LIST users, write/admin counters before: %v",
			pod, len(server.Config), len(server.ACL), server.Counters)
	}

	patchConfig := func(valkey map[string]string) (string, error) {
		return kubectlRun("", "patch", "valkeyconfig", cfg, "--type=merge", "-p", badInputJSON(t, map[string]any{"spec": map[string]any{"valkey": valkey}}))
	}
	patchRunning := func(spec map[string]any) (string, error) {
		return kubectlRun("", "patch", "valkeycluster", running, "-n", n.name, "--type=merge", "-p", badInputJSON(t, map[string]any{"spec": spec}))
	}
	createCluster := func(name string) (string, error) {
		return kubectlRun(badInputJSON(t, map[string]any{
			"apiVersion": "valkey.gomomento.com/v1alpha1", "kind": "ValkeyCluster", "metadata": map[string]any{"name": name},
			"spec": map[string]any{"configRef": cfg, "shards": 1},
		}), "create", "-n", n.name, "-f", "-")
	}
	refused := []struct {
		finding, input string
		do             func() (string, error)
		message        string
	}{
		{"2 config injection", "a value carrying a second directive on a new line",
			func() (string, error) {
				return patchConfig(map[string]string{"maxmemory-policy": "noeviction\nport 6379"})
			},
			"spec.valkey values cannot contain control characters"},
		{"2 config injection", "loadmodule",
			func() (string, error) { return patchConfig(map[string]string{"loadmodule": "/tmp/evil.so"}) },
			"spec.valkey cannot set directives the operator manages"},
		{"2 config injection", "enable-debug-command",
			func() (string, error) { return patchConfig(map[string]string{"enable-debug-command": "yes"}) },
			"spec.valkey cannot set directives the operator manages"},
		{"2 config injection", "rename-command",
			func() (string, error) { return patchConfig(map[string]string{"rename-command": "CONFIG x"}) },
			"spec.valkey cannot set directives the operator manages"},
		{"2 config injection", "tls-auth-clients",
			func() (string, error) { return patchConfig(map[string]string{"tls-auth-clients": "no"}) },
			"spec.valkey cannot set directives the operator manages"},
		{"2 config injection", "dir",
			func() (string, error) { return patchConfig(map[string]string{"dir": "/etc"}) },
			"spec.valkey cannot set directives the operator manages"},
		{"2 config injection", "availability-zone",
			func() (string, error) { return patchConfig(map[string]string{"availability-zone": "zone-x"}) },
			"spec.valkey cannot set availability-zone: the operator sets each server's to the topology.kubernetes.io/zone label"},
		{"3 ACL input", "a key pattern with a newline",
			func() (string, error) {
				return patchRunning(map[string]any{"acl": appUser("app", "app:*\nuser x on nopass +@all")})
			},
			"key patterns cannot contain spaces, control characters, parentheses or quotes"},
		{"3 ACL input", "an unknown ACL category in a ValkeyRole",
			func() (string, error) {
				return kubectlRun("", "patch", "valkeyrole", role, "--type=merge", "-p",
					`{"spec":{"categories":[{"name":"nosuchcategory","access":"allow"}]}}`)
			},
			"category names are Valkey's ACL categories, without '@'"},
		{"3 ACL input", "a reserved user name",
			func() (string, error) { return patchRunning(map[string]any{"acl": appUser("replication", "app:*")}) },
			"acl usernames 'default', 'operator', 'replication' and 'exporter' are reserved for the operator"},
		{"4 names", "a cluster name with a dot", func() (string, error) { return createCluster("my.cluster") },
			"ValkeyCluster names start with a lowercase letter"},
		{"4 names", "a cluster name too long for a pod hostname", func() (string, error) { return createCluster(strings.Repeat("c", 58)) },
			"ValkeyCluster names are at most 57 characters"},
		{"4 names", "a nodeSelector key that is no label key",
			func() (string, error) {
				return patchRunning(map[string]any{"placement": map[string]any{"nodeSelector": map[string]string{"bad key!": "x"}}})
			},
			"spec.placement.nodeSelector keys must be Kubernetes label keys"},
		{"4 names", "a pod annotation key that is no annotation key",
			func() (string, error) {
				return patchRunning(map[string]any{"podAnnotations": map[string]string{"bad key!": "x"}})
			},
			"spec.podAnnotations keys must be Kubernetes annotation keys"},
	}
	for _, tt := range refused {
		t.Run("finding "+tt.finding+": "+tt.input, func(t *testing.T) {
			out, err := tt.do()
			require.Error(t, err, "the API server refuses it: %s", out)
			// What kubectl printed on its standard error, after the command line.
			_, refusal, found := strings.Cut(err.Error(), ": exit status 1: ")
			require.True(t, found, "kubectl failed: %v", err)
			t.Logf("kubectl: %s", refusal)
			// docs/ calls no refusal message exact (README and docs/status.md do so only for
			// status and its state Events): the CRD's message must be in kubectl's output.
			assert.Contains(t, refusal, tt.message)
			assert.Contains(t, refusal, "is invalid", "refused by validation, not by anything else")
		})
	}

	// What no schema can see is named in a Warning Event.
	t.Run("finding 3 ACL input: a command this Valkey release does not know, in a ValkeyRole", func(t *testing.T) {
		n := &ns{t: t, name: n.name}
		n.kubectl("patch", "valkeyrole", role, "--type=merge", "-p", `{"spec":{"commands":[{"name":"nosuchcmd","access":"allow"}]}}`)
		msg := n.badInputWaitEvent(running, "ACLRejected", "+nosuchcmd: no such command")
		assert.True(t, strings.HasPrefix(msg, "spec.acl not applied, the nodes keep the last valid ACL: "), msg)
		// The last good ACL file stays: checked with every other object of running below.
	})
	t.Run("finding 5 foreign objects: a Secret of the new cluster's name exists", func(t *testing.T) {
		n := &ns{t: t, name: n.name}
		n.kubectl("create", "secret", "generic", "other-auth", "--from-literal=password=theirs")
		foreign := n.badInputResourceVersion("other-auth")
		n.kubectlIn("apiVersion: valkey.gomomento.com/v1alpha1\nkind: ValkeyCluster\nmetadata:\n  name: other\nspec:\n  configRef: "+cfg+"\n  shards: 1\n  replicasPerShard: 0\n",
			"apply", "-f", "-")
		n.badInputWaitEvent("other", "ObjectConflict", `Secret "other-auth" exists but was not created by this ValkeyCluster`)
		assert.Equal(t, foreign, n.badInputResourceVersion("other-auth"), "the foreign Secret is untouched")
		nodes, err := n.valkeyNodes("other")
		require.NoError(t, err)
		assert.Empty(t, nodes, "the cluster does not progress")
	})
	t.Run("finding 9 expired certificates: a new cluster with an expired certificate", func(t *testing.T) {
		n := &ns{t: t, name: n.name}
		expired := testcerts.New(t, testcerts.Options{DNSNames: testcerts.ForCluster("expired", n.name),
			NotBefore: time.Now().Add(-72 * time.Hour), NotAfter: time.Now().Add(-time.Hour)})
		dir := t.TempDir()
		var files []string
		for key, data := range expired.Data() {
			require.NoError(t, os.WriteFile(filepath.Join(dir, key), data, 0o600))
			files = append(files, "--from-file="+key+"="+filepath.Join(dir, key))
		}
		n.kubectl(append([]string{"create", "secret", "generic", "expired-tls"}, files...)...)
		n.kubectlIn("apiVersion: valkey.gomomento.com/v1alpha1\nkind: ValkeyCluster\nmetadata:\n  name: expired\nspec:\n  configRef: "+cfg+"\n  shards: 1\n  replicasPerShard: 0\n  tls:\n    secretRef: expired-tls\n",
			"apply", "-f", "-")
		block, _ := pem.Decode(expired.Cert)
		require.NotNil(t, block)
		leaf, err := x509.ParseCertificate(block.Bytes)
		require.NoError(t, err)
		// docs/status.md gives this message exactly.
		want := fmt.Sprintf(`TLS Secret "expired-tls" certificate expired at %s; client connections will fail until it is renewed`,
			leaf.NotAfter.UTC().Format(time.RFC3339))
		assert.Equal(t, want, n.badInputWaitEvent("expired", "CertificateExpired", "certificate expired"))
		state, _, err := n.state("expired")
		require.NoError(t, err)
		assert.NotEqual(t, "Invalid", state, "docs/status.md: an expired certificate is not Invalid")
		// What such a cluster does next is the TLS tests' concern; here it would only spend the
		// shared cores: it goes.
		n.kubectl("delete", "valkeycluster", "expired", "--wait=false")
	})

	// More passes over running with every bad input in place (the ValkeyRole still names a
	// command Valkey does not know): nothing of it changed.
	passesFrom := n.commandCalls(running, opPw)
	morePasses(3)
	passesTo := n.commandCalls(running, opPw)
	for ip := range passesTo {
		t.Logf("e2e: %s: %d passes of the operator with the bad input in place", ip, passesTo[ip]["cluster|nodes"]-passesFrom[ip]["cluster|nodes"])
	}
	after := n.badInputSnapshot(running, opPw, writeCommands)
	for pod, want := range before.Servers {
		got, ok := after.Servers[pod]
		if !assert.True(t, ok, "server %s still serves", pod) {
			continue
		}
		assert.Equal(t, want.RunID, got.RunID, "%s: the server did not restart", pod)
		assert.Equal(t, want.Counters, got.Counters, "%s: no write or administrative command reached the server (INFO commandstats)", pod)
		assert.Equal(t, want.ACL, got.ACL, "%s: ACL LIST unchanged (password hashes shown as fingerprints)", pod)
		assert.Equal(t, want.Config, got.Config, "%s: CONFIG GET * unchanged (secrets shown as fingerprints)", pod)
		assert.Equal(t, want.Nodes, got.Nodes, "%s: CLUSTER NODES unchanged (ids, addresses, flags, primaries, slots)", pod)
	}
	assert.Equal(t, before.Pods, after.Pods, "no pod replaced or restarted")
	assert.Equal(t, before.Objects, after.Objects, "no object of the running cluster was written")
	state, message, err := n.state(running)
	require.NoError(t, err)
	// docs/status.md: the state names are exact and message is empty in every state but Invalid.
	assert.Equal(t, "Active", state)
	assert.Equal(t, "", message)
	assert.Equal(t, stateEvents, n.badInputEvents(running, "StateChanged", ""), "no state change of the running cluster")
	nodes, err := n.valkeyNodes("other")
	require.NoError(t, err)
	assert.Empty(t, nodes, "the cluster blocked by the foreign Secret still does not progress")
}

// badInputServer is what one server shows of its state, as far as bad input could change it.
type badInputServer struct {
	RunID string
	// Counters are the INFO commandstats calls of the write and administrative commands that
	// ran on the server (badInputWriteCommands).
	Counters map[string]int
	// ACL is ACL LIST, and Config is CONFIG GET *, with secrets replaced by fingerprints
	// (badInputFingerprint): equal fingerprints mean equal secrets, and no secret reaches the
	// log. Config is every setting: none changes by itself on an idle server (replicaof does
	// with a failover, which is a change this test must see), and none was seen to.
	ACL    []string
	Config map[string]string
	// Nodes are the stable parts of CLUSTER NODES, one line per node, sorted: ID, address
	// (ip:port@bus,hostname), flags, primary and slots. Ping and pong times change by
	// themselves; the config epoch and link state are left out too, since a change in either
	// that matters (a failover, a lost link) also changes flags, primaries or slots.
	Nodes []string
}

// badInputState is what a bad input could change of a running cluster.
type badInputState struct {
	Servers map[string]badInputServer // by pod name
	Pods    map[string]string         // pod name to UID and container restarts
	Objects map[string]string         // kind/name to resourceVersion, of the cluster's objects
}

// badInputReadOnly are the commands of the write, admin and dangerous ACL categories that
// change nothing on a server: they only report. Their counters move without any write, from
// this test's own snapshots (INFO, ACL LIST, CONFIG GET), from the operator's observation and
// credential checks (INFO, CONFIG GET, ACL GETUSER/LIST), from the replication link itself
// (a replica sends REPLCONF ACK to its primary every second) and from any monitoring; so they
// are left out of the comparison. Every other command of those categories is compared,
// including those nobody sent before (absent counters must stay absent).
var badInputReadOnly = []string{
	"acl|dryrun", "acl|getuser", "acl|list", "acl|log", "acl|users",
	"client|list", "cluster|count-failure-reports", "cluster|replicas", "cluster|slaves",
	"config|get", "info", "keys", "lastsave", "latency|doctor", "latency|graph", "latency|histogram",
	"latency|history", "latency|latest", "module|list", "replconf", "role", "slowlog|get", "slowlog|len", "sort_ro",
}

// badInputWriteCommands asks the server at ip for the commands (and subcommands, as
// commandstats names them: config|set) of its @write, @admin and @dangerous ACL categories,
// less badInputReadOnly: every command that could change a server's data, configuration,
// users, cluster membership, slots or replication.
func badInputWriteCommands(t *testing.T, ip, pw string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, category := range []string{"write", "admin", "dangerous"} {
		msg, err := operatorCommand(ip, pw, "COMMAND", "LIST", "FILTERBY", "ACLCAT", category)
		require.NoError(t, err)
		names, err := msg.AsStrSlice()
		require.NoError(t, err)
		for _, name := range names {
			if !slices.Contains(badInputReadOnly, name) {
				out[strings.ToLower(name)] = true
			}
		}
	}
	for _, must := range []string{"set", "config|set", "acl|setuser", "acl|load", "cluster|setslot", "cluster|meet", "cluster|forget",
		"cluster|replicate", "cluster|addslots", "failover", "migrate", "client|kill"} {
		require.True(t, out[must], "%s is among the compared commands", must)
	}
	return out
}

// badInputSnapshot reads what a bad input could change of cluster: each server's state (as the
// operator's user, the only one allowed CONFIG GET and ACL LIST), its pods and its objects.
func (n *ns) badInputSnapshot(cluster, pw string, writeCommands map[string]bool) badInputState {
	n.t.Helper()
	s := badInputState{Servers: map[string]badInputServer{}, Pods: map[string]string{}, Objects: map[string]string{}}
	for name, p := range n.podsByName(cluster) {
		restarts := 0
		for _, c := range p.Status.ContainerStatuses {
			restarts += int(c.RestartCount)
		}
		s.Pods[name] = fmt.Sprintf("uid=%s restarts=%d", p.UID, restarts)
		s.Objects["Pod/"+name] = p.ResourceVersion
		require.NotEmpty(n.t, p.Status.PodIP, "pod %s has an IP", name)
		s.Servers[name] = n.badInputServerState(p.Status.PodIP, pw, writeCommands)
	}
	ctx, cancel := ctxTimeout(30 * time.Second)
	defer cancel()
	selector := metav1.ListOptions{LabelSelector: render.LabelCluster + "=" + cluster}
	c, err := n.cluster(cluster)
	require.NoError(n.t, err)
	s.Objects["ValkeyCluster/"+cluster] = c.GetResourceVersion()
	nodes, err := suite.dyn.Resource(nodesGVR).Namespace(n.name).List(ctx, selector)
	require.NoError(n.t, err)
	for _, o := range nodes.Items {
		s.Objects["ValkeyNode/"+o.GetName()] = o.GetResourceVersion()
	}
	core := suite.env.Kube.CoreV1()
	services, err := core.Services(n.name).List(ctx, selector)
	require.NoError(n.t, err)
	for _, o := range services.Items {
		s.Objects["Service/"+o.Name] = o.ResourceVersion
	}
	secrets, err := core.Secrets(n.name).List(ctx, selector)
	require.NoError(n.t, err)
	for _, o := range secrets.Items {
		s.Objects["Secret/"+o.Name] = o.ResourceVersion
	}
	configMaps, err := core.ConfigMaps(n.name).List(ctx, selector)
	require.NoError(n.t, err)
	for _, o := range configMaps.Items {
		s.Objects["ConfigMap/"+o.Name] = o.ResourceVersion
	}
	return s
}

// badInputServerState reads one server over a single connection as the operator's user.
func (n *ns) badInputServerState(ip, pw string, writeCommands map[string]bool) badInputServer {
	n.t.Helper()
	c, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{ip + ":6379"}, Username: model.OperatorUser, Password: pw,
		ForceSingleClient: true, DisableCache: true, Dialer: dialer()})
	require.NoError(n.t, err, "connecting to %s", ip)
	defer c.Close()
	do := func(args ...string) valkey.ValkeyResult {
		ctx, cancel := ctxTimeout(10 * time.Second)
		defer cancel()
		return c.Do(ctx, c.B().Arbitrary(args...).Build())
	}
	var s badInputServer
	info, err := do("INFO", "server").ToString()
	require.NoError(n.t, err, "INFO server on %s", ip)
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "run_id:"); ok {
			s.RunID = v
		}
	}
	require.NotEmpty(n.t, s.RunID, "run_id of %s", ip)

	stats, err := do("INFO", "commandstats").ToString()
	require.NoError(n.t, err, "INFO commandstats on %s", ip)
	s.Counters = map[string]int{}
	for _, line := range strings.Split(stats, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		name = strings.TrimPrefix(name, "cmdstat_")
		if !writeCommands[name] {
			continue
		}
		var calls int
		_, err := fmt.Sscanf(rest, "%d", &calls)
		require.NoError(n.t, err, "%s: %q", ip, line)
		s.Counters[name] = calls
	}

	acl, err := do("ACL", "LIST").AsStrSlice()
	require.NoError(n.t, err, "ACL LIST on %s", ip)
	for _, rule := range acl {
		s.ACL = append(s.ACL, badInputHashes.ReplaceAllStringFunc(rule, func(h string) string { return "#" + badInputFingerprint(h) }))
	}

	config, err := do("CONFIG", "GET", "*").AsStrMap()
	require.NoError(n.t, err, "CONFIG GET * on %s", ip)
	s.Config = map[string]string{}
	for k, v := range config {
		if badInputSecretSetting(k) {
			v = badInputFingerprint(v)
		}
		s.Config[k] = v
	}
	require.Contains(n.t, s.Config, "maxmemory-policy", "CONFIG GET * of %s", ip)

	text, err := do("CLUSTER", "NODES").ToString()
	require.NoError(n.t, err, "CLUSTER NODES on %s", ip)
	s.Nodes = badInputClusterNodes(text, false)
	require.Len(n.t, s.Nodes, 4, "CLUSTER NODES of %s", ip)
	return s
}

// badInputClusterNodes is the stable part of a CLUSTER NODES reply, one sorted line per node:
// "id address flags primary slots..." (ping-sent, pong-recv, config-epoch and link-state left
// out), flags sorted; without the myself flag when dropMyself, so that servers' views compare.
func badInputClusterNodes(text string, dropMyself bool) []string {
	var out []string
	// Over RESP3 the reply is a verbatim string, its format prefix still in front.
	for _, line := range strings.Split(strings.TrimSpace(strings.TrimPrefix(text, "txt:")), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		var flags []string
		for _, flag := range strings.Split(f[2], ",") {
			if flag != "myself" || !dropMyself {
				flags = append(flags, flag)
			}
		}
		sort.Strings(flags)
		out = append(out, strings.Join(append([]string{f[0], f[1], strings.Join(flags, ","), f[3]}, f[8:]...), " "))
	}
	sort.Strings(out)
	return out
}

// badInputHashes are the password hashes in ACL LIST.
var badInputHashes = regexp.MustCompile(`#[0-9a-f]{64}`)

// badInputSecretSetting says whether a CONFIG GET value may hold a password (masterauth is
// the replication password in clear).
func badInputSecretSetting(name string) bool {
	return strings.Contains(name, "pass") || strings.HasSuffix(name, "auth")
}

// badInputFingerprint stands for a secret in what a failing assertion prints.
func badInputFingerprint(secret string) string {
	if secret == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(secret))
	return "fp:" + hex.EncodeToString(sum[:8])
}

// badInputWaitConverged waits until cluster has want ValkeyNodes, all Active, each server
// reports the cluster ok with every slot assigned and every node known, the servers agree on
// every node's flags, primary and slots, and every pod is Ready and in sync (the operator's
// readiness gate). (waitConverged logs in as the default user, which a cluster with ACL users
// switches off.) The servers' agreement matters to the snapshots: a flag the operator changed
// while forming (nofailover, cleared by Settle) reaches the other servers only with the node's
// next ping, and a view catching up between two snapshots is no change made by anyone.
func (n *ns) badInputWaitConverged(cluster, pw string, want int) {
	n.t.Helper()
	n.eventually(2*time.Minute, time.Second, fmt.Sprintf("%s converged on %d nodes, pods in sync", cluster, want), func() (bool, string, error) {
		nodes, err := n.nodeStatuses(cluster)
		if err != nil {
			return false, err.Error(), nil
		}
		ips, settled := n.settled(nodes, cluster, want)
		if settled != "" {
			return false, settled, nil
		}
		for _, ip := range ips {
			msg, err := operatorCommand(ip, pw, "CLUSTER", "INFO")
			if err != nil {
				return false, fmt.Sprintf("%s: %v", ip, err), nil
			}
			info, err := msg.ToString()
			if err != nil {
				return false, fmt.Sprintf("%s: %v", ip, err), nil
			}
			for _, line := range []string{"cluster_state:ok", "cluster_slots_assigned:16384", fmt.Sprintf("cluster_known_nodes:%d", want)} {
				if !strings.Contains(info, line+"\r\n") {
					return false, fmt.Sprintf("%s: no %s", ip, line), nil
				}
			}
		}
		var first []string
		for i, ip := range ips {
			msg, err := operatorCommand(ip, pw, "CLUSTER", "NODES")
			if err != nil {
				return false, fmt.Sprintf("%s: %v", ip, err), nil
			}
			text, err := msg.ToString()
			if err != nil {
				return false, fmt.Sprintf("%s: %v", ip, err), nil
			}
			view := badInputClusterNodes(text, true)
			if i == 0 {
				first = view
			} else if !slices.Equal(first, view) {
				return false, fmt.Sprintf("%s sees %q, %s sees %q", ips[0], first, ip, view), nil
			}
		}
		for _, p := range n.podsByName(cluster) {
			if !podConditionTrue(p, corev1.PodConditionType(render.InSyncCondition)) || !podConditionTrue(p, corev1.PodReady) {
				return false, p.Name + " is not Ready and in sync", nil
			}
		}
		return true, "", nil
	})
}

// badInputEvents lists "type reason: message (xcount)" of the namespace's Events about the
// ValkeyCluster object with reason, of type eventType ("" for any).
func (n *ns) badInputEvents(object, reason, eventType string) []string {
	n.t.Helper()
	ctx, cancel := ctxTimeout(10 * time.Second)
	defer cancel()
	selector := "involvedObject.kind=ValkeyCluster,involvedObject.name=" + object + ",reason=" + reason
	if eventType != "" {
		selector += ",type=" + eventType
	}
	l, err := suite.env.Kube.CoreV1().Events(n.name).List(ctx, metav1.ListOptions{FieldSelector: selector})
	require.NoError(n.t, err)
	var out []string
	for _, e := range l.Items {
		out = append(out, fmt.Sprintf("%s %s: %s (x%d)", e.Type, e.Reason, e.Message, e.Count))
	}
	sort.Strings(out)
	return out
}

// badInputWaitEvent waits for a Warning Event of reason about the ValkeyCluster object whose
// message contains want, and returns that message.
func (n *ns) badInputWaitEvent(object, reason, want string) string {
	n.t.Helper()
	var message string
	n.eventually(time.Minute, 500*time.Millisecond, fmt.Sprintf("a %s Warning Event about %s saying %q", reason, object, want), func() (bool, string, error) {
		ctx, cancel := ctxTimeout(10 * time.Second)
		defer cancel()
		l, err := suite.env.Kube.CoreV1().Events(n.name).List(ctx, metav1.ListOptions{
			FieldSelector: "involvedObject.kind=ValkeyCluster,involvedObject.name=" + object + ",reason=" + reason + ",type=Warning"})
		if err != nil {
			return false, err.Error(), nil
		}
		var seen []string
		for _, e := range l.Items {
			if strings.Contains(e.Message, want) {
				message = e.Message
				return true, "", nil
			}
			seen = append(seen, e.Message)
		}
		return false, fmt.Sprintf("%q", seen), nil
	})
	return message
}

// badInputResourceVersion is the resourceVersion of a Secret of the namespace.
func (n *ns) badInputResourceVersion(secret string) string {
	n.t.Helper()
	ctx, cancel := ctxTimeout(10 * time.Second)
	defer cancel()
	s, err := suite.env.Kube.CoreV1().Secrets(n.name).Get(ctx, secret, metav1.GetOptions{})
	require.NoError(n.t, err)
	return s.ResourceVersion
}

// badInputJSON is v as JSON, for kubectl's -p and stdin.
func badInputJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}
