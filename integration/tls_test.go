package integration

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valkey-io/valkey-go"

	"github.com/gomomento/valkey-operator/integration/harness"
	"github.com/gomomento/valkey-operator/valkeyops"
)

const tlsServerName = "demo.default.svc.cluster.local"

type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newCA(t *testing.T) *testCA {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue signs a server+client certificate for the service names with the given serial.
func (ca *testCA) issue(t *testing.T, serial int64) (certPEM, keyPEM []byte) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: tlsServerName},
		DNSNames:  []string{tlsServerName, "*." + tlsServerName},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	require.NoError(t, err)
	kd, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kd})
}

// A TLS-only cluster (client port, replication and bus all TLS) forms, and each node serves a
// rotated certificate after ReloadTLS, without a restart.
func TestTLSClusterAndRotation(t *testing.T) {
	for _, img := range []struct{ name, image string }{{"valkey8", harness.Image()}, {"valkey9", harness.Image9()}} {
		t.Run(img.name, func(t *testing.T) {
			t.Parallel()
			ca := newCA(t)
			cert, key := ca.issue(t, 100)
			roots := x509.NewCertPool()
			roots.AppendCertsFromPEM(ca.pem)
			tlsCfg := &tls.Config{RootCAs: roots, ServerName: tlsServerName, MinVersion: tls.VersionTLS12}
			f := newFixture(t, harness.Config{Image: img.image, TLS: &harness.TLSFiles{CA: ca.pem, Cert: cert, Key: key}}, 3, 2,
				valkeyops.Options{TLS: tlsCfg})
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
			newCert, newKey := ca.issue(t, 200)
			for _, n := range f.nodes {
				require.NoError(t, f.env.WriteFile(ctx, n.Name, "/etc/valkey/tls/tls.crt", newCert))
				require.NoError(t, f.env.WriteFile(ctx, n.Name, "/etc/valkey/tls/tls.key", newKey))
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
