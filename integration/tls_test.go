//go:build integration

package integration

import (
	"context"
	"crypto/x509"
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

const tlsServerName = "demo.default.svc.cluster.local"

// issue signs a server+client certificate for the demo cluster's service names.
func issue(t *testing.T, ca *testcerts.CA, serial int64) testcerts.Pair {
	t.Helper()
	p, err := ca.Issue(testcerts.Leaf{
		CommonName: tlsServerName, DNSNames: testcerts.ForCluster("demo", "default"),
		Server: true, Client: true, Serial: serial,
	})
	require.NoError(t, err)
	return p
}

// A TLS-only cluster (client port, replication and bus all TLS) forms, and each node serves a
// rotated certificate after ReloadTLS, without a restart. The operator presents a client
// certificate, as it may.
func TestTLSClusterAndRotation(t *testing.T) {
	for _, img := range []struct{ name, image string }{{"valkey8", harness.Image()}, {"valkey9", harness.Image9()}} {
		t.Run(img.name, func(t *testing.T) {
			t.Parallel()
			ca, err := testcerts.NewCA("test CA")
			require.NoError(t, err)
			leaf := issue(t, ca, 100)
			creds := valkeyops.Credentials{CA: ca.CertPEM, Cert: leaf.CertPEM, Key: leaf.KeyPEM, ServerName: tlsServerName}
			tlsCfg, err := creds.TLSConfig()
			require.NoError(t, err)
			roots := x509.NewCertPool()
			roots.AddCert(ca.Cert)
			f := newFixture(t, harness.Config{Image: img.image, TLS: &harness.TLSFiles{CA: ca.CertPEM, Cert: leaf.CertPEM, Key: leaf.KeyPEM}}, 3, 2,
				valkeyops.Options{Credentials: creds})
			ctx := ctxT(t, 3*time.Minute)
			require.NoError(t, f.admin.Bootstrap(ctx, f.nodes, 3))
			waitHealthy(t, f, f.nodes, 3, 1, 30*time.Second)

			c := dataClient(t, f.nodes, func(o *valkey.ClientOption) { o.TLSConfig = tlsCfg.Clone() })
			fill(t, c, "t:", 5_000)

			for _, n := range f.nodes {
				served, err := valkeyops.ServedCertificate(ctx, n.Addr, roots)
				require.NoError(t, err)
				assert.Equal(t, int64(100), served.SerialNumber.Int64())
			}

			// Rotate: new certificate files in place, then reload; the process keeps running.
			rotated := issue(t, ca, 200)
			for _, n := range f.nodes {
				require.NoError(t, f.env.WriteFile(ctx, n.Name, "/etc/valkey/tls/tls.crt", rotated.CertPEM))
				require.NoError(t, f.env.WriteFile(ctx, n.Name, "/etc/valkey/tls/tls.key", rotated.KeyPEM))
			}
			before, err := f.admin.Observe(ctx, f.nodes)
			require.NoError(t, err)
			for _, n := range f.nodes {
				require.NoError(t, f.admin.ReloadTLS(ctx, n))
				served, err := valkeyops.ServedCertificate(ctx, n.Addr, roots)
				require.NoError(t, err)
				assert.Equal(t, int64(200), served.SerialNumber.Int64(), "%s serves the rotated certificate", n.Name)
			}
			after := waitHealthy(t, f, f.nodes, 3, 1, 30*time.Second)
			for _, b := range before.Nodes {
				assert.Equal(t, b.ID, after.ByName(b.Name).ID, "no restart: %s keeps its node ID", b.Name)
			}
			// A plaintext connection is refused: TLS only.
			_, err = valkey.NewClient(valkey.ClientOption{InitAddress: []string{f.nodes[0].Addr}, Password: defaultPassword, ForceSingleClient: true, DisableCache: true})
			assert.Error(t, err)
			verify(t, c, "t:", seq(5_000))
		})
	}
}

// A node serving an expired certificate (chained to the CA, naming the service) is still
// managed: expiry is a warning, not a reason to stop. A CA the certificate does not chain to,
// or another server name, is still refused. Admins come from a Pool, as the reconciler gets
// them.
func TestTLSExpiredServerCertificate(t *testing.T) {
	t.Parallel()
	for _, image := range []string{harness.Image(), harness.Image9()} {
		t.Run(image, func(t *testing.T) {
			t.Parallel()
			ca, expired := expiredLeaf(t)
			f := newFixture(t, harness.Config{Image: image, TLS: &harness.TLSFiles{CA: ca.CertPEM, Cert: expired.CertPEM, Key: expired.KeyPEM}}, 1, 1,
				valkeyops.Options{Credentials: valkeyops.Credentials{CA: ca.CertPEM, ServerName: tlsServerName}})
			node := f.nodes[0]
			ctx := ctxT(t, time.Minute)

			roots := x509.NewCertPool()
			roots.AddCert(ca.Cert)
			_, err := valkeyops.ServedCertificate(ctx, node.Addr, roots)
			require.ErrorContains(t, err, "certificate has expired", "the node serves the expired certificate")

			other, err := testcerts.NewCA("other CA")
			require.NoError(t, err)
			creds := func(caPEM []byte, serverName string) valkeyops.Credentials {
				return valkeyops.Credentials{Username: model.OperatorUser, Password: operatorPassword, CA: caPEM, ServerName: serverName}
			}
			tests := []struct {
				name    string
				creds   valkeyops.Credentials
				wantErr string // "" = the Admin observes the node and reloads its TLS files
			}{
				{name: "expired but chained and named", creds: creds(ca.CertPEM, tlsServerName)},
				{name: "another CA", creds: creds(other.CertPEM, tlsServerName), wantErr: "certificate signed by unknown authority"},
				{name: "another server name", creds: creds(ca.CertPEM, "other.default.svc.cluster.local"), wantErr: "not other.default.svc.cluster.local"},
			}
			pool := valkeyops.NewPool(nil, t.Logf)
			t.Cleanup(pool.Close)
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					admin, err := pool.Connect(ctx, "default/demo", tt.creds)
					require.NoError(t, err)
					snap, err := admin.Observe(ctx, f.nodes)
					require.NoError(t, err)
					st := snap.ByName(node.Name)
					reloadErr := admin.ReloadTLS(ctx, node)
					if tt.wantErr == "" {
						require.True(t, st.Reachable, "observe: %v", st.Err)
						assert.NotEmpty(t, st.ID)
						assert.Equal(t, model.RolePrimary, st.Role)
						assert.NoError(t, reloadErr)
						return
					}
					assert.False(t, st.Reachable)
					require.Error(t, st.Err)
					assert.ErrorIs(t, st.Err, model.ErrUnreachable)
					assert.Contains(t, st.Err.Error(), tt.wantErr)
					require.Error(t, reloadErr)
					assert.Contains(t, reloadErr.Error(), tt.wantErr)
				})
			}
		})
	}
}

// TestTLSExpiredCertificateStopsANewCluster pins down what Valkey itself does with an expired
// certificate between its servers, where the operator has no say: the TLS cluster bus
// verifies the peer's certificate, expiry included, so two servers sharing an expired
// certificate never get to know each other and a new cluster cannot form. The operator's own
// connections ignore expiry (TestTLSExpiredServerCertificate), but formation waits for a
// valid certificate. If a Valkey release stops checking expiry on the bus, this test says so.
func TestTLSExpiredCertificateStopsANewCluster(t *testing.T) {
	t.Parallel()
	ca, expired := expiredLeaf(t)
	f := newFixture(t, harness.Config{Image: harness.Image(), TLS: &harness.TLSFiles{CA: ca.CertPEM, Cert: expired.CertPEM, Key: expired.KeyPEM}}, 1, 2,
		valkeyops.Options{Credentials: valkeyops.Credentials{CA: ca.CertPEM, ServerName: tlsServerName}})
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	err := f.admin.Bootstrap(ctx, f.nodes, 1)
	require.Error(t, err, "the servers cannot meet over a bus whose certificates have expired")

	snap, err := f.admin.Observe(context.Background(), f.nodes)
	require.NoError(t, err)
	for _, n := range snap.Nodes {
		assert.True(t, n.Reachable, "the operator still reaches %s despite the expiry", n.Name)
		assert.Equal(t, 1, n.KnownNodes, "%s knows no other server", n.Name)
	}
}

// expiredLeaf issues, from a fresh CA, a server certificate for tlsServerName that expired a
// minute ago.
func expiredLeaf(t *testing.T) (*testcerts.CA, testcerts.Pair) {
	t.Helper()
	ca, err := testcerts.NewCA("test CA")
	require.NoError(t, err)
	now := time.Now()
	expired, err := ca.Issue(testcerts.Leaf{
		CommonName: tlsServerName, DNSNames: testcerts.ForCluster("demo", "default"), Server: true,
		NotBefore: now.Add(-50 * time.Minute), NotAfter: now.Add(-time.Minute),
	})
	require.NoError(t, err)
	return ca, expired
}
