// Package testcerts generates certificates for tests: a CA and leaves with chosen SANs,
// validity and keys, encoded as the PEM a kubernetes.io/tls Secret holds.
package testcerts

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"testing"
	"time"
)

// Bundle is the PEM data of a TLS Secret.
type Bundle struct {
	Cert, Key, CA []byte
}

// Data returns the bundle as Secret data.
func (b Bundle) Data() map[string][]byte {
	return map[string][]byte{"tls.crt": b.Cert, "tls.key": b.Key, "ca.crt": b.CA}
}

// Options shape the leaf certificate.
type Options struct {
	DNSNames  []string
	NotBefore time.Time // zero = an hour ago
	NotAfter  time.Time // zero = in a year
}

// ForCluster returns the DNS names a valid cluster certificate carries.
func ForCluster(cluster, namespace string) []string {
	svc := cluster + "." + namespace + ".svc.cluster.local"
	return []string{svc, "*." + svc}
}

// New issues a CA and a leaf signed by it.
func New(t testing.TB, o Options) Bundle {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "test-ca"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(365 * 24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caKey.Public(), caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	nb, na := o.NotBefore, o.NotAfter
	if nb.IsZero() {
		nb = time.Now().Add(-time.Hour)
	}
	if na.IsZero() {
		na = time.Now().Add(365 * 24 * time.Hour)
	}
	leafTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "valkey"},
		DNSNames:     o.DNSNames,
		NotBefore:    nb,
		NotAfter:     na,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, leafTmpl, caCert, key.Public(), caKey)
	if err != nil {
		t.Fatal(err)
	}
	return Bundle{
		Cert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		Key:  encodeKey(t, key),
		CA:   pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
	}
}

// OtherKey returns a PEM private key unrelated to any certificate.
func OtherKey(t testing.TB) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return encodeKey(t, key)
}

func encodeKey(t testing.TB, key *ecdsa.PrivateKey) []byte {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
}
