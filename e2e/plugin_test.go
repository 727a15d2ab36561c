//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gomomento/valkey-operator/internal/kubectlvalkey"
	"github.com/gomomento/valkey-operator/internal/testcerts"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"
)

// pluginUser runs `kubectl valkey` (kubectl finds the plugin on PATH) as a ServiceAccount
// bound to the example viewer and requester ClusterRoles: the plugin needs no right beyond
// them, and nothing of the operator's.
type pluginUser struct {
	t          *testing.T
	kubeconfig string
}

// newPluginUser creates ServiceAccount "oncall" in n, binds examples/kubectl-valkey-rbac.yaml's
// roles to it (the viewer cluster-wide, for the nodes' zones; the requester in n only) and
// writes its kubeconfig.
func newPluginUser(t *testing.T, n *ns) *pluginUser {
	t.Helper()
	out, err := kubectlRun("", "apply", "-f", example("kubectl-valkey-rbac.yaml"))
	require.NoError(t, err, out)
	n.kubectl("create", "serviceaccount", "oncall")
	n.kubectl("create", "rolebinding", "oncall-requester", "--clusterrole=valkey-requester", "--serviceaccount="+n.name+":oncall")
	binding := n.name + "-oncall-viewer"
	out, err = kubectlRun("", "create", "clusterrolebinding", binding, "--clusterrole=valkey-viewer", "--serviceaccount="+n.name+":oncall")
	require.NoError(t, err, out)
	t.Cleanup(func() { _, _ = kubectlRun("", "delete", "clusterrolebinding", binding, "--ignore-not-found") })
	path := filepath.Join(t.TempDir(), "oncall.kubeconfig")
	require.NoError(t, writeTokenKubeconfig(suite.env.Kubeconfig, path, "oncall", n.name, "1h"))
	return &pluginUser{t: t, kubeconfig: path}
}

// run runs `kubectl valkey args...` and returns its stdout, its stderr and its error.
func (u *pluginUser) run(args ...string) (string, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "kubectl", append([]string{"valkey"}, args...)...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+u.kubeconfig, "PATH="+suite.pluginDir+string(os.PathListSeparator)+os.Getenv("PATH"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return stdout.String(), stderr.String(), err
}

// status is `kubectl valkey status cluster -o json`, decoded.
func (u *pluginUser) status(cluster string) kubectlvalkey.Report {
	u.t.Helper()
	out, errOut, err := u.run("status", cluster, "-o", "json")
	require.NoError(u.t, err, "kubectl valkey status: %s", errOut)
	var r kubectlvalkey.Report
	require.NoError(u.t, json.Unmarshal([]byte(out), &r), out)
	return r
}

// serverView is one server's own account, read directly (the test's own client, not the
// plugin's path): its CLUSTER NODES line for itself, its keys and its replication link.
type serverView struct {
	id, role, link string
	slots          []string
	keys           int64
}

func (n *ns) serverViews(cluster, password string) map[string]serverView { // by pod IP
	n.t.Helper()
	out := map[string]serverView{}
	for _, ip := range n.podIPs(cluster) {
		c := newNodeClient(n.t, ip+":6379", password)
		ctx, cancel := ctxTimeout(10 * time.Second)
		nodes, err := c.Do(ctx, c.B().ClusterNodes().Build()).ToString()
		require.NoError(n.t, err)
		keys, err := c.Do(ctx, c.B().Dbsize().Build()).AsInt64()
		require.NoError(n.t, err)
		info, err := c.Do(ctx, c.B().Info().Section("replication").Build()).ToString()
		require.NoError(n.t, err)
		cancel()
		v := serverView{keys: keys, role: "replica"}
		for _, cn := range parseClusterNodes(nodes) {
			if cn.Addr == ip+":6379" {
				v.id, v.slots = cn.ID, cn.Slots
				if cn.Primary {
					v.role = "primary"
				}
			}
		}
		for _, line := range strings.Split(info, "\n") {
			if l, ok := strings.CutPrefix(strings.TrimSpace(line), "master_link_status:"); ok {
				v.link = l
			}
		}
		out[ip] = v
	}
	return out
}

// TestPluginStatusAndFailover: `kubectl valkey status` of a healthy 2x1 cluster says, node by
// node, what the servers themselves say; `kubectl valkey failover` of a primary moves it to
// its replica through the operator with no acknowledged write lost; a failover of a replica
// and a malformed request are refused, and a rebalance of a balanced cluster does nothing;
// during a scale-out to 3 shards status shows desired ahead of formed until it is done; and a
// TLS cluster's servers are read too, with its certificate's expiry.
func TestPluginStatusAndFailover(t *testing.T) {
	n := newNamespace(t, "e2e-plugin")
	const cluster, tlsCluster, tlsSecret = "plug", "plugtls", "plugtls-tls"
	// A TLS cluster beside it, formed meanwhile (one namespace: one teardown).
	applyMenu(n)
	notAfter := time.Now().Add(90 * 24 * time.Hour).UTC().Truncate(time.Second)
	n.applyTLSCluster(tlsCluster, tlsSecret, notAfter)
	w, watch := day2(t, n, cluster, 2, 1)
	u := newPluginUser(t, n)
	password := n.secretValue(cluster+"-auth", "password")

	// status, field by field against the servers (keys grow under the writer: the plugin's
	// count lies between the servers' before and after it).
	before := n.serverViews(cluster, password)
	r := u.status(cluster)
	after := n.serverViews(cluster, password)
	assert.Equal(t, "Active", r.State)
	assert.Equal(t, kubectlvalkey.Topology{Shards: 2, ReplicasPerShard: 1}, r.Desired)
	assert.Equal(t, r.Desired, r.Formed)
	assert.Contains(t, r.Live, "pods/exec")
	assert.Empty(t, r.Moves)
	pods := n.podsByName(cluster)
	require.Len(t, r.Nodes, 4)
	primaries := map[int]string{}
	for _, nr := range r.Nodes {
		pod := pods[nr.Name]
		b, a := before[pod.Status.PodIP], after[pod.Status.PodIP]
		assert.Empty(t, nr.Error, nr.Name)
		assert.Equal(t, "Active", nr.Lifecycle, nr.Name)
		assert.Equal(t, pod.Name, nr.Pod)
		assert.Equal(t, pod.Spec.NodeName, nr.Node, nr.Name)
		assert.Equal(t, pod.Status.PodIP, nr.IP, nr.Name)
		k8sNode, err := suite.env.Kube.CoreV1().Nodes().Get(context.Background(), pod.Spec.NodeName, metav1.GetOptions{})
		require.NoError(t, err)
		assert.Equal(t, k8sNode.Labels["topology.kubernetes.io/zone"], nr.Zone, nr.Name)
		assert.NotEmpty(t, nr.Zone, nr.Name)
		assert.Equal(t, a.id, nr.ID, nr.Name)
		assert.Equal(t, a.role, nr.Role, nr.Name)
		if len(a.slots) == 0 {
			assert.Empty(t, nr.Slots, nr.Name)
		} else {
			assert.Equal(t, a.slots, nr.Slots, nr.Name)
		}
		count := 0
		for _, s := range a.slots {
			lo, hi, ok := strings.Cut(s, "-")
			if !ok {
				hi = lo
			}
			l, _ := strconv.Atoi(lo)
			h, _ := strconv.Atoi(hi)
			count += h - l + 1
		}
		assert.Equal(t, count, nr.SlotCount, nr.Name)
		assert.GreaterOrEqual(t, nr.Keys, b.keys, "%s: keys not below the server's count before", nr.Name)
		assert.LessOrEqual(t, nr.Keys, a.keys, "%s: keys not above the server's count after", nr.Name)
		if a.role == "primary" {
			primaries[nr.Shard] = nr.Name
			assert.Empty(t, nr.Link, nr.Name)
			continue
		}
		assert.Equal(t, a.link, nr.Link, nr.Name)
		assert.Equal(t, "up", nr.Link, nr.Name)
		if assert.NotNil(t, nr.LagBytes, nr.Name) {
			assert.Less(t, *nr.LagBytes, int64(1<<20), nr.Name)
		}
	}
	require.Len(t, primaries, 2, "one primary per shard")
	for _, nr := range r.Nodes {
		if nr.Role == "replica" {
			assert.Equal(t, primaries[nr.Shard], nr.Primary, "%s follows its shard's primary", nr.Name)
		}
	}
	text, errOut, err := u.run("status", cluster)
	require.NoError(t, err, errOut)
	t.Logf("e2e: kubectl valkey status %s:\n%s", cluster, text)
	for _, nr := range r.Nodes {
		assert.Regexp(t, nr.Name+`\s+`+strconv.Itoa(nr.Shard)+`\s+Active\s+`+nr.Role, text)
	}

	// Refusals and a request with nothing to do leave the cluster as it is.
	replica := ""
	for _, nr := range r.Nodes {
		if nr.Role == "replica" {
			replica = nr.Name
		}
	}
	_, errOut, err = u.run("failover", replica)
	assert.Error(t, err, "a failover of a replica is refused")
	assert.Contains(t, errOut, "refused: "+replica+" is not a primary holding slots")
	out, errOut, err := u.run("rebalance", cluster)
	assert.NoError(t, err, errOut)
	assert.Contains(t, out, "nothing: the slots are balanced already")
	out, err = kubectlRun("", "annotate", "valkeycluster", cluster, "-n", n.name, "valkey.gomomento.com/request=restart")
	assert.Error(t, err, "a malformed request is refused at admission: %s", out)
	if err != nil {
		assert.Contains(t, err.Error(), `must be "rebalance" or "failover:NODE"`)
	}

	// The operator's ServiceAccount may patch a ValkeyCluster only to take a request away and
	// answer it (valkey-operator-clusters). kubectl's annotate and label read the object
	// first, which the operator may not: these are the operator's own kind of request, a
	// merge patch, dry run.
	assert.NoError(t, operatorPatch(n.name, cluster, `{"metadata":{"annotations":{"valkey.gomomento.com/request":null,"valkey.gomomento.com/request-answer":"nothing: rebalance: test"}}}`),
		"the operator answers a request")
	for _, patch := range []string{
		`{"metadata":{"annotations":{"example.com/other":"x"}}}`,
		`{"metadata":{"labels":{"example.com/other":"x"}}}`,
		`{"spec":{"shards":3}}`,
	} {
		err := operatorPatch(n.name, cluster, patch)
		if assert.Error(t, err, "%s admitted", patch) {
			assert.Contains(t, err.Error(), "ValidatingAdmissionPolicy 'valkey-operator-clusters'")
		}
	}

	// The failover: the primary of shard 0 hands its slots to its replica.
	old := primaries[0]
	oldID := after[pods[old].Status.PodIP].id
	start := time.Now()
	out, errOut, err = u.run("failover", old)
	require.NoError(t, err, "kubectl valkey failover: %s%s", out, errOut)
	t.Logf("e2e: kubectl valkey failover %s took %.1fs:\n%s", old, time.Since(start).Seconds(), out)
	assert.Contains(t, out, "accepted: Failover requested: "+old)
	n.eventually(30*time.Second, 200*time.Millisecond, old+" a replica in every server's view", func() (bool, string, error) {
		for ip, v := range n.serverViews(cluster, password) {
			if ip == pods[old].Status.PodIP && v.role != "replica" {
				return false, fmt.Sprintf("%s says it is %s", old, v.role), nil
			}
		}
		return true, "", nil
	})
	r = u.status(cluster)
	for _, nr := range r.Nodes {
		if nr.Name == old {
			assert.Equal(t, oldID, nr.ID)
			assert.Equal(t, "replica", nr.Role, "status shows the old primary as a replica")
		}
	}
	events := n.kubectl("get", "events", "--field-selector", "involvedObject.name="+cluster, "-o", "jsonpath={range .items[*]}{.reason}: {.message}{\"\\n\"}{end}")
	assert.Contains(t, events, `Request: request "failover:`+old+`" accepted`)
	assert.Contains(t, events, `RequestRefused: request "failover:`+replica+`" refused`)
	assert.Contains(t, events, "TopologyAction: Failover: requested: "+old)
	n.waitStatusMatchesServers(cluster)

	// A scale-out to 3 shards, watched with status: desired runs ahead of formed until the
	// new shard holds its slots; a slot move caught in progress names its ends.
	n.patchTopology(cluster, 3, 1)
	var midway, moves int
	n.eventually(3*time.Minute, 300*time.Millisecond, "status shows the scale-out through", func() (bool, string, error) {
		r := u.status(cluster)
		if r.Desired.Shards == 3 && r.Formed.Shards == 2 {
			midway++
		}
		names := map[string]bool{}
		for _, nr := range r.Nodes {
			names[nr.Name] = true
		}
		for _, m := range r.Moves {
			moves++
			assert.True(t, names[m.From] && names[m.To], "a move between two of the cluster's nodes: %+v", m)
			assert.Positive(t, m.SlotsLeft, "%+v", m)
		}
		active := 0
		for _, nr := range r.Nodes {
			if nr.Lifecycle == "Active" && nr.Error == "" {
				active++
			}
		}
		return r.Formed == kubectlvalkey.Topology{Shards: 3, ReplicasPerShard: 1} && len(r.Nodes) == 6 && active == 6,
			fmt.Sprintf("formed %+v, %d nodes, %d active", r.Formed, len(r.Nodes), active), nil
	})
	t.Logf("e2e: during the scale-out status said 2 of 3 shards formed %d time(s) and showed %d slot move(s) in progress", midway, moves)
	assert.Positive(t, midway, "status shows the scale-out under way (2 of 3 shards formed)")
	n.waitConverged(cluster, 6, 2*time.Minute)
	finishDay2(t, w, watch, "a failover requested with kubectl valkey and a scale-out to 3 shards")

	checkTLSStatus(t, n, u, tlsCluster, tlsSecret, notAfter)
}

// operatorPatch sends a dry-run merge patch of ValkeyCluster ns/name as the operator's
// ServiceAccount (its token kubeconfig).
func operatorPatch(ns, name, patch string) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", suite.operatorKubeconfig)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ctx, cancel := ctxTimeout(10 * time.Second)
	defer cancel()
	_, err = dyn.Resource(clustersGVR).Namespace(ns).Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
	return err
}

// applyTLSCluster creates a TLS Secret whose certificate expires at notAfter and a 1x0 cluster
// using it.
func (n *ns) applyTLSCluster(cluster, secret string, notAfter time.Time) {
	n.t.Helper()
	certs := testcerts.New(n.t, testcerts.Options{DNSNames: testcerts.ForCluster(cluster, n.name), NotAfter: notAfter})
	dir := n.t.TempDir()
	for name, data := range certs.Data() {
		require.NoError(n.t, os.WriteFile(filepath.Join(dir, name), data, 0o600))
	}
	n.kubectl("create", "secret", "generic", secret, "--type=kubernetes.io/tls", "--from-file="+filepath.Join(dir, "tls.crt"),
		"--from-file="+filepath.Join(dir, "tls.key"), "--from-file="+filepath.Join(dir, "ca.crt"))
	n.kubectlIn(fmt.Sprintf("apiVersion: valkey.gomomento.com/v1alpha1\nkind: ValkeyCluster\nmetadata:\n  name: %s\nspec:\n  configRef: standard\n  shards: 1\n  replicasPerShard: 0\n  tls:\n    secretRef: %s\n",
		cluster, secret), "apply", "-f", "-")
}

// checkTLSStatus: with TLS on, status reads the servers through valkey-cli's TLS flags (the
// pod's own CA file) and reports the certificate's expiry from the TLS Secret.
func checkTLSStatus(t *testing.T, n *ns, u *pluginUser, cluster, secret string, notAfter time.Time) {
	t.Helper()
	var r kubectlvalkey.Report
	n.eventually(time.Minute, 500*time.Millisecond, "status of the TLS cluster formed", func() (bool, string, error) {
		r = u.status(cluster)
		return r.Formed == kubectlvalkey.Topology{Shards: 1, ReplicasPerShard: 0} && len(r.Nodes) == 1, fmt.Sprintf("formed %+v, nodes %+v", r.Formed, r.Nodes), nil
	})
	for _, nr := range r.Nodes {
		assert.Empty(t, nr.Error, nr.Name)
		assert.NotEmpty(t, nr.ID, nr.Name)
		assert.Equal(t, 16384, nr.SlotCount, nr.Name)
	}
	if assert.NotNil(t, r.TLS) {
		assert.Equal(t, secret, r.TLS.Secret)
		assert.Empty(t, r.TLS.Error)
		assert.True(t, notAfter.Equal(r.TLS.NotAfter), "expiry %s, the certificate's %s", r.TLS.NotAfter, notAfter)
	}
}
