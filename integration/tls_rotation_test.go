//go:build integration

package integration

import (
	"crypto/tls"
	"crypto/x509"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valkey-io/valkey-go"

	"github.com/gomomento/valkey-operator/integration/harness"
	"github.com/gomomento/valkey-operator/internal/testcerts"
	"github.com/gomomento/valkey-operator/valkeyops"
	"github.com/gomomento/valkey-operator/valkeyops/model"
)

// What live certificate rotation relies on, against a real server: Admin.ServedCertificate
// reads the certificate a node serves without sending a command; a change of ca.crt alone is
// invisible in what a node serves yet is loaded by ReloadTLS (the node then accepts client
// certificates of the new CA, as its cluster-bus and replication peers present them); a
// certificate of the new CA is then served after a reload; an operator trusting an unrelated
// CA gets a typed error.
func TestCABundleRotationOnRealServer(t *testing.T) {
	oldCA, err := testcerts.NewCA("old CA")
	require.NoError(t, err)
	newCA, err := testcerts.NewCA("new CA")
	require.NoError(t, err)
	first := issue(t, oldCA, 100)
	f := newFixture(t, harness.Config{Image: harness.Image9(), TLS: &harness.TLSFiles{CA: oldCA.CertPEM, Cert: first.CertPEM, Key: first.KeyPEM}}, 1, 1,
		valkeyops.Options{Credentials: valkeyops.Credentials{CA: oldCA.CertPEM, ServerName: tlsServerName}})
	node := f.nodes[0]
	ctx := ctxT(t, 2*time.Minute)
	both := append(append([]byte(nil), oldCA.CertPEM...), newCA.CertPEM...)
	roots := x509.NewCertPool()
	roots.AddCert(oldCA.Cert)
	roots.AddCert(newCA.Cert)
	// An Admin as the reconciler has it during the CA change: ca.crt holds both CAs.
	admin, err := valkeyops.NewAdmin(valkeyops.Options{Credentials: valkeyops.Credentials{
		Username: model.OperatorUser, Password: operatorPassword, CA: both, ServerName: tlsServerName}})
	require.NoError(t, err)
	t.Cleanup(admin.Close)

	serial := func() int64 {
		t.Helper()
		c, err := admin.ServedCertificate(ctx, node)
		require.NoError(t, err)
		return c.SerialNumber.Int64()
	}
	// stats reads how many connections the node accepted and how often each command ran, with
	// INFO and PING left out (the probe itself, and the client's keep-alive).
	probe := nodeClient(t, node.Addr, roots, nil)
	stats := func() (conns int64, calls map[string]string) {
		t.Helper()
		info, err := probe.Do(ctx, probe.B().Info().Section("stats").Section("commandstats").Build()).ToString()
		require.NoError(t, err)
		calls = map[string]string{}
		for _, l := range strings.Split(info, "\r\n") {
			if v, ok := strings.CutPrefix(l, "total_connections_received:"); ok {
				conns, err = strconv.ParseInt(v, 10, 64)
				require.NoError(t, err)
			}
			if k, v, ok := strings.Cut(l, ":"); ok && strings.HasPrefix(k, "cmdstat_") && k != "cmdstat_info" && k != "cmdstat_ping" {
				calls[k], _, _ = strings.Cut(v, ",") // calls=N
			}
		}
		return conns, calls
	}

	t.Run("served certificate is read without a command", func(t *testing.T) {
		conns, calls := stats()
		assert.Equal(t, int64(100), serial())
		conns2, calls2 := stats()
		assert.Equal(t, conns+1, conns2, "one connection: the handshake")
		assert.Equal(t, calls, calls2, "no command")
	})

	newLeaf, err := newCA.Issue(testcerts.Leaf{CommonName: tlsServerName, DNSNames: testcerts.ForCluster("demo", "default"), Server: true, Client: true, Serial: 200})
	require.NoError(t, err)
	presentsNew := func() error {
		c, err := newNodeClient(node.Addr, roots, &newLeaf)
		if err != nil {
			return err
		}
		defer c.Close()
		return c.Do(ctx, c.B().Ping().Build()).Error()
	}

	t.Run("ca.crt alone is loaded by a reload, not visible in the served certificate", func(t *testing.T) {
		require.Error(t, presentsNew(), "before: the node does not trust the new CA")
		require.NoError(t, f.env.WriteFile(ctx, node.Name, "/etc/valkey/tls/ca.crt", both))
		assert.Error(t, presentsNew(), "new files are not read until a reload")
		require.NoError(t, admin.ReloadTLS(ctx, node))
		assert.NoError(t, presentsNew(), "after the reload the node trusts the new CA")
		assert.Equal(t, int64(100), serial(), "yet it serves the same certificate")
	})

	t.Run("a certificate of the new CA is served after a reload", func(t *testing.T) {
		require.NoError(t, f.env.WriteFile(ctx, node.Name, "/etc/valkey/tls/tls.crt", newLeaf.CertPEM))
		require.NoError(t, f.env.WriteFile(ctx, node.Name, "/etc/valkey/tls/tls.key", newLeaf.KeyPEM))
		assert.Equal(t, int64(100), serial(), "not before the reload")
		require.NoError(t, admin.ReloadTLS(ctx, node))
		assert.Equal(t, int64(200), serial())
	})

	t.Run("an unrelated CA gets a typed error", func(t *testing.T) {
		other, err := testcerts.NewCA("other CA")
		require.NoError(t, err)
		stranger, err := valkeyops.NewAdmin(valkeyops.Options{Credentials: valkeyops.Credentials{
			Username: model.OperatorUser, Password: operatorPassword, CA: other.CertPEM, ServerName: tlsServerName}})
		require.NoError(t, err)
		defer stranger.Close()
		_, err = stranger.ServedCertificate(ctx, node)
		require.Error(t, err)
		assert.ErrorIs(t, err, model.ErrUntrustedCertificate)
		var op *model.OpError
		require.ErrorAs(t, err, &op)
		assert.Equal(t, node.Name, op.Node)
	})
}

// A CA change done in one go (ca.crt with both CAs and a certificate of the new CA in the same
// Secret update) leaves the operator presenting a client certificate the node does not trust
// yet: its commands fail until the node reloads ca.crt, which only a command can make it do.
// ReloadTLS then reloads over a connection without a client certificate, and afterwards the
// operator's own connections work again.
func TestHurriedCAChangeDoesNotLockTheOperatorOut(t *testing.T) {
	oldCA, err := testcerts.NewCA("old CA")
	require.NoError(t, err)
	newCA, err := testcerts.NewCA("new CA")
	require.NoError(t, err)
	first, next := issue(t, oldCA, 100), issue(t, newCA, 200)
	f := newFixture(t, harness.Config{Image: harness.Image(), TLS: &harness.TLSFiles{CA: oldCA.CertPEM, Cert: first.CertPEM, Key: first.KeyPEM}}, 1, 1,
		valkeyops.Options{Credentials: valkeyops.Credentials{CA: oldCA.CertPEM, ServerName: tlsServerName}})
	node := f.nodes[0]
	ctx := ctxT(t, time.Minute)
	both := append(append([]byte(nil), oldCA.CertPEM...), newCA.CertPEM...)
	// The operator's credentials after the Secret update: both CAs, the new certificate.
	admin, err := valkeyops.NewAdmin(valkeyops.Options{Credentials: valkeyops.Credentials{
		Username: model.OperatorUser, Password: operatorPassword, CA: both, Cert: next.CertPEM, Key: next.KeyPEM, ServerName: tlsServerName}})
	require.NoError(t, err)
	t.Cleanup(admin.Close)

	snap, err := admin.Observe(ctx, f.nodes)
	require.NoError(t, err)
	require.False(t, snap.ByName(node.Name).Reachable, "the node refuses the new client certificate")
	for path, data := range map[string][]byte{"/etc/valkey/tls/ca.crt": both, "/etc/valkey/tls/tls.crt": next.CertPEM, "/etc/valkey/tls/tls.key": next.KeyPEM} {
		require.NoError(t, f.env.WriteFile(ctx, node.Name, path, data))
	}
	require.NoError(t, admin.ReloadTLS(ctx, node))
	served, err := admin.ServedCertificate(ctx, node)
	require.NoError(t, err)
	assert.Equal(t, int64(200), served.SerialNumber.Int64())
	snap, err = admin.Observe(ctx, f.nodes)
	require.NoError(t, err)
	assert.True(t, snap.ByName(node.Name).Reachable, "after the reload the node trusts the operator again: %v", snap.ByName(node.Name).Err)
}

// An expired certificate is what a node serves, and Admin.ServedCertificate returns it, so that
// its replacement can be rolled out; the plain verifying valkeyops.ServedCertificate refuses it.
func TestServedCertificateExpired(t *testing.T) {
	ca, err := testcerts.NewCA("test CA")
	require.NoError(t, err)
	now := time.Now()
	expired, err := ca.Issue(testcerts.Leaf{
		CommonName: tlsServerName, DNSNames: testcerts.ForCluster("demo", "default"), Server: true, Serial: 7,
		NotBefore: now.Add(-50 * time.Minute), NotAfter: now.Add(-time.Minute),
	})
	require.NoError(t, err)
	f := newFixture(t, harness.Config{Image: harness.Image(), TLS: &harness.TLSFiles{CA: ca.CertPEM, Cert: expired.CertPEM, Key: expired.KeyPEM}}, 1, 1,
		valkeyops.Options{Credentials: valkeyops.Credentials{CA: ca.CertPEM, ServerName: tlsServerName}})
	ctx := ctxT(t, time.Minute)
	c, err := f.admin.ServedCertificate(ctx, f.nodes[0])
	require.NoError(t, err)
	assert.Equal(t, int64(7), c.SerialNumber.Int64())
	assert.True(t, now.After(c.NotAfter), "it is the expired one")

	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	_, err = valkeyops.ServedCertificate(ctx, f.nodes[0].Addr, roots)
	assert.ErrorContains(t, err, "certificate has expired")
}

// newNodeClient is a client of one node as the default user, verifying the node against roots
// and, with cert, presenting it as its client certificate.
func newNodeClient(addr string, roots *x509.CertPool, cert *testcerts.Pair) (valkey.Client, error) {
	cfg := &tls.Config{RootCAs: roots, ServerName: tlsServerName, MinVersion: tls.VersionTLS12}
	if cert != nil {
		pair, err := tls.X509KeyPair(cert.CertPEM, cert.KeyPEM)
		if err != nil {
			return nil, err
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return valkey.NewClient(valkey.ClientOption{InitAddress: []string{addr}, Password: defaultPassword, TLSConfig: cfg,
		ForceSingleClient: true, DisableCache: true, DisableRetry: true})
}

func nodeClient(t *testing.T, addr string, roots *x509.CertPool, cert *testcerts.Pair) valkey.Client {
	t.Helper()
	c, err := newNodeClient(addr, roots, cert)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}
