//go:build e2e

package e2e

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valkey-io/valkey-go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gomomento/valkey-operator/internal/loadgen"
	"github.com/gomomento/valkey-operator/valkeyops/model"
)

// Live ACL and auth Secret rotation on a running 2x1 cluster, driven by kubectl while a
// cluster-mode writer goes on as the default user (kept on beside the ACL user with
// spec.defaultUser: Enabled). The writer takes its password from a
// holder the test updates the moment the auth Secret shows a new one, as an application
// re-reading the Secret would: connections it already has stay authenticated, new ones log
// in with what the holder says.
func TestLiveACLAndAuthRotation(t *testing.T) {
	n := newNamespace(t, "e2e-acl")
	const cluster = "acl"
	n.formCluster(cluster, exampleConfig, 2, 1)
	auth := cluster + "-auth"

	appPassword := &passwordHolder{pw: n.secretValue(auth, "password")}
	c := newClient(t, valkey.ClientOption{InitAddress: addrsOf(n.podIPs(cluster)), AuthCredentialsFn: appPassword.credentials})
	w := loadgen.Start(c, loadgen.Options{Prefix: "acl:", Pace: time.Millisecond})
	n.eventually(30*time.Second, 100*time.Millisecond, "writer running", func() (bool, string, error) {
		return w.Acked() >= 200, fmt.Sprintf("%d acknowledged", w.Acked()), nil
	})
	watch := n.watchState(cluster)
	writesGoOn := func(what string) {
		t.Helper()
		from := w.Acked()
		n.eventually(30*time.Second, 100*time.Millisecond, "writes go on after "+what, func() (bool, string, error) {
			return w.Acked() >= from+200, fmt.Sprintf("%d acknowledged since", w.Acked()-from), nil
		})
	}

	// A new ACL user, with a ValkeyRole of this test's own: it can AUTH on every node.
	role := n.name + "-rw"
	_, err := kubectlRun(fmt.Sprintf("apiVersion: valkey.gomomento.com/v1alpha1\nkind: ValkeyRole\nmetadata:\n  name: %s\nspec:\n  categories:\n    - name: read\n      access: allow\n    - name: write\n      access: allow\n    - name: connection\n      access: allow\n  commands:\n    - name: cluster|slots\n      access: allow\n    - name: cluster|shards\n      access: allow\n", role), "apply", "-f", "-")
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = kubectlRun("", "delete", "valkeyrole", role, "--wait=false") })
	first, second := randomPassword(t), randomPassword(t)
	setACL := func(pws ...string) time.Time {
		var hashes []string
		for _, pw := range pws {
			hashes = append(hashes, `"`+sha256Hex(pw)+`"`)
		}
		n.kubectl("patch", "valkeycluster", cluster, "--type=merge", "-p", fmt.Sprintf(
			`{"spec":{"defaultUser":"Enabled","acl":[{"username":"app","passwordHashes":[%s],"permissions":[{"roleRef":%q,"keys":[{"pattern":"app:*","access":"readwrite"}]}]}]}}`,
			strings.Join(hashes, ","), role))
		return time.Now()
	}
	edited := setACL(first)
	n.waitLogins(cluster, "app", map[string]bool{first: true})
	took := time.Since(edited)
	t.Logf("e2e: a new ACL user can AUTH on every node %.2fs after the kubectl patch", took.Seconds())
	assert.Less(t, took, 10*time.Second, "live on every node within 10 s of the edit")
	app := newClient(t, valkey.ClientOption{InitAddress: addrsOf(n.podIPs(cluster)), Username: "app", Password: first})
	ctx, cancel := ctxTimeout(30 * time.Second)
	defer cancel()
	assert.NoError(t, app.Do(ctx, app.B().Set().Key("app:1").Value("v").Build()).Error(), "the role lets app write app:*")
	err = app.Do(ctx, app.B().Set().Key("other:1").Value("v").Build()).Error()
	if assert.Error(t, err, "app may not write outside app:*") {
		assert.Contains(t, err.Error(), "NOPERM")
	}

	// Hash rotation: both hashes, then only the new one; the old password is then refused.
	setACL(first, second)
	n.waitLogins(cluster, "app", map[string]bool{first: true, second: true})
	edited = setACL(second)
	n.waitLogins(cluster, "app", map[string]bool{first: false, second: true})
	t.Logf("e2e: the removed hash's password is refused on every node %.2fs after the kubectl patch", time.Since(edited).Seconds())

	// The application password changed in the auth Secret: the new one works everywhere, the
	// old one nowhere, and the writer goes on.
	oldApp, newApp := appPassword.get(), randomPassword(t)
	edited = n.patchSecret(auth, "password", newApp)
	appPassword.set(newApp)
	n.waitLogins(cluster, "default", map[string]bool{oldApp: false, newApp: true})
	t.Logf("e2e: the application password rotated on every node %.2fs after the kubectl patch", time.Since(edited).Seconds())
	writesGoOn("the application password rotation")

	// The operator password changed: the operator moves every node, its own login and the
	// replicas' masterauth onto it, and the old one is refused everywhere.
	oldOp, newOp := n.secretValue(auth, "operator-password"), randomPassword(t)
	edited = n.patchSecret(auth, "operator-password", newOp)
	n.waitOperatorRotated(cluster, oldOp, newOp)
	t.Logf("e2e: the operator password rotated on every node (login, ACL, masterauth) %.2fs after the kubectl patch", time.Since(edited).Seconds())
	n.requireReplicasReauthenticate(cluster, newOp)
	writesGoOn("the operator password rotation")

	// Rotated again, and the operator SIGKILLed as soon as the ACL file lists both passwords
	// (the rotation under way): the restarted one logs in with the recorded password and
	// finishes it.
	oldOp, newOp = newOp, randomPassword(t)
	edited = n.patchSecret(auth, "operator-password", newOp)
	midway := false
	n.eventually(30*time.Second, 10*time.Millisecond, "the operator password rotation under way", func() (bool, string, error) {
		ctx, cancel := ctxTimeout(10 * time.Second)
		defer cancel()
		cm, err := suite.env.Kube.CoreV1().ConfigMaps(n.name).Get(ctx, cluster+"-acl", metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		for _, line := range strings.Split(cm.Data["users.acl"], "\n") {
			if strings.HasPrefix(line, "user operator ") && strings.Count(line, " #") == 2 {
				midway = true
				return true, "", nil
			}
		}
		return n.secretValue(cluster+"-auth-applied", "operator-password") == newOp, "not started", nil
	})
	crashAndRestart(t)
	t.Logf("e2e: operator SIGKILLed %.2fs after the patch (mid-rotation: %t)", time.Since(edited).Seconds(), midway)
	n.waitOperatorRotated(cluster, oldOp, newOp)
	n.requireReplicasReauthenticate(cluster, newOp)
	writesGoOn("an operator restart during the rotation")

	// The auth Secret deleted: new passwords for everything, rotated live; the cluster keeps
	// working, stays Active, and the operator stays connected.
	oldApp, oldOp = newApp, newOp
	deleted := time.Now()
	n.kubectl("delete", "secret", auth)
	n.eventually(30*time.Second, 100*time.Millisecond, "the auth Secret regenerated", func() (bool, string, error) {
		ctx, cancel := ctxTimeout(10 * time.Second)
		defer cancel()
		s, err := suite.env.Kube.CoreV1().Secrets(n.name).Get(ctx, auth, metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		pw := string(s.Data["password"])
		if pw == "" || pw == oldApp || string(s.Data["operator-password"]) == oldOp {
			return false, "old passwords", nil
		}
		appPassword.set(pw)
		return true, "", nil
	})
	n.waitLogins(cluster, "default", map[string]bool{oldApp: false, appPassword.get(): true})
	n.waitOperatorRotated(cluster, oldOp, n.secretValue(auth, "operator-password"))
	t.Logf("e2e: after deleting the auth Secret every node is on the regenerated passwords %.2fs later", time.Since(deleted).Seconds())
	n.requireReplicasReauthenticate(cluster, n.secretValue(auth, "operator-password"))
	writesGoOn("the auth Secret deletion")
	n.waitConverged(cluster, 4, time.Minute)
	for _, reason := range []string{"ConnectFailed", "ACLApplyFailed", "ObserveFailed"} {
		out := n.kubectl("get", "events", "--field-selector", "reason="+reason, "-o", "name")
		assert.Empty(t, strings.TrimSpace(out), "no %s Event: the operator stayed connected", reason)
	}
	assert.NotEmpty(t, strings.TrimSpace(n.kubectl("get", "events", "--field-selector", "reason=CredentialRotated", "-o", "name")))

	// Converged: later passes write nothing to any server and, once a pass has found every
	// server holding the wanted credentials, leave them unread (credentialsRecheck) while
	// each pass still observes every server. Passes are counted on the servers themselves
	// (of the commands they get now, CLUSTER NODES comes only from the operator's
	// observation), not in the operator's metrics, which count every cluster's passes.
	opPw := n.secretValue(auth, "operator-password")
	idle := n.commandCalls(cluster, opPw)
	settled := n.waitObserved(cluster, opPw, idle, 1)
	after := n.waitObserved(cluster, opPw, settled, 2)
	for ip, calls := range after {
		assert.Equal(t, settled[ip]["acl|getuser"], calls["acl|getuser"], "%s: passes over converged credentials do not read them again", ip)
		for _, write := range []string{"acl|setuser", "acl|deluser", "config|set"} {
			assert.Equal(t, idle[ip][write], calls[write], "%s: a converged cluster gets no %s", ip, write)
		}
	}

	res := w.Stop()
	ctx, cancel = ctxTimeout(2 * time.Minute)
	defer cancel()
	lost, firstLost := loadgen.Missing(ctx, c, "acl:", res.Acked)
	t.Logf("e2e: live ACL and auth rotation: writes acknowledged=%d rejected=%d lost=%d longest-pause=%s", len(res.Acked), res.Failed, lost, res.MaxPause.Round(time.Millisecond))
	assert.Zero(t, lost, "acknowledged writes lost; first: %v", firstLost)
	assert.Equal(t, []string{"Active"}, watch.states(), "the cluster reports Active throughout")
}

// passwordHolder is the application's current password, read at every new connection.
type passwordHolder struct {
	mu sync.Mutex
	pw string
}

func (h *passwordHolder) get() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.pw
}

func (h *passwordHolder) set(pw string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.pw = pw
}

func (h *passwordHolder) credentials(valkey.AuthCredentialsContext) (valkey.AuthCredentials, error) {
	return valkey.AuthCredentials{Username: "default", Password: h.get()}, nil
}

func randomPassword(t *testing.T) string {
	t.Helper()
	b := make([]byte, 16)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return hex.EncodeToString(b)
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// tryLogin opens a fresh connection to addr as user and pings: nil when the login works.
func tryLogin(addr, user, password string) error { return tryLoginTLS(addr, user, password, nil) }

// tryLoginTLS is tryLogin over TLS when tlsConfig is set.
func tryLoginTLS(addr, user, password string, tlsConfig *tls.Config) error {
	c, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{addr}, Username: user, Password: password,
		ForceSingleClient: true, DisableCache: true, DisableRetry: true, Dialer: dialer(), TLSConfig: tlsConfig})
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := ctxTimeout(10 * time.Second)
	defer cancel()
	return c.Do(ctx, c.B().Ping().Build()).Error()
}

// waitLogins waits until, on every pod of the cluster, user can log in with each password
// mapped to true and is refused (WRONGPASS) with each mapped to false.
func (n *ns) waitLogins(cluster, user string, want map[string]bool) {
	n.t.Helper()
	n.eventually(time.Minute, 100*time.Millisecond, fmt.Sprintf("logins of %s on every node", user), func() (bool, string, error) {
		ips := n.podIPs(cluster)
		for _, ip := range ips {
			for pw, ok := range want {
				err := tryLoginTLS(ip+":6379", user, pw, n.serverTLS)
				if ok && err != nil {
					return false, fmt.Sprintf("%s refuses a password it should accept: %v", ip, err), nil
				}
				if !ok && (err == nil || !strings.Contains(err.Error(), "WRONGPASS")) {
					return false, fmt.Sprintf("%s does not refuse a removed password: %v", ip, err), nil
				}
			}
		}
		return len(ips) > 0, fmt.Sprintf("%d pods", len(ips)), nil
	})
}

// patchSecret sets one key of a Secret with kubectl and returns when it did.
func (n *ns) patchSecret(name, key, value string) time.Time {
	n.t.Helper()
	n.kubectl("patch", "secret", name, "--type=merge", "-p", fmt.Sprintf(`{"stringData":{%q:%q}}`, key, value))
	return time.Now()
}

// waitOperatorRotated waits until every node accepts only newPw for the operator's user (and
// only the replication password derived from it for the replication user) and replicates
// with that, and the Secrets new pods start from say the same.
func (n *ns) waitOperatorRotated(cluster, oldPw, newPw string) {
	n.t.Helper()
	n.waitLogins(cluster, "operator", map[string]bool{oldPw: false, newPw: true})
	n.waitLogins(cluster, model.ReplicationUser, map[string]bool{model.ReplicationPassword(oldPw): false, model.ReplicationPassword(newPw): true})
	n.eventually(time.Minute, 100*time.Millisecond, "masterauth and the mounted replication login follow", func() (bool, string, error) {
		for _, ip := range n.podIPs(cluster) {
			msg, err := operatorCommandTLS(ip, newPw, n.serverTLS, "CONFIG", "GET", "masterauth")
			if err != nil {
				return false, err.Error(), nil
			}
			got, err := msg.AsStrMap()
			if err != nil {
				return false, err.Error(), nil
			}
			if got["masterauth"] != model.ReplicationPassword(newPw) {
				return false, ip + " replicates with another password", nil
			}
		}
		if conf := n.secretValue(cluster+"-auth", "replication.conf"); conf != "masteruser replication\nmasterauth "+model.ReplicationPassword(newPw)+"\n" {
			return false, "replication.conf not yet the new login", nil
		}
		return n.secretValue(cluster+"-auth-applied", "operator-password") == newPw, "record", nil
	})
}

// requireReplicasReauthenticate breaks every replica's link to its primary: each must come
// back up, authenticating with the current operator password.
func (n *ns) requireReplicasReauthenticate(cluster, pw string) {
	n.t.Helper()
	var replicas []string
	for _, ip := range n.podIPs(cluster) {
		info, err := replicationInfoTLS(ip, pw, n.serverTLS)
		require.NoError(n.t, err)
		if strings.Contains(info, "role:slave") || strings.Contains(info, "role:replica") {
			replicas = append(replicas, ip)
			_, err := operatorCommandTLS(ip, pw, n.serverTLS, "CLIENT", "KILL", "TYPE", "master")
			require.NoError(n.t, err, "dropping %s's link to its primary", ip)
		}
	}
	require.NotEmpty(n.t, replicas)
	n.eventually(30*time.Second, 100*time.Millisecond, "replicas re-linked to their primaries", func() (bool, string, error) {
		for _, ip := range replicas {
			info, err := replicationInfoTLS(ip, pw, n.serverTLS)
			if err != nil {
				return false, err.Error(), nil
			}
			if !strings.Contains(info, "master_link_status:up") {
				return false, ip + " link down", nil
			}
		}
		return true, "", nil
	})
}

// operatorCommand runs one command on the server at ip as the operator's user.
func operatorCommand(ip, pw string, args ...string) (valkey.ValkeyMessage, error) {
	return operatorCommandTLS(ip, pw, nil, args...)
}

// operatorCommandTLS is operatorCommand over TLS when tlsConfig is set.
func operatorCommandTLS(ip, pw string, tlsConfig *tls.Config, args ...string) (valkey.ValkeyMessage, error) {
	c, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{ip + ":6379"}, Username: "operator", Password: pw,
		ForceSingleClient: true, DisableCache: true, Dialer: dialer(), TLSConfig: tlsConfig})
	if err != nil {
		return valkey.ValkeyMessage{}, err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return c.Do(ctx, c.B().Arbitrary(args...).Build()).ToMessage()
}

// replicationInfoTLS is INFO replication of the server at ip, read as the operator (over TLS
// when tlsConfig is set).
func replicationInfoTLS(ip, pw string, tlsConfig *tls.Config) (string, error) {
	msg, err := operatorCommandTLS(ip, pw, tlsConfig, "INFO", "replication")
	if err != nil {
		return "", err
	}
	return msg.ToString()
}

// waitObserved waits until the operator's observation has reached every server of the
// cluster passes more times than in since (each pass sends one CLUSTER NODES to each server
// it reaches), and returns the command counts then.
func (n *ns) waitObserved(cluster, pw string, since map[string]map[string]int, passes int) map[string]map[string]int {
	n.t.Helper()
	var now map[string]map[string]int
	n.eventually(3*time.Minute, time.Second, fmt.Sprintf("%d more passes over every server", passes), func() (bool, string, error) {
		now = n.commandCalls(cluster, pw)
		for ip, calls := range now {
			if got := calls["cluster|nodes"] - since[ip]["cluster|nodes"]; got < passes {
				return false, fmt.Sprintf("%s: %d pass(es) since", ip, got), nil
			}
		}
		return len(now) == len(since), fmt.Sprintf("%d of %d servers", len(now), len(since)), nil
	})
	return now
}

// commandCalls reads, per pod IP, how often each command ran (INFO commandstats).
func (n *ns) commandCalls(cluster, pw string) map[string]map[string]int {
	n.t.Helper()
	out := map[string]map[string]int{}
	for _, ip := range n.podIPs(cluster) {
		msg, err := operatorCommand(ip, pw, "INFO", "commandstats")
		require.NoError(n.t, err)
		text, err := msg.ToString()
		require.NoError(n.t, err)
		calls := map[string]int{}
		for _, line := range strings.Split(text, "\n") {
			name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
			if !ok || !strings.HasPrefix(name, "cmdstat_") {
				continue
			}
			v, _, _ := strings.Cut(rest, ",")
			calls[strings.TrimPrefix(name, "cmdstat_")], err = strconv.Atoi(v)
			require.NoError(n.t, err, "%s: %q", ip, line)
		}
		out[ip] = calls
	}
	return out
}
