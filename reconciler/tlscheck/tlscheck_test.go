package tlscheck_test

import (
	"errors"
	"testing"
	"time"

	"github.com/gomomento/valkey-operator/internal/testcerts"
	"github.com/gomomento/valkey-operator/reconciler/tlscheck"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestValidate(t *testing.T) {
	const cluster, ns, secret = "c1", "ns1", "c1-tls"
	good := testcerts.New(t, testcerts.Options{DNSNames: testcerts.ForCluster(cluster, ns)})
	onlyService := testcerts.New(t, testcerts.Options{DNSNames: testcerts.ForCluster(cluster, ns)[:1]})
	noSAN := testcerts.New(t, testcerts.Options{DNSNames: []string{"example.com"}})
	expired := testcerts.New(t, testcerts.Options{DNSNames: testcerts.ForCluster(cluster, ns),
		NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-24 * time.Hour)})

	with := func(k string, v []byte) map[string][]byte {
		d := good.Data()
		if v == nil {
			delete(d, k)
		} else {
			d[k] = v
		}
		return d
	}
	tests := []struct {
		name    string
		found   bool
		data    map[string][]byte
		message string // "" = valid
		expired bool
	}{
		{name: "valid", found: true, data: good.Data()},
		{name: "not found", found: false, message: `TLS Secret "c1-tls" not found`},
		{name: "missing tls.crt", found: true, data: with("tls.crt", nil), message: `TLS Secret "c1-tls" missing required key "tls.crt"`},
		{name: "missing tls.key", found: true, data: with("tls.key", nil), message: `TLS Secret "c1-tls" missing required key "tls.key"`},
		{name: "missing ca.crt", found: true, data: with("ca.crt", nil), message: `TLS Secret "c1-tls" missing required key "ca.crt"`},
		{name: "missing all keys reports tls.crt first", found: true, data: map[string][]byte{}, message: `TLS Secret "c1-tls" missing required key "tls.crt"`},
		{name: "bad tls.crt", found: true, data: with("tls.crt", []byte("not a cert")), message: `TLS Secret "c1-tls" key "tls.crt" is not a valid PEM-encoded X.509 certificate`},
		{name: "bad ca.crt", found: true, data: with("ca.crt", []byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")), message: `TLS Secret "c1-tls" key "ca.crt" is not a valid PEM-encoded X.509 certificate`},
		{name: "bad tls.crt and ca.crt reports tls.crt", found: true, data: map[string][]byte{"tls.crt": []byte("x"), "tls.key": good.Key, "ca.crt": []byte("y")}, message: `TLS Secret "c1-tls" key "tls.crt" is not a valid PEM-encoded X.509 certificate`},
		{name: "bad tls.key", found: true, data: with("tls.key", []byte("garbage")), message: `TLS Secret "c1-tls" key "tls.key" is not a valid PEM-encoded private key`},
		{name: "key mismatch", found: true, data: with("tls.key", testcerts.OtherKey(t)), message: `TLS Secret "c1-tls" private key does not match certificate`},
		{name: "missing service SAN", found: true, data: noSAN.Data(), message: `TLS Secret "c1-tls" certificate is missing SAN "c1.ns1.svc.cluster.local"`},
		{name: "missing wildcard SAN", found: true, data: onlyService.Data(), message: `TLS Secret "c1-tls" certificate is missing SAN "*.c1.ns1.svc.cluster.local"`},
		{name: "expired is valid", found: true, data: expired.Data(), expired: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res, err := tlscheck.Validate(secret, tc.found, tc.data, cluster, ns, time.Now())
			if tc.message == "" {
				require.NoError(t, err)
				assert.Equal(t, tc.expired, res.Expired)
				assert.NotEmpty(t, res.Fingerprint)
				return
			}
			var inv *tlscheck.InvalidError
			require.True(t, errors.As(err, &inv), "want *InvalidError, got %v", err)
			assert.Equal(t, tc.message, inv.Message)
		})
	}
}
