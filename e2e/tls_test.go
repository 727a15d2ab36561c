package e2e

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valkey-io/valkey-go"

	"github.com/gomomento/valkey-operator/internal/testcerts"
)

// TestTLSSecretMissingCAIsInvalidUntilFixed applies a TLS cluster whose Secret lacks ca.crt:
// it must report Invalid with the exact message and build nothing. Adding ca.crt to the same
// Secret must bring it to Active, and a client verifying the server against the CA (server
// name = the cluster's Service name) must connect and run commands.
func TestTLSSecretMissingCAIsInvalidUntilFixed(t *testing.T) {
	n := newNamespace(t, "e2e-tls")
	const cluster, secret = "tls-cluster", "tls-cluster-tls"
	applyMenu(n)

	certs := testcerts.New(t, testcerts.Options{DNSNames: testcerts.ForCluster(cluster, n.name)})
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	require.NoError(t, os.WriteFile(certFile, certs.Cert, 0o600))
	require.NoError(t, os.WriteFile(keyFile, certs.Key, 0o600))
	n.kubectl("create", "secret", "tls", secret, "--cert", certFile, "--key", keyFile)

	n.kubectlIn(fmt.Sprintf(`apiVersion: valkey.gomomento.com/v1alpha1
kind: ValkeyCluster
metadata:
  name: %s
spec:
  configRef: standard
  shards: 1
  replicasPerShard: 1
  tls:
    secretRef: %s
`, cluster, secret), "apply", "-f", "-")

	n.waitState(cluster, "Invalid", time.Minute)
	msg := n.kubectl("get", "valkeycluster", cluster, "-o", "jsonpath={.status.message}")
	assert.Equal(t, `TLS Secret "tls-cluster-tls" missing required key "ca.crt"`, msg)
	nodes, err := n.valkeyNodes(cluster)
	require.NoError(t, err)
	assert.Empty(t, nodes, "no ValkeyNodes while Invalid")

	// Fix the Secret in place.
	patch := fmt.Sprintf(`{"data":{"ca.crt":%q}}`, base64.StdEncoding.EncodeToString(certs.CA))
	n.kubectl("patch", "secret", secret, "--type", "merge", "-p", patch)
	start := time.Now()
	at := n.waitState(cluster, "Active", 3*time.Minute)
	t.Logf("e2e: secret-fixed-to-Active TLS 1x1: %.1fs", at.Sub(start).Seconds())
	assert.Empty(t, n.kubectl("get", "valkeycluster", cluster, "-o", "jsonpath={.status.message}"), "message cleared")

	password := n.secretValue(cluster+"-auth", "password")
	ips := n.podIPs(cluster)
	require.Len(t, ips, 2)
	serverName := testcerts.ForCluster(cluster, n.name)[0]

	t.Run("client verifying against the CA connects", func(t *testing.T) {
		pool := x509.NewCertPool()
		require.True(t, pool.AppendCertsFromPEM(certs.CA))
		c := newClusterClient(t, addrsOf(ips), password, &tls.Config{RootCAs: pool, ServerName: serverName, MinVersion: tls.VersionTLS12})
		ctx, cancel := ctxTimeout(30 * time.Second)
		defer cancel()
		require.NoError(t, c.Do(ctx, c.B().Set().Key("e2e:tls").Value("ok").Build()).Error())
		got, err := c.Do(ctx, c.B().Get().Key("e2e:tls").Build()).ToString()
		require.NoError(t, err)
		assert.Equal(t, "ok", got)
	})

	t.Run("client trusting another CA is refused", func(t *testing.T) {
		other := testcerts.New(t, testcerts.Options{DNSNames: testcerts.ForCluster(cluster, n.name)})
		pool := x509.NewCertPool()
		require.True(t, pool.AppendCertsFromPEM(other.CA))
		c, err := valkey.NewClient(valkey.ClientOption{
			InitAddress: addrsOf(ips), Password: password, DisableCache: true, Dialer: dialer(),
			TLSConfig: &tls.Config{RootCAs: pool, ServerName: serverName, MinVersion: tls.VersionTLS12},
		})
		if err == nil {
			c.Close()
		}
		assert.Error(t, err, "verification against an unrelated CA must fail")
	})

	t.Run("plaintext is refused", func(t *testing.T) {
		c, err := valkey.NewClient(valkey.ClientOption{
			InitAddress: addrsOf(ips), Password: password, DisableCache: true, Dialer: dialer(),
		})
		if err == nil {
			c.Close()
		}
		assert.Error(t, err, "a plaintext client must not get in")
	})
}
