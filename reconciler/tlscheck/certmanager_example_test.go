package tlscheck_test

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/gomomento/valkey-operator/reconciler/tlscheck"
)

// TestCertManagerExample: the Secret cert-manager writes for examples/cert-manager's serving
// Certificate passes the operator's own check, and the same Secret without one of the two
// names the operator requires is refused with its documented message. cert-manager is not
// run: the test reads the example, issues what each Certificate describes (key algorithm and
// size, encoding, duration, usages, issuer chain) and lays it out as cert-manager lays out
// the Secret, from what cert-manager documents (see certManager below). Whether the real
// cert-manager writes this is proved only where it runs; the operator's side is what this
// holds.
func TestCertManagerExample(t *testing.T) {
	const namespace = "default" // the namespace the example's dnsNames are written for
	cm := readCertManagerExample(t)
	clusterName, secretRef := readSecureCluster(t)
	serving, ok := cm.certificateFor(secretRef)
	require.True(t, ok, "a Certificate writes the Secret %q that valkeycluster-secure.yaml's tls.secretRef names", secretRef)
	require.Equal(t, []string{tlscheck.ServiceName(clusterName, namespace), "*." + tlscheck.ServiceName(clusterName, namespace)},
		serving.DNSNames, "the example's names are the two the operator requires")

	tests := []struct {
		name    string
		edit    func(*certificateSpec)
		chain   bool   // the issuer's chain follows the leaf in tls.crt (an intermediate CA issuer)
		keyType string // PEM block type of tls.key
		message string // "" = accepted
	}{
		{name: "as in the example", keyType: "EC PRIVATE KEY"},
		{name: "RSA key in the default PKCS#1 encoding", keyType: "RSA PRIVATE KEY",
			edit: func(s *certificateSpec) { s.PrivateKey = privateKey{Algorithm: "RSA", Size: 2048} }},
		{name: "PKCS#8 encoding", keyType: "PRIVATE KEY",
			edit: func(s *certificateSpec) { s.PrivateKey.Encoding = "PKCS8" }},
		{name: "chain after the leaf in tls.crt", chain: true, keyType: "EC PRIVATE KEY"},
		{name: "without the Service name", keyType: "EC PRIVATE KEY",
			edit:    func(s *certificateSpec) { s.DNSNames = s.DNSNames[1:] },
			message: `TLS Secret "secure-cluster-tls" certificate is missing SAN "secure-cluster.default.svc.cluster.local"`},
		{name: "without the wildcard", keyType: "EC PRIVATE KEY",
			edit:    func(s *certificateSpec) { s.DNSNames = s.DNSNames[:1] },
			message: `TLS Secret "secure-cluster-tls" certificate is missing SAN "*.secure-cluster.default.svc.cluster.local"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			spec := serving
			spec.DNSNames = slices.Clone(serving.DNSNames)
			if tc.edit != nil {
				tc.edit(&spec)
			}
			data := cm.issue(t, spec)
			caData := cm.secret(t, cm.caSecretOf(t, spec))
			assert.Equal(t, caData["tls.crt"], data["ca.crt"], "ca.crt is the CA the serving Certificate chains to")
			block, _ := pem.Decode(data["tls.key"])
			require.NotNil(t, block)
			assert.Equal(t, tc.keyType, block.Type, "tls.key's encoding")
			if tc.chain {
				data["tls.crt"] = append(data["tls.crt"], data["ca.crt"]...)
			}

			res, err := tlscheck.Validate(secretRef, true, data, clusterName, namespace, time.Now())
			if tc.message != "" {
				var inv *tlscheck.InvalidError
				require.True(t, errors.As(err, &inv), "want *InvalidError, got %v", err)
				assert.Equal(t, tc.message, inv.Message)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, spec.DNSNames, res.Leaf.DNSNames, "the leaf is the first certificate of tls.crt")
			assert.False(t, res.Expired)
			// What Validate does not check but the servers and the operator's connections
			// do: the leaf chains to ca.crt, as a server for the Service name (the name the
			// operator dials under) and for a pod's name, and as a client (cluster bus,
			// replication).
			roots := x509.NewCertPool()
			require.True(t, roots.AppendCertsFromPEM(data["ca.crt"]))
			for _, v := range []x509.VerifyOptions{
				{DNSName: tlscheck.ServiceName(clusterName, namespace), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}},
				{DNSName: "secure-cluster-0." + tlscheck.ServiceName(clusterName, namespace), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}},
				{KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}},
			} {
				v.Roots = roots
				_, err := res.Leaf.Verify(v)
				assert.NoError(t, err, "verify for %q %v", v.DNSName, v.KeyUsages)
			}
		})
	}
}

// The parts of cert-manager.io/v1 Issuer and Certificate the example sets. The example is read
// strictly, so a field added to it that these do not model fails the test instead of being
// ignored by it.
type (
	objectMeta struct {
		Name string `json:"name"`
	}
	issuer struct {
		APIVersion string     `json:"apiVersion"`
		Kind       string     `json:"kind"`
		Metadata   objectMeta `json:"metadata"`
		Spec       struct {
			SelfSigned *struct{} `json:"selfSigned,omitempty"`
			CA         *struct {
				SecretName string `json:"secretName"`
			} `json:"ca,omitempty"`
		} `json:"spec"`
	}
	certificate struct {
		APIVersion string          `json:"apiVersion"`
		Kind       string          `json:"kind"`
		Metadata   objectMeta      `json:"metadata"`
		Spec       certificateSpec `json:"spec"`
	}
	certificateSpec struct {
		IsCA        bool       `json:"isCA,omitempty"`
		CommonName  string     `json:"commonName,omitempty"`
		SecretName  string     `json:"secretName"`
		DNSNames    []string   `json:"dnsNames,omitempty"`
		Duration    string     `json:"duration,omitempty"`
		RenewBefore string     `json:"renewBefore,omitempty"`
		PrivateKey  privateKey `json:"privateKey"`
		Usages      []string   `json:"usages,omitempty"`
		IssuerRef   struct {
			Name  string `json:"name"`
			Kind  string `json:"kind"`
			Group string `json:"group"`
		} `json:"issuerRef"`
	}
	privateKey struct {
		Algorithm      string `json:"algorithm,omitempty"`
		Size           int    `json:"size,omitempty"`
		Encoding       string `json:"encoding,omitempty"`
		RotationPolicy string `json:"rotationPolicy,omitempty"`
	}
)

// certManager stands in for cert-manager: it issues the example's Certificates through its
// Issuers and writes each Secret as cert-manager does. What it relies on, from cert-manager's
// documentation (https://cert-manager.io/docs/concepts/certificate/ and the Certificate CRD's
// field descriptions) and its source (github.com/cert-manager/cert-manager, pkg/util/pki):
//   - The Secret holds tls.crt, tls.key and, when the CA is known (CA and SelfSigned issuers),
//     ca.crt (concepts/certificate).
//   - tls.crt is the leaf followed by its chain, without a self-signed root; ca.crt is the
//     root, or the highest certificate of the chain (concepts/certificate; the CA issuer signs
//     through SignCSRTemplate, whose ParseSingleCertificateChain lays this out). A SelfSigned
//     issuer's certificate is its own CA, in both keys.
//   - privateKey.encoding defaults to PKCS1: an RSA key as PKCS#1 ("RSA PRIVATE KEY"), an
//     ECDSA key as SEC 1 ("EC PRIVATE KEY"), Ed25519 as PKCS#8; PKCS8 gives "PRIVATE KEY"
//     for all (CRD field descriptions; EncodePrivateKey). With an algorithm and no size, RSA
//     is 2048 bits and ECDSA P-256 (CRD field descriptions).
//   - usages default to digital signature and key encipherment (CRD field descriptions), and
//     an isCA certificate also gets cert sign (BuildKeyUsages); duration defaults to 90 days
//     (DefaultCertificateDuration).
type certManager struct {
	issuers map[string]issuer
	certs   []certificate
	secrets map[string]map[string][]byte // issued so far, by Secret name
}

func readCertManagerExample(t *testing.T) *certManager {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "examples", "cert-manager", "certificates.yaml"))
	require.NoError(t, err)
	cm := &certManager{issuers: map[string]issuer{}, secrets: map[string]map[string][]byte{}}
	for _, doc := range bytes.Split(b, []byte("\n---\n")) {
		var head struct{ APIVersion, Kind string }
		require.NoError(t, yaml.Unmarshal(doc, &head))
		require.Equal(t, "cert-manager.io/v1", head.APIVersion)
		switch head.Kind {
		case "Issuer":
			var is issuer
			require.NoError(t, yaml.UnmarshalStrict(doc, &is))
			cm.issuers[is.Metadata.Name] = is
		case "Certificate":
			var c certificate
			require.NoError(t, yaml.UnmarshalStrict(doc, &c))
			cm.certs = append(cm.certs, c)
		default:
			t.Fatalf("unexpected kind %q in the example", head.Kind)
		}
	}
	return cm
}

// readSecureCluster returns the name and TLS Secret of examples/valkeycluster-secure.yaml.
func readSecureCluster(t *testing.T) (name, secretRef string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "examples", "valkeycluster-secure.yaml"))
	require.NoError(t, err)
	var c struct {
		Metadata objectMeta `json:"metadata"`
		Spec     struct {
			TLS struct {
				SecretRef string `json:"secretRef"`
			} `json:"tls"`
		} `json:"spec"`
	}
	require.NoError(t, yaml.Unmarshal(b, &c))
	require.NotEmpty(t, c.Spec.TLS.SecretRef)
	return c.Metadata.Name, c.Spec.TLS.SecretRef
}

func (cm *certManager) certificateFor(secretName string) (certificateSpec, bool) {
	for _, c := range cm.certs {
		if c.Spec.SecretName == secretName {
			return c.Spec, true
		}
	}
	return certificateSpec{}, false
}

// issuerOf resolves a Certificate's issuerRef to one of the example's own Issuers.
func (cm *certManager) issuerOf(t *testing.T, spec certificateSpec) issuer {
	t.Helper()
	ref := spec.IssuerRef
	require.Contains(t, []string{"", "Issuer"}, ref.Kind, "the example's issuers are namespaced Issuers")
	require.Contains(t, []string{"", "cert-manager.io"}, ref.Group)
	is, ok := cm.issuers[ref.Name]
	require.True(t, ok, "issuer %q is in the example", ref.Name)
	return is
}

// caSecretOf is the Secret holding the CA that signs spec: its issuer's, or its own when
// self-signed.
func (cm *certManager) caSecretOf(t *testing.T, spec certificateSpec) string {
	t.Helper()
	is := cm.issuerOf(t, spec)
	if is.Spec.CA == nil {
		return spec.SecretName
	}
	return is.Spec.CA.SecretName
}

// secret returns the Secret named name, issuing the example's Certificate for it (and the CAs
// it depends on) the first time.
func (cm *certManager) secret(t *testing.T, name string) map[string][]byte {
	t.Helper()
	if s, ok := cm.secrets[name]; ok {
		return s
	}
	spec, ok := cm.certificateFor(name)
	require.True(t, ok, "a Certificate in the example writes Secret %q", name)
	cm.secrets[name] = cm.issue(t, spec)
	return cm.secrets[name]
}

// issue signs what spec describes through its issuer and returns the Secret's data.
func (cm *certManager) issue(t *testing.T, spec certificateSpec) map[string][]byte {
	t.Helper()
	is := cm.issuerOf(t, spec)
	key := generateKey(t, spec.PrivateKey)
	duration := 90 * 24 * time.Hour
	if spec.Duration != "" {
		var err error
		duration, err = time.ParseDuration(spec.Duration)
		require.NoError(t, err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	require.NoError(t, err)
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: spec.CommonName},
		DNSNames:              spec.DNSNames,
		NotBefore:             now,
		NotAfter:              now.Add(duration),
		IsCA:                  spec.IsCA,
		BasicConstraintsValid: true,
	}
	tmpl.KeyUsage, tmpl.ExtKeyUsage = usages(t, spec)

	switch {
	case is.Spec.SelfSigned != nil:
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
		require.NoError(t, err)
		self := pemCert(der)
		return map[string][]byte{"tls.crt": self, "tls.key": encodeKey(t, key, spec.PrivateKey.Encoding), "ca.crt": self}
	case is.Spec.CA != nil:
		caData := cm.secret(t, is.Spec.CA.SecretName)
		caChain := parsePEMCerts(t, caData["tls.crt"])
		caBlock, _ := pem.Decode(caData["tls.key"])
		require.NotNil(t, caBlock)
		caKey := parseKey(t, caBlock)
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caChain[0], key.Public(), caKey)
		require.NoError(t, err)
		// The leaf, then the issuer's chain without a self-signed root; ca.crt is the top.
		chain := pemCert(der)
		for _, c := range caChain {
			if c.CheckSignatureFrom(c) != nil {
				chain = append(chain, pemCert(c.Raw)...)
			}
		}
		return map[string][]byte{"tls.crt": chain, "tls.key": encodeKey(t, key, spec.PrivateKey.Encoding),
			"ca.crt": pemCert(caChain[len(caChain)-1].Raw)}
	default:
		t.Fatalf("issuer %q is neither selfSigned nor ca", is.Metadata.Name)
		return nil
	}
}

func generateKey(t *testing.T, pk privateKey) crypto.Signer {
	t.Helper()
	var (
		key crypto.Signer
		err error
	)
	switch pk.Algorithm {
	case "RSA":
		key, err = rsa.GenerateKey(rand.Reader, orDefault(pk.Size, 2048))
	case "ECDSA":
		curves := map[int]elliptic.Curve{256: elliptic.P256(), 384: elliptic.P384(), 521: elliptic.P521()}
		curve, ok := curves[orDefault(pk.Size, 256)]
		require.True(t, ok, "ECDSA size %d", pk.Size)
		key, err = ecdsa.GenerateKey(curve, rand.Reader)
	case "Ed25519":
		_, key, err = ed25519.GenerateKey(rand.Reader)
	default:
		t.Fatalf("the example states each key's algorithm (RSA, ECDSA or Ed25519), got %q", pk.Algorithm)
	}
	require.NoError(t, err)
	return key
}

func orDefault(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

func encodeKey(t *testing.T, key crypto.Signer, encoding string) []byte {
	t.Helper()
	var block *pem.Block
	switch k := key.(type) {
	case *rsa.PrivateKey:
		if encoding == "" || encoding == "PKCS1" {
			block = &pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)}
		}
	case *ecdsa.PrivateKey:
		if encoding == "" || encoding == "PKCS1" {
			der, err := x509.MarshalECPrivateKey(k)
			require.NoError(t, err)
			block = &pem.Block{Type: "EC PRIVATE KEY", Bytes: der}
		}
	}
	if block == nil {
		require.Contains(t, []string{"", "PKCS1", "PKCS8"}, encoding)
		der, err := x509.MarshalPKCS8PrivateKey(key)
		require.NoError(t, err)
		block = &pem.Block{Type: "PRIVATE KEY", Bytes: der}
	}
	return pem.EncodeToMemory(block)
}

func usages(t *testing.T, spec certificateSpec) (x509.KeyUsage, []x509.ExtKeyUsage) {
	t.Helper()
	names := spec.Usages
	if len(names) == 0 {
		names = []string{"digital signature", "key encipherment"}
	}
	if spec.IsCA {
		names = append(names, "cert sign")
	}
	var ku x509.KeyUsage
	var eku []x509.ExtKeyUsage
	for _, n := range names {
		switch n {
		case "digital signature":
			ku |= x509.KeyUsageDigitalSignature
		case "key encipherment":
			ku |= x509.KeyUsageKeyEncipherment
		case "cert sign":
			ku |= x509.KeyUsageCertSign
		case "server auth":
			eku = append(eku, x509.ExtKeyUsageServerAuth)
		case "client auth":
			eku = append(eku, x509.ExtKeyUsageClientAuth)
		default:
			t.Fatalf("usage %q is not modelled by this test", n)
		}
	}
	return ku, eku
}

func parseKey(t *testing.T, b *pem.Block) crypto.Signer {
	t.Helper()
	var (
		k   any
		err error
	)
	switch b.Type {
	case "RSA PRIVATE KEY":
		k, err = x509.ParsePKCS1PrivateKey(b.Bytes)
	case "EC PRIVATE KEY":
		k, err = x509.ParseECPrivateKey(b.Bytes)
	default:
		k, err = x509.ParsePKCS8PrivateKey(b.Bytes)
	}
	require.NoError(t, err)
	s, ok := k.(crypto.Signer)
	require.True(t, ok)
	return s
}

func parsePEMCerts(t *testing.T, b []byte) []*x509.Certificate {
	t.Helper()
	var out []*x509.Certificate
	for {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			break
		}
		c, err := x509.ParseCertificate(block.Bytes)
		require.NoError(t, err)
		out = append(out, c)
	}
	require.NotEmpty(t, out)
	return out
}

func pemCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}
