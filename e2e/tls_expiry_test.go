//go:build e2e

package e2e

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gomomento/valkey-operator/internal/loadgen"
	"github.com/gomomento/valkey-operator/internal/testcerts"
)

// TestCertificateExpiryOnALiveCluster lets the certificate of an Active 1x1 TLS cluster expire
// on real servers, with a writer going on through a TLS cluster client:
//
//   - the cluster stays Active, with a CertificateExpired Warning, and keeps serving (its
//     bus and replication links, made before the expiry, hold; new client connections are
//     taken by a client that checks the chain and the name, as the servers present the
//     expired certificate);
//   - a replica added meanwhile (replicasPerShard 1 -> 2) cannot join, since the servers
//     refuse an expired peer on the cluster bus: the change stalls with a TopologyStalled
//     Warning that names the expiry, the cluster stays Active and the formed nodes untouched;
//   - renewing the Secret then rolls the new certificate out live (the same pods serve it)
//     and the stalled change completes: three nodes Active, all slots served.
//
// The certificate that expires is put in place by a live rotation once the cluster is
// Active, with a NotAfter 25 s ahead: however long forming takes, it is formed first.
func TestCertificateExpiryOnALiveCluster(t *testing.T) {
	n := newNamespace(t, "e2e-expiry")
	const cluster, secret = "expiry", "expiry-tls"
	applyMenu(n)
	ca, err := testcerts.NewCA("e2e expiry CA")
	require.NoError(t, err)
	leaf := func(serial int64, notAfter time.Time) testcerts.Pair {
		p, err := ca.Issue(testcerts.Leaf{CommonName: "valkey", DNSNames: testcerts.ForCluster(cluster, n.name),
			Server: true, Client: true, Serial: serial, NotAfter: notAfter})
		require.NoError(t, err)
		return p
	}
	serverName := testcerts.ForCluster(cluster, n.name)[0]
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)

	first := leaf(1, time.Time{}) // valid for testcerts' default period
	dir := t.TempDir()
	for name, data := range map[string][]byte{"tls.crt": first.CertPEM, "tls.key": first.KeyPEM, "ca.crt": ca.CertPEM} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), data, 0o600))
	}
	n.kubectl("create", "secret", "generic", secret, "--type=kubernetes.io/tls",
		"--from-file=tls.crt="+filepath.Join(dir, "tls.crt"), "--from-file=tls.key="+filepath.Join(dir, "tls.key"),
		"--from-file=ca.crt="+filepath.Join(dir, "ca.crt"))
	start := time.Now()
	n.kubectlIn(fmt.Sprintf("apiVersion: valkey.gomomento.com/v1alpha1\nkind: ValkeyCluster\nmetadata:\n  name: %s\nspec:\n  configRef: standard\n  shards: 1\n  replicasPerShard: 1\n  tls:\n    secretRef: %s\n",
		cluster, secret), "apply", "-f", "-")
	n.waitState(cluster, "Active", 3*time.Minute)
	n.waitTLSConverged(cluster, 2, roots, serverName)
	t.Logf("e2e: expiry: TLS 1x1 Active and converged %.1fs after apply", time.Since(start).Seconds())

	// The certificate that will expire, rolled out live.
	notAfter := time.Now().Add(25 * time.Second).Truncate(time.Second)
	short := leaf(2, notAfter)
	n.rotateSecret(cluster, secret, map[string][]byte{"tls.crt": short.CertPEM, "tls.key": short.KeyPEM}, "every node serves serial 2",
		func(ip string) (bool, string) { return servesSerial(ip, roots, "2") })
	require.True(t, time.Now().Before(notAfter), "serial 2 was rolled out before it expired")

	// A client that checks the chain and the name but takes the served certificate as valid at
	// a moment before its expiry: whether the servers still serve is the question, not whether
	// a strict client would refuse them.
	ips := n.podIPs(cluster)
	require.Len(t, ips, 2)
	password := n.secretValue(cluster+"-auth", "password")
	lenient := &tls.Config{RootCAs: roots, ServerName: serverName, MinVersion: tls.VersionTLS12,
		Time: func() time.Time { return notAfter.Add(-5 * time.Second) }}
	c := newClusterClient(t, addrsOf(ips), password, lenient)
	w := loadgen.Start(c, loadgen.Options{Prefix: "expiry:", Pace: 2 * time.Millisecond})
	watch := n.watchState(cluster)
	podsBefore := n.podIdentities(cluster)
	nodesBefore, err := n.nodeStatuses(cluster)
	require.NoError(t, err)
	expiredAt := notAfter.UTC().Format(time.RFC3339)

	// 1. The certificate expires: a Warning, the cluster stays Active and serves.
	n.eventually(time.Minute, 500*time.Millisecond, "the certificate expired and the operator says so", func() (bool, string, error) {
		if !time.Now().After(notAfter) {
			return false, "not expired yet", nil
		}
		return n.warned("CertificateExpired", fmt.Sprintf("TLS Secret %q certificate expired at %s", secret, expiredAt))
	})
	ackedAtExpiry := w.Acked()
	n.eventually(30*time.Second, 100*time.Millisecond, "writes acknowledged after the expiry", func() (bool, string, error) {
		return w.Acked() >= ackedAtExpiry+200, fmt.Sprintf("%d acknowledged since", w.Acked()-ackedAtExpiry), nil
	})
	fresh := newClusterClient(t, addrsOf(ips), password, lenient.Clone())
	ctx, cancel := ctxTimeout(30 * time.Second)
	require.NoError(t, fresh.Do(ctx, fresh.B().Set().Key("expiry:fresh").Value("v").Build()).Error(), "a new connection after the expiry")
	got, err := fresh.Do(ctx, fresh.B().Get().Key("expiry:fresh").Build()).ToString()
	cancel()
	require.NoError(t, err)
	assert.Equal(t, "v", got)
	state, _, err := n.state(cluster)
	require.NoError(t, err)
	assert.Equal(t, "Active", state, "an expired certificate leaves the cluster Active")

	// 2. A replica added now cannot join: the change stalls with a Warning naming the expiry.
	n.kubectl("patch", "valkeycluster", cluster, "--type=merge", "-p", `{"spec":{"replicasPerShard":2}}`)
	stallNote := fmt.Sprintf("the TLS certificate of Secret %q expired at %s; servers refuse an expired peer on the cluster bus", secret, expiredAt)
	n.eventually(2*time.Minute, 500*time.Millisecond, "the scale-out stalls on the expiry", func() (bool, string, error) {
		return n.warned("TopologyStalled", stallNote)
	})
	stalled := time.Now()
	nodes, err := n.nodeStatuses(cluster)
	require.NoError(t, err)
	require.Len(t, nodes, 3, "the new node is made; only its joining waits")
	joining := ""
	for _, s := range nodes {
		if s.Lifecycle == "Joining" {
			joining = s.Name
		}
	}
	require.NotEmpty(t, joining, "the new ValkeyNode waits as Joining: %+v", nodes)
	ackedAtStall := w.Acked()
	n.eventually(30*time.Second, 100*time.Millisecond, "writes acknowledged while stalled", func() (bool, string, error) {
		return w.Acked() >= ackedAtStall+200, fmt.Sprintf("%d acknowledged since", w.Acked()-ackedAtStall), nil
	})
	now, err := n.nodeStatuses(cluster)
	require.NoError(t, err)
	assert.Subset(t, now, nodesBefore, "the formed nodes keep their IDs, roles and lifecycle while stalled")

	// 3. Renewing the Secret rolls the certificate out live, and the stalled change completes.
	renewed := leaf(3, time.Time{})
	took := n.rotateSecret(cluster, secret, map[string][]byte{"tls.crt": renewed.CertPEM, "tls.key": renewed.KeyPEM}, "every node serves serial 3",
		func(ip string) (bool, string) { return servesSerial(ip, roots, "3") })
	t.Logf("e2e: expiry: renewed certificate served by every node (3) %.1fs after kubectl patch; stalled %.1fs", took.Seconds(), time.Since(stalled).Seconds())
	renewedAt := time.Now()
	n.waitTLSConverged(cluster, 3, roots, serverName)
	t.Logf("e2e: expiry: the stalled scale-out completed %.1fs after the renewed certificate was served", time.Since(renewedAt).Seconds())

	res := w.Stop()
	ctx, cancel = ctxTimeout(2 * time.Minute)
	defer cancel()
	lost, firstLost := loadgen.Missing(ctx, c, "expiry:", res.Acked)
	t.Logf("e2e: expiry: writes acknowledged=%d rejected=%d lost=%d longest-pause=%s", len(res.Acked), res.Failed, lost, res.MaxPause.Round(time.Millisecond))
	assert.Zero(t, lost, "acknowledged writes lost; first: %v", firstLost)
	assert.Equal(t, []string{"Active"}, watch.states(), "the cluster reports Active throughout")
	podsAfter := n.podIdentities(cluster)
	for name, id := range podsBefore {
		assert.Equal(t, id, podsAfter[name], "pod %s neither replaced nor restarted", name)
	}
	after, err := n.nodeStatuses(cluster)
	require.NoError(t, err)
	assert.Subset(t, after, nodesBefore, "no failover: the formed nodes keep their IDs and roles")
	roles := map[string]int{}
	for _, s := range after {
		roles[s.Role]++
	}
	assert.Equal(t, map[string]int{"primary": 1, "replica": 2}, roles, "the added node is a replica")
	events := n.kubectl("get", "events", "--field-selector", "reason=CertificateRotated", "-o", "jsonpath={range .items[*]}{.message}{\"\\n\"}{end}")
	assert.Contains(t, events, "Every node (3) serves certificate serial 3", "the renewal is an Event, every node included")
}

// warned reports whether a Warning Event with reason whose message contains text was recorded
// in the namespace, for eventually.
func (n *ns) warned(reason, text string) (bool, string, error) {
	out, err := kubectlRun("", "-n", n.name, "get", "events", "--field-selector", "type=Warning",
		"-o", "jsonpath={range .items[*]}{.reason}: {.message}{\"\\n\"}{end}")
	if err != nil {
		return false, err.Error(), nil
	}
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, reason+": ") && strings.Contains(l, text) {
			return true, "", nil
		}
	}
	return false, "Warnings: " + strings.ReplaceAll(strings.TrimSpace(out), "\n", " | "), nil
}
