// Package tlscheck validates a ValkeyCluster's TLS Secret. Its messages are part of the
// user-facing contract (docs/status.md lists them): they are written verbatim into
// status.message, so every failure is an *InvalidError whose Error() is exactly that message,
// and the checks run in the documented order so the first failure reported is always the same
// one.
package tlscheck

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"strings"
	"time"
)

// Keys of a kubernetes.io/tls Secret plus the CA bundle, in the order they are checked.
const (
	KeyCert = "tls.crt"
	KeyKey  = "tls.key"
	KeyCA   = "ca.crt"
)

// Failure kinds, in the order they are checked.
const (
	NotFound    = "NotFound"
	MissingKey  = "MissingKey"
	InvalidCert = "InvalidCertificate"
	InvalidKey  = "InvalidPrivateKey"
	KeyMismatch = "KeyMismatch"
	MissingSAN  = "MissingSAN"
)

// InvalidError is a validation failure; Message is the exact status.message text and Kind
// one of the failure kinds above.
type InvalidError struct{ Kind, Message string }

func (e *InvalidError) Error() string { return e.Message }

func invalid(kind, format string, args ...any) error {
	return &InvalidError{Kind: kind, Message: fmt.Sprintf(format, args...)}
}

// Result describes a Secret that passed validation.
type Result struct {
	// Leaf is the serving certificate from tls.crt.
	Leaf *x509.Certificate
	// Expired reports that Leaf's NotAfter lies in the past. It is a warning only: an
	// expired certificate never makes a cluster Invalid.
	Expired bool
	// Fingerprint is the SHA-256 of the leaf certificate, to warn about expiry once per cert.
	Fingerprint string
}

// ServiceName is the DNS name every node's certificate must carry (the headless Service).
func ServiceName(cluster, namespace string) string {
	return fmt.Sprintf("%s.%s.svc.cluster.local", cluster, namespace)
}

// Validate checks the Secret named secretName whose data is data (found=false when the
// Secret does not exist) for cluster in namespace, at time now.
func Validate(secretName string, found bool, data map[string][]byte, cluster, namespace string, now time.Time) (Result, error) {
	if !found {
		return Result{}, invalid(NotFound, "TLS Secret %q not found", secretName)
	}
	for _, k := range []string{KeyCert, KeyKey, KeyCA} {
		if len(bytes.TrimSpace(data[k])) == 0 {
			return Result{}, invalid(MissingKey, "TLS Secret %q missing required key %q", secretName, k)
		}
	}
	certs, ok := parseCertificates(data[KeyCert])
	if !ok {
		return Result{}, invalid(InvalidCert, "TLS Secret %q key %q is not a valid PEM-encoded X.509 certificate", secretName, KeyCert)
	}
	if _, ok := parseCertificates(data[KeyCA]); !ok {
		return Result{}, invalid(InvalidCert, "TLS Secret %q key %q is not a valid PEM-encoded X.509 certificate", secretName, KeyCA)
	}
	key, ok := parsePrivateKey(data[KeyKey])
	if !ok {
		return Result{}, invalid(InvalidKey, "TLS Secret %q key %q is not a valid PEM-encoded private key", secretName, KeyKey)
	}
	leaf := certs[0]
	if !publicKeysEqual(key.Public(), leaf.PublicKey) {
		return Result{}, invalid(KeyMismatch, "TLS Secret %q private key does not match certificate", secretName)
	}
	svc := ServiceName(cluster, namespace)
	for _, want := range []string{svc, "*." + svc} {
		if !hasDNSName(leaf, want) {
			return Result{}, invalid(MissingSAN, "TLS Secret %q certificate is missing SAN %q", secretName, want)
		}
	}
	sum := sha256.Sum256(leaf.Raw)
	return Result{Leaf: leaf, Expired: now.After(leaf.NotAfter), Fingerprint: hex.EncodeToString(sum[:])}, nil
}

// parseCertificates requires at least one PEM block and every block to be a parseable
// CERTIFICATE (a CA bundle may hold several during rotation).
func parseCertificates(raw []byte) ([]*x509.Certificate, bool) {
	var out []*x509.Certificate
	rest := raw
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			return nil, false
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, false
		}
		out = append(out, c)
	}
	if len(out) == 0 || len(bytes.TrimSpace(rest)) != 0 {
		return nil, false
	}
	return out, true
}

func parsePrivateKey(raw []byte) (crypto.Signer, bool) {
	block, _ := pem.Decode(raw)
	if block == nil {
		return nil, false
	}
	if k, err := x509.ParsePKCS8PrivateKey(block.Bytes); err == nil {
		s, ok := k.(crypto.Signer)
		return s, ok
	}
	if k, err := x509.ParsePKCS1PrivateKey(block.Bytes); err == nil {
		return k, true
	}
	if k, err := x509.ParseECPrivateKey(block.Bytes); err == nil {
		return k, true
	}
	return nil, false
}

func publicKeysEqual(a, b crypto.PublicKey) bool {
	type equaler interface{ Equal(crypto.PublicKey) bool }
	switch a.(type) {
	case *rsa.PublicKey, *ecdsa.PublicKey, ed25519.PublicKey:
		if e, ok := a.(equaler); ok {
			return e.Equal(b)
		}
	}
	return false
}

func hasDNSName(c *x509.Certificate, name string) bool {
	for _, n := range c.DNSNames {
		if strings.EqualFold(n, name) {
			return true
		}
	}
	return false
}

// ExpiryWarning is the text logged and sent as a Warning Event for an expired certificate.
func ExpiryWarning(secretName string, r Result) string {
	return fmt.Sprintf("TLS Secret %q certificate expired at %s; client connections will fail until it is renewed",
		secretName, r.Leaf.NotAfter.UTC().Format(time.RFC3339))
}
