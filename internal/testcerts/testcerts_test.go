package testcerts_test

import (
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"

	"github.com/gomomento/valkey-operator/internal/testcerts"
)

func parse(t *testing.T, certPEM []byte) *x509.Certificate {
	t.Helper()
	certs, err := cert.ParseCertsPEM(certPEM)
	require.NoError(t, err)
	require.Len(t, certs, 1)
	return certs[0]
}

func TestNewIssuesLeafVerifiedByItsCA(t *testing.T) {
	b := testcerts.New(t, testcerts.Options{DNSNames: testcerts.ForCluster("c", "ns")})
	_, err := tls.X509KeyPair(b.Cert, b.Key)
	require.NoError(t, err, "key matches certificate")
	pool, err := cert.NewPoolFromBytes(b.CA)
	require.NoError(t, err)
	leaf := parse(t, b.Cert)
	for _, name := range []string{"c.ns.svc.cluster.local", "valkey-0.c.ns.svc.cluster.local"} {
		_, err = leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: name, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
		assert.NoError(t, err, name)
	}
	_, err = leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	assert.NoError(t, err, "client auth")
	assert.Equal(t, map[string][]byte{"tls.crt": b.Cert, "tls.key": b.Key, "ca.crt": b.CA}, b.Data())

	other := testcerts.New(t, testcerts.Options{DNSNames: testcerts.ForCluster("c", "ns")})
	otherPool, err := cert.NewPoolFromBytes(other.CA)
	require.NoError(t, err)
	_, err = leaf.Verify(x509.VerifyOptions{Roots: otherPool, DNSName: "c.ns.svc.cluster.local"})
	assert.Error(t, err, "each New has its own CA")
}

func TestNewHonoursValidity(t *testing.T) {
	nb, na := time.Now().Add(-48*time.Hour).Truncate(time.Second), time.Now().Add(-24*time.Hour).Truncate(time.Second)
	leaf := parse(t, testcerts.New(t, testcerts.Options{NotBefore: nb, NotAfter: na}).Cert)
	assert.True(t, leaf.NotBefore.Equal(nb), "NotBefore %s", leaf.NotBefore)
	assert.True(t, leaf.NotAfter.Equal(na), "NotAfter %s", leaf.NotAfter)

	leaf = parse(t, testcerts.New(t, testcerts.Options{}).Cert)
	assert.WithinDuration(t, time.Now().Add(-time.Hour), leaf.NotBefore, time.Minute)
	assert.WithinDuration(t, time.Now().Add(testcerts.Validity), leaf.NotAfter, time.Minute)
}

func TestOtherKeyMatchesNothing(t *testing.T) {
	b := testcerts.New(t, testcerts.Options{})
	k := testcerts.OtherKey(t)
	_, err := keyutil.ParsePrivateKeyPEM(k)
	require.NoError(t, err)
	_, err = tls.X509KeyPair(b.Cert, k)
	assert.Error(t, err)
}

func TestIssueLeafFields(t *testing.T) {
	ca, err := testcerts.NewCA("unit-ca")
	require.NoError(t, err)
	p, err := ca.Issue(testcerts.Leaf{CommonName: "admin", Organizations: []string{"system:masters"}, Client: true, Serial: 100,
		IPs: []net.IP{net.ParseIP("127.0.0.1")}})
	require.NoError(t, err)
	leaf := parse(t, p.CertPEM)
	assert.Equal(t, "admin", leaf.Subject.CommonName)
	assert.Equal(t, []string{"system:masters"}, leaf.Subject.Organization)
	assert.Equal(t, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, leaf.ExtKeyUsage)
	assert.Equal(t, int64(100), leaf.SerialNumber.Int64())
	assert.True(t, leaf.IPAddresses[0].Equal(net.ParseIP("127.0.0.1")))
	require.NoError(t, leaf.CheckSignatureFrom(ca.Cert))

	q, err := ca.Issue(testcerts.Leaf{CommonName: "x", Server: true})
	require.NoError(t, err)
	assert.NotEqual(t, int64(0), parse(t, q.CertPEM).SerialNumber.Sign(), "random serial")
}

func TestLoadOrCreateKeepsFilesAcrossRuns(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	ca, err := testcerts.LoadOrCreateCA(dir, "dev-ca")
	require.NoError(t, err)
	again, err := testcerts.LoadOrCreateCA(dir, "dev-ca")
	require.NoError(t, err)
	assert.Equal(t, ca.CertPEM, again.CertPEM, "same CA on the second run")
	st, err := os.Stat(filepath.Join(dir, "ca.key"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), st.Mode().Perm())

	leaf := testcerts.Leaf{CommonName: "etcd", DNSNames: []string{"localhost"}, Server: true}
	p, err := again.LoadOrIssue(dir, "etcd", leaf)
	require.NoError(t, err)
	p2, err := ca.LoadOrIssue(dir, "etcd", leaf)
	require.NoError(t, err)
	assert.Equal(t, p, p2, "issued once, then read back")
	require.NoError(t, parse(t, p.CertPEM).CheckSignatureFrom(ca.Cert))

	require.NoError(t, testcerts.EnsureServiceAccountKey(dir))
	priv, err := keyutil.PrivateKeyFromFile(filepath.Join(dir, "sa.key"))
	require.NoError(t, err)
	pubs, err := keyutil.PublicKeysFromFile(filepath.Join(dir, "sa.pub"))
	require.NoError(t, err)
	require.Len(t, pubs, 1)
	assert.Equal(t, priv.(crypto.Signer).Public(), pubs[0])
}
