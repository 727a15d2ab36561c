//go:build e2e

package e2e

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valkey-io/valkey-go"

	"github.com/gomomento/valkey-operator/internal/loadgen"
	"github.com/gomomento/valkey-operator/reconciler/render"
	"github.com/gomomento/valkey-operator/valkeyops/model"
)

// TestRotationKillHalfway rotates both passwords of a 2x1 cluster's auth Secret at once (the
// application's and the operator's own) while a writer runs, and SIGKILLs the operator at the
// half-way point of the operator password's two-phase rotation (docs/users-and-passwords.md):
// some server's operator user already accepts the new password while every server still
// accepts the old one. That point is read on the real servers (ACL GETUSER) before the kill,
// and again, with the operator dead, after it. A new operator then finishes the rotation:
// every server accepts only the new passwords (the operator's, the replication login derived
// from it, the application's), masterauth and the recorded login follow, replicas
// re-authenticate with the new one, a client with the new application password works, no
// acknowledged write is lost and the cluster reports Active throughout.
func TestRotationKillHalfway(t *testing.T) {
	n := newNamespace(t, "e2e-rotkill")
	const cluster = "rotkill"
	n.formCluster(cluster, exampleConfig, 2, 1)
	auth := cluster + "-auth"

	app := &passwordHolder{pw: n.secretValue(auth, "password")}
	c := newClient(t, valkey.ClientOption{InitAddress: addrsOf(n.podIPs(cluster)), AuthCredentialsFn: app.credentials})
	w := loadgen.Start(c, loadgen.Options{Prefix: "rotkill:", Pace: time.Millisecond})
	n.eventually(30*time.Second, 100*time.Millisecond, "writer running", func() (bool, string, error) {
		return w.Acked() >= 200, fmt.Sprintf("%d acknowledged", w.Acked()), nil
	})
	watch := n.watchState(cluster)

	// One connection per server, logged in as the operator with the old password: it stays
	// logged in whatever happens to the password, and reads the operator user's hashes
	// without a new login per look.
	oldOp, oldApp := n.secretValue(auth, render.AuthOperatorPasswordKey), app.get()
	newOp, newApp := randomPassword(t), randomPassword(t)
	ips := n.podIPs(cluster)
	require.Len(t, ips, 4)
	conns := map[string]valkey.Client{}
	for _, ip := range ips {
		conns[ip] = newClient(t, valkey.ClientOption{InitAddress: []string{ip + ":6379"}, Username: model.OperatorUser, Password: oldOp, ForceSingleClient: true})
	}
	hashes := func() (map[string][]string, error) {
		out := map[string][]string{}
		for ip, c := range conns {
			h, err := operatorHashes(c)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", ip, err)
			}
			out[ip] = h
		}
		return out, nil
	}
	oldHash, newHash := sha256Hex(oldOp), sha256Hex(newOp)
	// halfway describes the servers' operator hashes: the rotation is half-way when some
	// server accepts the new password and every server still accepts the old one.
	halfway := func(held map[string][]string) (bool, string) {
		withNew, withOld := 0, 0
		for _, h := range held {
			if slices.Contains(h, newHash) {
				withNew++
			}
			if slices.Contains(h, oldHash) {
				withOld++
			}
		}
		return withNew > 0 && withOld == len(held), fmt.Sprintf("%d of %d servers accept the new operator password, %d the old", withNew, len(held), withOld)
	}
	before, err := hashes()
	require.NoError(t, err)
	ok, desc := halfway(before)
	require.False(t, ok, "not rotating yet: %s", desc)

	patched := time.Now()
	n.kubectl("patch", "secret", auth, "--type=merge", "-p", fmt.Sprintf(`{"stringData":{"password":%q,%q:%q}}`, newApp, render.AuthOperatorPasswordKey, newOp))
	app.set(newApp)
	// Asserted on the servers before the kill: poll as fast as the servers answer and kill
	// the moment it holds.
	var atKill string
	n.eventually(30*time.Second, 2*time.Millisecond, "the operator password rotation half-way", func() (bool, string, error) {
		held, err := hashes()
		if err != nil {
			return false, "", err // the old password is refused: the rotation went past half-way
		}
		ok, desc := halfway(held)
		atKill = desc
		return ok, desc, nil
	})
	require.NoError(t, suite.operator.Kill())
	t.Logf("e2e: operator SIGKILLed %.3fs after the patch, half-way: %s", time.Since(patched).Seconds(), atKill)

	func() {
		// Whatever is checked here, a new operator takes over afterwards (also on FailNow).
		defer restartKilledOperator(t)
		// The operator is gone, so what the servers hold now is what they held at the kill.
		held, err := hashes()
		require.NoError(t, err, "the old operator password still logs in everywhere")
		ok, desc := halfway(held)
		assert.True(t, ok, "the servers were half-way through the rotation at the kill: %s", desc)
		for ip, h := range held {
			want := 1
			if slices.Contains(h, newHash) {
				want = 2
				assert.NoError(t, tryLogin(ip+":6379", model.OperatorUser, newOp), "%s accepts the new operator password", ip)
			}
			assert.Len(t, h, want, "%s: the operator user accepts exactly the old password, or the old and the new", ip)
			assert.NoError(t, tryLogin(ip+":6379", model.OperatorUser, oldOp), "%s still accepts the old operator password", ip)
		}
		// The Secrets hold both sides: the wanted password, and the login the servers are
		// known to accept (the old one until every server holds the new one; the new one
		// once the operator switched to it, the old one still accepted everywhere).
		assert.True(t, n.secretValue(auth, render.AuthOperatorPasswordKey) == newOp, "the auth Secret holds the new operator password")
		applied := n.secretValue(render.AppliedAuthSecretName(cluster), render.AuthOperatorPasswordKey)
		assert.True(t, applied == oldOp || applied == newOp, "the recorded login is one of the two passwords")
		t.Logf("e2e: at the kill the recorded login had switched to the new password: %t", applied == newOp)
	}()

	restarted := time.Now()
	n.waitOperatorRotated(cluster, oldOp, newOp)
	n.waitLogins(cluster, "default", map[string]bool{oldApp: false, newApp: true})
	t.Logf("e2e: rotation finished %.2fs after the new operator started", time.Since(restarted).Seconds())
	for _, ip := range n.podIPs(cluster) {
		c := newClient(t, valkey.ClientOption{InitAddress: []string{ip + ":6379"}, Username: model.OperatorUser, Password: newOp, ForceSingleClient: true})
		h, err := operatorHashes(c)
		if assert.NoError(t, err, "%s", ip) {
			assert.Equal(t, []string{newHash}, h, "%s: the operator user accepts only the new password", ip)
		}
	}
	n.requireReplicasReauthenticate(cluster, newOp)

	// A client that logs in with the new application password now works.
	fresh := newClient(t, valkey.ClientOption{InitAddress: addrsOf(n.podIPs(cluster)), Password: newApp})
	ctx, cancel := ctxTimeout(30 * time.Second)
	defer cancel()
	require.NoError(t, fresh.Do(ctx, fresh.B().Set().Key("rotkill:fresh").Value("v").Build()).Error(), "a new client with the new password writes")
	got, err := fresh.Do(ctx, fresh.B().Get().Key("rotkill:fresh").Build()).ToString()
	assert.NoError(t, err)
	assert.Equal(t, "v", got)
	for _, reason := range []string{"ConnectFailed", "ACLApplyFailed"} {
		assert.Empty(t, strings.TrimSpace(n.kubectl("get", "events", "--field-selector", "reason="+reason, "-o", "name")), "no %s Event: neither operator was locked out", reason)
	}

	from := w.Acked()
	n.eventually(30*time.Second, 100*time.Millisecond, "writes go on after the rotation", func() (bool, string, error) {
		return w.Acked() >= from+200, fmt.Sprintf("%d acknowledged since", w.Acked()-from), nil
	})
	res := w.Stop()
	ctx, cancel = ctxTimeout(2 * time.Minute)
	defer cancel()
	lost, first := loadgen.Missing(ctx, fresh, "rotkill:", res.Acked)
	t.Logf("e2e: rotation with an operator SIGKILL half-way: writes acknowledged=%d rejected=%d lost=%d longest-pause=%s", len(res.Acked), res.Failed, lost, res.MaxPause.Round(time.Millisecond))
	assert.Zero(t, lost, "acknowledged writes lost; first: %v", first)
	assert.Equal(t, []string{"Active"}, watch.states(), "the cluster reports Active throughout")
}

// operatorHashes reads the password hashes the server behind c accepts for the operator user.
func operatorHashes(c valkey.Client) ([]string, error) {
	ctx, cancel := ctxTimeout(5 * time.Second)
	defer cancel()
	m, err := c.Do(ctx, c.B().AclGetuser().Username(model.OperatorUser).Build()).AsMap()
	if err != nil {
		return nil, err
	}
	passwords := m["passwords"]
	h, err := passwords.AsStrSlice()
	if err != nil {
		return nil, err
	}
	slices.Sort(h)
	return h, nil
}

// restartKilledOperator starts a new operator in place of the suite's killed one. The killed
// leader's Lease would hold it off until it expires; it is deleted (as admin) instead, as
// crashAndRestart does.
func restartKilledOperator(t *testing.T) {
	t.Helper()
	out, err := kubectlRun("", "delete", "lease", leaderLease, "-n", operatorNamespace, "--ignore-not-found")
	require.NoError(t, err, out)
	op, err := startOperator(suite.bin, suite.operatorKubeconfig, filepath.Join(suite.tmp, fmt.Sprintf("manager-%d.log", time.Now().UnixNano())))
	require.NoError(t, err, "restarting the operator")
	suite.operator = op
}
