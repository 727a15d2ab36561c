// Package testcerts is the project's one X.509 generator, built on client-go's util/cert and
// util/keyutil: certificate authorities, leaves signed by them, PEM encoding, and the files
// a control plane keeps across restarts. The dev cluster's control-plane PKI, the tests and
// the end-to-end tests all use it.
//
// For tests, New issues a CA and a leaf with chosen SANs and validity as the PEM a
// kubernetes.io/tls Secret holds. For longer-lived material, NewCA or LoadOrCreateCA give a
// CA whose Issue and LoadOrIssue sign leaves described by a Leaf.
package testcerts

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
)

// Validity is how long a leaf is valid unless its Leaf says otherwise: long enough for any
// dev session or test, short enough that a forgotten state directory does not hold a
// forever-valid admin credential.
const Validity = 365 * 24 * time.Hour

// backdate is how far before now certificates start, so small clock differences between the
// issuer and a verifier do not matter.
const backdate = time.Hour

// CA is a certificate authority held in memory together with its key.
type CA struct {
	Cert *x509.Certificate
	Key  crypto.Signer
	// CertPEM is the PEM encoding of Cert, as a ca.crt file or Secret key holds it.
	CertPEM []byte
}

// Leaf describes one certificate signed by a CA.
type Leaf struct {
	// CommonName becomes the Kubernetes user name for client certificates.
	CommonName string
	// Organizations become Kubernetes groups for client certificates.
	Organizations []string
	DNSNames      []string
	IPs           []net.IP
	// Server and Client choose the extended key usages.
	Server, Client bool
	// NotBefore and NotAfter bound the validity; zero means an hour ago and Validity from now.
	NotBefore, NotAfter time.Time
	// Serial is the serial number; zero means a random one.
	Serial int64
}

// Pair is a certificate and its private key in PEM form.
type Pair struct {
	CertPEM []byte
	KeyPEM  []byte
}

// NewCA creates a CA in memory (ECDSA P-256, self-signed by client-go's NewSelfSignedCACert).
func NewCA(commonName string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	c, err := cert.NewSelfSignedCACert(cert.Config{CommonName: commonName, NotBefore: time.Now().Add(-backdate)}, key)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: c, Key: key, CertPEM: encodeCert(c.Raw)}, nil
}

// LoadOrCreateCA reads dir/ca.crt and dir/ca.key, creating them when absent, so that a
// restarted control plane keeps trusting the credentials it already handed out.
func LoadOrCreateCA(dir, commonName string) (*CA, error) {
	certPath, keyPath := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key")
	if certPEM, err := os.ReadFile(certPath); err == nil {
		keyPEM, err := os.ReadFile(keyPath)
		if err != nil {
			return nil, fmt.Errorf("CA certificate present but key unreadable: %w", err)
		}
		return ParseCA(certPEM, keyPEM)
	}
	ca, err := NewCA(commonName)
	if err != nil {
		return nil, err
	}
	keyPEM, err := keyutil.MarshalPrivateKeyToPEM(ca.Key)
	if err != nil {
		return nil, err
	}
	if err := (Pair{CertPEM: ca.CertPEM, KeyPEM: keyPEM}).Write(dir, "ca"); err != nil {
		return nil, err
	}
	return ca, nil
}

// ParseCA reads a CA from its PEM certificate and key (PKCS#8, SEC 1 or PKCS#1).
func ParseCA(certPEM, keyPEM []byte) (*CA, error) {
	certs, err := cert.ParseCertsPEM(certPEM)
	if err != nil {
		return nil, fmt.Errorf("CA certificate: %w", err)
	}
	key, err := keyutil.ParsePrivateKeyPEM(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("CA key: %w", err)
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, errors.New("CA key cannot sign")
	}
	return &CA{Cert: certs[0], Key: signer, CertPEM: certPEM}, nil
}

// Issue signs a new certificate, with a new ECDSA P-256 key, described by leaf.
func (ca *CA) Issue(leaf Leaf) (Pair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Pair{}, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(leaf.Serial),
		Subject:      pkix.Name{CommonName: leaf.CommonName, Organization: leaf.Organizations},
		NotBefore:    leaf.NotBefore,
		NotAfter:     leaf.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		DNSNames:     leaf.DNSNames,
		IPAddresses:  leaf.IPs,
	}
	if leaf.Serial == 0 {
		tmpl.SerialNumber = randomSerial()
	}
	if tmpl.NotBefore.IsZero() {
		tmpl.NotBefore = now.Add(-backdate)
	}
	if tmpl.NotAfter.IsZero() {
		tmpl.NotAfter = now.Add(Validity)
	}
	if leaf.Server {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	if leaf.Client {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		return Pair{}, err
	}
	keyPEM, err := keyutil.MarshalPrivateKeyToPEM(key)
	if err != nil {
		return Pair{}, err
	}
	return Pair{CertPEM: encodeCert(der), KeyPEM: keyPEM}, nil
}

// LoadOrIssue returns dir/name.crt and dir/name.key, issuing and writing them when absent.
func (ca *CA) LoadOrIssue(dir, name string, leaf Leaf) (Pair, error) {
	c, errC := os.ReadFile(filepath.Join(dir, name+".crt"))
	k, errK := os.ReadFile(filepath.Join(dir, name+".key"))
	if errC == nil && errK == nil {
		return Pair{CertPEM: c, KeyPEM: k}, nil
	}
	p, err := ca.Issue(leaf)
	if err != nil {
		return Pair{}, err
	}
	return p, p.Write(dir, name)
}

// Write stores the pair as dir/name.crt (0644) and dir/name.key (0600); dir is created
// private to its owner when missing.
func (p Pair) Write(dir, name string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := keyutil.WriteKey(filepath.Join(dir, name+".key"), p.KeyPEM); err != nil {
		return err
	}
	return cert.WriteCert(filepath.Join(dir, name+".crt"), p.CertPEM)
}

// EnsureServiceAccountKey writes dir/sa.key (RSA private key, PKCS#1) and dir/sa.pub (its
// public key, PKIX) unless both exist: the key pair that signs service-account tokens.
func EnsureServiceAccountKey(dir string) error {
	priv, pub := filepath.Join(dir, "sa.key"), filepath.Join(dir, "sa.pub")
	if fileExists(priv) && fileExists(pub) {
		return nil
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	privPEM, err := keyutil.MarshalPrivateKeyToPEM(key)
	if err != nil {
		return err
	}
	pubDER, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	if err := keyutil.WriteKey(priv, privPEM); err != nil {
		return err
	}
	return os.WriteFile(pub, pem.EncodeToMemory(&pem.Block{Type: keyutil.PublicKeyBlockType, Bytes: pubDER}), 0o644)
}

// NewKeyPEM returns a new ECDSA P-256 private key in PEM form, unrelated to any certificate.
func NewKeyPEM() ([]byte, error) { return keyutil.MakeEllipticPrivateKeyPEM() }

// Bundle is the PEM data of a TLS Secret.
type Bundle struct {
	Cert, Key, CA []byte
}

// Data returns the bundle as Secret data.
func (b Bundle) Data() map[string][]byte {
	return map[string][]byte{"tls.crt": b.Cert, "tls.key": b.Key, "ca.crt": b.CA}
}

// Options shape the leaf certificate New issues.
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

// New issues a fresh CA and a server-and-client leaf signed by it, failing t on error.
func New(t testing.TB, o Options) Bundle {
	t.Helper()
	ca, err := NewCA("test-ca")
	if err != nil {
		t.Fatal(err)
	}
	p, err := ca.Issue(Leaf{CommonName: "valkey", DNSNames: o.DNSNames, Server: true, Client: true,
		NotBefore: o.NotBefore, NotAfter: o.NotAfter})
	if err != nil {
		t.Fatal(err)
	}
	return Bundle{Cert: p.CertPEM, Key: p.KeyPEM, CA: ca.CertPEM}
}

// OtherKey returns a PEM private key unrelated to any certificate, failing t on error.
func OtherKey(t testing.TB) []byte {
	t.Helper()
	k, err := NewKeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func encodeCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: cert.CertificateBlockType, Bytes: der})
}

func randomSerial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
	if err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return n.Add(n, big.NewInt(1))
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
