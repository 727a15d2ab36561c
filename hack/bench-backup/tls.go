package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gomomento/valkey-operator/internal/testcerts"
)

// tlsSecretName is the kubernetes.io/tls Secret every TLS cluster of a namespace names in
// spec.tls.secretRef.
const tlsSecretName = "bench-tls"

// tlsMaterial is what a namespace's TLS clusters serve and what their clients verify it by.
type tlsMaterial struct {
	caFile     string      // the CA's PEM, for valkey-cli --cacert
	serverName string      // a name the servers' certificate carries
	config     *tls.Config // for valkey-go clients
}

// setupTLS issues a CA and one server-and-client certificate for the clusters named (the
// names the operator gives them in ns), and stores them as Secret tlsSecretName of ns.
func (b *bench) setupTLS(ctx context.Context, ns string, clusters []string) (*tlsMaterial, error) {
	if err := b.env.EnsureNamespace(ctx, ns); err != nil {
		return nil, err
	}
	ca, err := testcerts.NewCA("bench-backup CA")
	if err != nil {
		return nil, err
	}
	var names []string
	for _, c := range clusters {
		names = append(names, testcerts.ForCluster(c, ns)...)
	}
	leaf, err := ca.Issue(testcerts.Leaf{CommonName: "valkey", DNSNames: names, Server: true, Client: true})
	if err != nil {
		return nil, err
	}
	_, err = b.env.Kube.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: tlsSecretName},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{"tls.crt": leaf.CertPEM, "tls.key": leaf.KeyPEM, "ca.crt": ca.CertPEM},
	}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("TLS Secret: %w", err)
	}
	caFile := filepath.Join(b.logDir, ns+"-ca.crt")
	if err := os.WriteFile(caFile, ca.CertPEM, 0o600); err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	return &tlsMaterial{caFile: caFile, serverName: names[0],
		config: &tls.Config{RootCAs: roots, ServerName: names[0], MinVersion: tls.VersionTLS12}}, nil
}

// cliArgs is valkey-cli's TLS arguments for m (none when m is nil). The servers accept
// client certificates without demanding them (tls-auth-clients optional): none is given.
func (m *tlsMaterial) cliArgs() []string {
	if m == nil {
		return nil
	}
	return []string{"--tls", "--cacert", m.caFile, "--sni", m.serverName}
}

// clientConfig is the valkey-go TLS configuration for m (nil, plain TCP, when m is nil).
func (m *tlsMaterial) clientConfig() *tls.Config {
	if m == nil {
		return nil
	}
	return m.config.Clone()
}

func onOff(on bool) string {
	if on {
		return "on"
	}
	return "off"
}
