// Package pki generates the certificates and keys a local Kubernetes control
// plane needs: one CA that signs every serving and client certificate, and the
// RSA key pair that signs service-account tokens.
//
// Files are written once and reused on later runs, so a restarted control
// plane keeps trusting the kubeconfigs it already handed out.
package pki

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
	"time"
)

// validity is long enough for any dev session and short enough that a
// forgotten state directory does not hold a forever-valid admin credential.
const validity = 365 * 24 * time.Hour

// CA is a certificate authority held in memory together with its key.
type CA struct {
	Cert *x509.Certificate
	Key  crypto.Signer
	// CertPEM is the PEM encoding of Cert, as written to disk.
	CertPEM []byte
}

// Leaf describes one certificate signed by the CA.
type Leaf struct {
	// CommonName becomes the Kubernetes user name for client certificates.
	CommonName string
	// Organizations become Kubernetes groups for client certificates.
	Organizations []string
	DNSNames      []string
	IPs           []net.IP
	Server        bool
	Client        bool
}

// Pair is a certificate and key in PEM form.
type Pair struct {
	CertPEM []byte
	KeyPEM  []byte
}

// LoadOrCreateCA reads dir/ca.crt and dir/ca.key, creating them when absent.
func LoadOrCreateCA(dir, name string) (*CA, error) {
	certPath, keyPath := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key")
	if certPEM, err := os.ReadFile(certPath); err == nil {
		keyPEM, err := os.ReadFile(keyPath)
		if err != nil {
			return nil, fmt.Errorf("CA certificate present but key unreadable: %w", err)
		}
		return parseCA(certPEM, keyPEM)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, err
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, err
	}
	if err := writePair(dir, "ca", Pair{CertPEM: certPEM, KeyPEM: keyPEM}); err != nil {
		return nil, err
	}
	return parseCA(certPEM, keyPEM)
}

func parseCA(certPEM, keyPEM []byte) (*CA, error) {
	block, _ := pem.Decode(certPEM)
	if block == nil {
		return nil, errors.New("CA certificate: no PEM block")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("CA certificate: %w", err)
	}
	kb, _ := pem.Decode(keyPEM)
	if kb == nil {
		return nil, errors.New("CA key: no PEM block")
	}
	key, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("CA key: %w", err)
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, errors.New("CA key cannot sign")
	}
	return &CA{Cert: cert, Key: signer, CertPEM: certPEM}, nil
}

// Issue signs a new certificate described by leaf.
func (ca *CA) Issue(leaf Leaf) (Pair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Pair{}, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: leaf.CommonName, Organization: leaf.Organizations},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(validity),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		DNSNames:     leaf.DNSNames,
		IPAddresses:  leaf.IPs,
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
	keyPEM, err := encodeKey(key)
	if err != nil {
		return Pair{}, err
	}
	return Pair{CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), KeyPEM: keyPEM}, nil
}

// LoadOrIssue returns dir/name.crt and dir/name.key, issuing them when absent.
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
	return p, writePair(dir, name, p)
}

// EnsureServiceAccountKey writes dir/sa.key (RSA private key, PKCS#1) and
// dir/sa.pub (public key, PKIX) unless both exist.
func EnsureServiceAccountKey(dir string) error {
	priv, pub := filepath.Join(dir, "sa.key"), filepath.Join(dir, "sa.pub")
	if fileExists(priv) && fileExists(pub) {
		return nil
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	pubDER, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	if err := os.WriteFile(priv, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600); err != nil {
		return err
	}
	return os.WriteFile(pub, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}), 0o644)
}

func writePair(dir, name string, p Pair) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, name+".key"), p.KeyPEM, 0o600); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, name+".crt"), p.CertPEM, 0o644)
}

func encodeKey(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
	if err != nil {
		panic(err) // crypto/rand never fails on Linux
	}
	return n
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
