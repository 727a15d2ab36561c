package valkeyops

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"time"
)

// Credentials say how to connect to and authenticate with the nodes of one cluster. They are
// plain data (strings and PEM bytes) so callers can compare them cheaply through Token.
type Credentials struct {
	Username string // ACL user, normally OperatorUser
	Password string // never logged
	// CA is the PEM bundle the server certificate must chain to; nil or empty = plaintext.
	CA []byte
	// Cert and Key are an optional PEM client certificate and its private key.
	Cert, Key []byte
	// ServerName is the name the server certificate must carry (nodes are dialed by IP while
	// their certificates name the service). Required when CA is set.
	ServerName string
}

// Token is a hex SHA-256 over every field: two Credentials with the same Token connect the
// same way. It is derived from the password, so treat it as a secret: never log it.
func (c Credentials) Token() string {
	h := sha256.New()
	var n [8]byte
	for _, f := range [][]byte{
		[]byte("valkeyops-credentials-v1"),
		[]byte(c.Username), []byte(c.Password), c.CA, c.Cert, c.Key, []byte(c.ServerName),
	} {
		binary.BigEndian.PutUint64(n[:], uint64(len(f)))
		h.Write(n[:])
		h.Write(f)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// TLS reports whether these credentials connect over TLS.
func (c Credentials) TLS() bool { return len(c.CA) > 0 }

// String describes the credentials without the password, key or token.
func (c Credentials) String() string {
	if !c.TLS() {
		return fmt.Sprintf("user=%q tls=off", c.Username)
	}
	return fmt.Sprintf("user=%q tls=on server-name=%q client-cert=%t", c.Username, c.ServerName, len(c.Cert) > 0)
}

// GoString keeps %#v from printing the password and key.
func (c Credentials) GoString() string { return "valkeyops.Credentials{" + c.String() + "}" }

// TLSConfig returns the client TLS configuration, or nil for plaintext (empty CA).
//
// The server's chain is verified against CA and its certificate must name ServerName, but the
// validity period is not enforced: an expired (or not yet valid) server certificate is a
// warning for whoever manages the certificates, and the operator must keep managing the
// cluster meanwhile. The chain is accepted if it verifies, signatures, key usage and name
// included, at now or at some other instant when every certificate in it was valid at once
// (see verifyIgnoringValidity).
func (c Credentials) TLSConfig() (*tls.Config, error) {
	if !c.TLS() {
		return nil, nil
	}
	if c.ServerName == "" {
		return nil, errors.New("credentials: a server name is required with a CA")
	}
	cas := parseCerts(c.CA)
	if len(cas) == 0 {
		return nil, errors.New("credentials: CA holds no parsable PEM certificate")
	}
	roots := x509.NewCertPool()
	for _, ca := range cas {
		roots.AddCert(ca)
	}
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS12,
		ServerName: c.ServerName,
		// The standard verification also enforces the validity period; it is replaced by
		// verifyIgnoringValidity, which checks everything else.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			return verifyIgnoringValidity(cs.PeerCertificates, roots, cas, c.ServerName)
		},
	}
	if len(c.Cert) > 0 || len(c.Key) > 0 {
		pair, err := tls.X509KeyPair(c.Cert, c.Key)
		if err != nil {
			return nil, fmt.Errorf("credentials: client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
		// An expired client certificate is not offered. The servers verify a client
		// certificate only when one is presented (tls-auth-clients optional), and then expiry
		// included: a new connection presenting an expired one is refused ("tls: expired
		// certificate"), while one that presents none is taken. Decided at each handshake, so
		// a pooled client made before the expiry keeps reconnecting after it.
		leaf := pair.Leaf
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			if leaf != nil && time.Now().After(leaf.NotAfter) {
				return &tls.Certificate{}, nil
			}
			return &pair, nil
		}
	}
	return cfg, nil
}

// verifyIgnoringValidity verifies chain[0] for serverName against roots without enforcing
// validity periods. It verifies at now clamped into the leaf's validity window; failing that,
// at each instant within that window when one certificate of the chain (the peer's or one of
// cas) becomes valid. A chain whose certificates were all valid at once verifies at the latest
// of their NotBefore times, so that is found; a chain that is wrong in any other way fails at
// every instant and the error of the first attempt is returned. A leaf that expired before
// its CA certificate became valid is refused.
func verifyIgnoringValidity(chain []*x509.Certificate, roots *x509.CertPool, cas []*x509.Certificate, serverName string) error {
	if len(chain) == 0 {
		return errors.New("tls: server presented no certificate")
	}
	leaf := chain[0]
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	verifyAt := func(at time.Time) error {
		_, err := leaf.Verify(x509.VerifyOptions{
			Roots:         roots,
			Intermediates: inter,
			DNSName:       serverName,
			CurrentTime:   at,
			KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		})
		return err
	}
	now := time.Now()
	if now.After(leaf.NotAfter) {
		now = leaf.NotAfter
	}
	if now.Before(leaf.NotBefore) {
		now = leaf.NotBefore
	}
	first := verifyAt(now)
	if first == nil {
		return nil
	}
	for _, c := range append(append([]*x509.Certificate(nil), chain...), cas...) {
		if c.NotBefore.Before(leaf.NotBefore) || c.NotBefore.After(leaf.NotAfter) {
			continue // the leaf is not valid then, or leaf.NotBefore is later and tried too
		}
		if verifyAt(c.NotBefore) == nil {
			return nil
		}
	}
	return first
}

// parseCerts returns the certificates of a PEM bundle, skipping blocks that are not
// certificates or do not parse (as x509.CertPool.AppendCertsFromPEM does).
func parseCerts(bundle []byte) []*x509.Certificate {
	var certs []*x509.Certificate
	for len(bundle) > 0 {
		var b *pem.Block
		b, bundle = pem.Decode(bundle)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" || len(b.Headers) != 0 {
			continue
		}
		if c, err := x509.ParseCertificate(b.Bytes); err == nil {
			certs = append(certs, c)
		}
	}
	return certs
}
