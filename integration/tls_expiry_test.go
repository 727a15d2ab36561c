//go:build integration

package integration

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valkey-io/valkey-go"

	"github.com/gomomento/valkey-operator/integration/harness"
	"github.com/gomomento/valkey-operator/internal/poll"
	"github.com/gomomento/valkey-operator/internal/testcerts"
	"github.com/gomomento/valkey-operator/valkeyops"
	"github.com/gomomento/valkey-operator/valkeyops/model"
)

// TestTLSCertificateExpiresUnderARunningCluster pins down what real servers do when the
// certificate of a formed TLS cluster passes its NotAfter, with the operator's credentials as
// the reconciler builds them (ca.crt trusted, tls.crt presented as client certificate):
//
//   - the formed cluster keeps serving: its bus and replication links, made before the
//     expiry, hold, and a client connected before keeps reading and writing;
//   - a new connection presenting the expired certificate as client certificate is refused,
//     so the operator's connections stop offering it (valkeyops.Credentials.TLSConfig) and
//     still get in, fresh ones too;
//   - a node that joins then cannot: the bus refuses an expired peer, so the new node never
//     gets past the handshake;
//   - renewing the certificate (new files, then ReloadTLS over the operator's connections)
//     succeeds while the old one is expired, and the same join then completes.
func TestTLSCertificateExpiresUnderARunningCluster(t *testing.T) {
	t.Parallel()
	ca, err := testcerts.NewCA("test CA")
	require.NoError(t, err)
	notAfter := time.Now().Add(20 * time.Second)
	short, err := ca.Issue(testcerts.Leaf{CommonName: tlsServerName, DNSNames: testcerts.ForCluster("demo", "default"),
		Server: true, Client: true, Serial: 1, NotBefore: time.Now().Add(-time.Hour), NotAfter: notAfter})
	require.NoError(t, err)
	creds := func(p testcerts.Pair) valkeyops.Credentials {
		return valkeyops.Credentials{Username: model.OperatorUser, Password: operatorPassword,
			CA: ca.CertPEM, Cert: p.CertPEM, Key: p.KeyPEM, ServerName: tlsServerName}
	}
	f := newFixture(t, harness.Config{Image: harness.Image(), TLS: &harness.TLSFiles{CA: ca.CertPEM, Cert: short.CertPEM, Key: short.KeyPEM}}, 1, 3,
		valkeyops.Options{Credentials: creds(short)})
	ctx := ctxT(t, 4*time.Minute)
	formed, joiner := f.nodes[:2], f.nodes[2]
	require.NoError(t, f.admin.Bootstrap(ctx, formed, 1))
	waitHealthy(t, f, formed, 1, 1, 30*time.Second)
	require.True(t, time.Now().Before(notAfter), "formed before the certificate expired")

	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	strict := &tls.Config{RootCAs: roots, ServerName: tlsServerName, MinVersion: tls.VersionTLS12}
	c := dataClient(t, formed, func(o *valkey.ClientOption) { o.TLSConfig = strict.Clone() })
	fill(t, c, "x:", 1_000)

	require.NoError(t, poll.Until(ctx, 200*time.Millisecond, time.Minute, "the certificate expired", func(context.Context) (bool, string, error) {
		return time.Now().After(notAfter.Add(time.Second)), "", nil
	}))

	t.Run("the formed cluster keeps serving", func(t *testing.T) {
		snap := waitHealthy(t, f, formed, 1, 1, 5*time.Second)
		for _, n := range snap.Nodes {
			assert.True(t, n.Reachable, n.Name)
		}
		require.NoError(t, c.Do(ctx, c.B().Set().Key("x:after").Value("v").Build()).Error(), "a client connected before writes")
		verify(t, c, "x:", seq(1_000))
		_, err := newNodeClient(formed[0].Addr, roots, nil)
		assert.ErrorContains(t, err, "certificate has expired", "a new client verifying dates is refused: the server serves the expired certificate")
	})

	t.Run("the operator gets in over fresh connections", func(t *testing.T) {
		// The servers refuse a connection presenting the expired certificate as client
		// certificate (verified here against the CA a minute before the expiry, so that only
		// the server's verdict counts)...
		pair, err := tls.X509KeyPair(short.CertPEM, short.KeyPEM)
		require.NoError(t, err)
		presenting := strict.Clone()
		presenting.Certificates = []tls.Certificate{pair}
		presenting.Time = func() time.Time { return notAfter.Add(-time.Minute) }
		// TLS 1.2: the server checks a client certificate inside the handshake, so its alert
		// is what the client reads. Under TLS 1.3 the client's handshake ends first and the
		// refusal may reach it only as a reset connection, which names no cause.
		presenting.MaxVersion = tls.VersionTLS12
		_, err = valkey.NewClient(valkey.ClientOption{InitAddress: []string{formed[0].Addr}, Password: defaultPassword, TLSConfig: presenting,
			ForceSingleClient: true, DisableCache: true, DisableRetry: true})
		require.Error(t, err)
		assert.Contains(t, err.Error(), "expired certificate", "the server refuses an expired client certificate")
		// ...so the operator's connections do not offer it, and get in.
		fresh, err := valkeyops.NewAdmin(valkeyops.Options{Credentials: creds(short)})
		require.NoError(t, err)
		defer fresh.Close()
		snap, err := fresh.Observe(ctx, f.nodes)
		require.NoError(t, err)
		for _, n := range snap.Nodes {
			assert.True(t, n.Reachable, "%s: %v", n.Name, n.Err)
		}
	})

	t.Run("a node cannot join while the certificate is expired", func(t *testing.T) {
		jctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		err := f.admin.Bootstrap(jctx, f.nodes, 1)
		require.Error(t, err, "the bus refuses the expired peer")
		t.Logf("join while expired: %v", err)
		snap, err := f.admin.Observe(ctx, f.nodes)
		require.NoError(t, err)
		j := snap.ByName(joiner.Name)
		require.True(t, j.Reachable)
		assert.Empty(t, j.Slots, "the joiner holds no slots")
		assert.Equal(t, 1, j.KnownNodes, "the joiner met no server: its bus handshakes were refused")
		for _, n := range snap.Nodes {
			t.Logf("%s knows %d node(s)", n.Name, n.KnownNodes)
		}
		assert.Empty(t, model.Health(&model.Snapshot{Nodes: []model.NodeState{*snap.ByName(formed[0].Name), *snap.ByName(formed[1].Name)}}, 1, 1),
			"the formed nodes stay healthy")
	})

	t.Run("renewing succeeds live, then the join completes", func(t *testing.T) {
		renewed := issue(t, ca, 2)
		for _, n := range f.nodes {
			require.NoError(t, f.env.WriteFile(ctx, n.Name, "/etc/valkey/tls/tls.crt", renewed.CertPEM))
			require.NoError(t, f.env.WriteFile(ctx, n.Name, "/etc/valkey/tls/tls.key", renewed.KeyPEM))
		}
		// The operator's credentials follow the Secret: it now presents the renewed one.
		admin, err := valkeyops.NewAdmin(valkeyops.Options{Credentials: creds(renewed)})
		require.NoError(t, err)
		defer admin.Close()
		for _, n := range f.nodes {
			before, err := admin.ServedCertificate(ctx, n)
			require.NoError(t, err, "the expired certificate is read, not refused")
			assert.Equal(t, int64(1), before.SerialNumber.Int64())
			require.NoError(t, admin.ReloadTLS(ctx, n))
			after, err := admin.ServedCertificate(ctx, n)
			require.NoError(t, err)
			assert.Equal(t, int64(2), after.SerialNumber.Int64(), "%s serves the renewed certificate", n.Name)
		}
		require.NoError(t, admin.Bootstrap(ctx, f.nodes, 1), "the join completes")
		require.NoError(t, poll.Until(ctx, 100*time.Millisecond, 30*time.Second, "1 shard with 2 replicas healthy", func(ctx context.Context) (bool, string, error) {
			snap, err := admin.Observe(ctx, f.nodes)
			if err != nil {
				return false, err.Error(), nil
			}
			reasons := model.Health(snap, 1, 2)
			return len(reasons) == 0, fmt.Sprint(reasons), nil
		}))
		verify(t, c, "x:", seq(1_000))
	})
}
