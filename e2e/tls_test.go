//go:build e2e

package e2e

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
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

		// Not only the TLS port refuses plaintext: no plaintext port is open at all.
		pool := x509.NewCertPool()
		require.True(t, pool.AppendCertsFromPEM(certs.CA))
		operatorPassword := n.secretValue(cluster+"-auth", "operator-password")
		for _, addr := range addrsOf(ips) {
			op, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{addr}, Username: "operator", Password: operatorPassword,
				TLSConfig:         &tls.Config{RootCAs: pool, ServerName: serverName, MinVersion: tls.VersionTLS12},
				ForceSingleClient: true, DisableCache: true, Dialer: dialer()})
			require.NoError(t, err, addr)
			ctx, cancel := ctxTimeout(10 * time.Second)
			ports, err := op.Do(ctx, op.B().ConfigGet().Parameter("port").Parameter("tls-port").Build()).AsStrMap()
			cancel()
			op.Close()
			require.NoError(t, err, addr)
			assert.Equal(t, map[string]string{"port": "0", "tls-port": "6379"}, ports, "%s listens for TLS only", addr)
		}
	})

	// Last, as it switches the default user off: a spec.acl user (the secure example's, with
	// the example ValkeyRole) logs in over TLS through a cluster client, and on every node
	// gets exactly its role on its key and channel patterns.
	t.Run("a spec.acl user gets exactly its role on every node", func(t *testing.T) {
		pool := x509.NewCertPool()
		require.True(t, pool.AppendCertsFromPEM(certs.CA))
		tlsConfig := &tls.Config{RootCAs: pool, ServerName: serverName, MinVersion: tls.VersionTLS12}
		n.kubectl("apply", "-f", example("valkeyrole.yaml"))
		const appPassword = "e2e-app-password"
		n.kubectl("patch", "valkeycluster", cluster, "--type=merge", "-p", fmt.Sprintf(
			`{"spec":{"acl":[{"username":"app","passwordHashes":[%q],"permissions":[{"roleRef":"app-readwrite","keys":[{"pattern":"app:*"}],"channels":["app-events"]}]}]}}`,
			sha256Hex(appPassword)))
		as := func(addrs []string, user, password string) (valkey.Client, error) {
			return valkey.NewClient(valkey.ClientOption{InitAddress: addrs, Username: user, Password: password, TLSConfig: tlsConfig,
				ForceSingleClient: len(addrs) == 1, DisableCache: true, DisableRetry: true, Dialer: dialer()})
		}
		n.eventually(time.Minute, 200*time.Millisecond, "app writes app:* through a cluster client", func() (bool, string, error) {
			c, err := as(addrsOf(ips), "app", appPassword)
			if err != nil {
				return false, err.Error(), nil
			}
			defer c.Close()
			ctx, cancel := ctxTimeout(10 * time.Second)
			defer cancel()
			err = c.Do(ctx, c.B().Set().Key("app:1").Value("v").Build()).Error()
			return err == nil, fmt.Sprint(err), nil
		})
		noPerm := func(err error) bool { return err != nil && strings.HasPrefix(err.Error(), "NOPERM") }
		for _, addr := range addrsOf(ips) {
			c, err := as([]string{addr}, "app", appPassword)
			require.NoError(t, err, "app logs in on %s", addr)
			ctx, cancel := ctxTimeout(10 * time.Second)
			do := func(args ...string) error { return c.Do(ctx, c.B().Arbitrary(args...).Build()).Error() }
			assert.False(t, noPerm(do("GET", "app:1")), "%s: app:* is app's", addr)
			assert.True(t, noPerm(do("GET", "other:1")), "%s: keys outside app:* are refused", addr)
			assert.True(t, noPerm(do("FLUSHALL")), "%s: the role denies FLUSHALL", addr)
			assert.True(t, noPerm(do("CONFIG", "GET", "maxmemory")), "%s: no administration", addr)
			assert.NoError(t, do("PUBLISH", "app-events", "hello"), "%s: app-events is app's", addr)
			assert.True(t, noPerm(do("PUBLISH", "other-events", "hello")), "%s: other channels are refused", addr)
			cancel()
			c.Close()

			// With a spec.acl user and spec.defaultUser left at Auto, the default user is off.
			d, err := as([]string{addr}, "default", password)
			if err == nil {
				ctx, cancel := ctxTimeout(10 * time.Second)
				err = d.Do(ctx, d.B().Ping().Build()).Error()
				cancel()
				d.Close()
			}
			if assert.Error(t, err, "%s: the default user is off", addr) {
				assert.Contains(t, err.Error(), "WRONGPASS", addr)
			}
		}
	})
}
