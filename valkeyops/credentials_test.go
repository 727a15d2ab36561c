package valkeyops

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gomomento/valkey-operator/internal/testcerts"
	"github.com/gomomento/valkey-operator/valkeyops/model"
)

func TestCredentialsToken(t *testing.T) {
	base := Credentials{
		Username: "operator", Password: "pw", CA: []byte("ca"), Cert: []byte("cert"),
		Key: []byte("key"), ServerName: "c.ns.svc.cluster.local",
	}
	tests := []struct {
		name   string
		change func(*Credentials)
	}{
		{"username", func(c *Credentials) { c.Username = "other" }},
		{"password", func(c *Credentials) { c.Password = "pw2" }},
		{"ca", func(c *Credentials) { c.CA = []byte("ca2") }},
		{"ca removed", func(c *Credentials) { c.CA = nil }},
		{"cert", func(c *Credentials) { c.Cert = []byte("cert2") }},
		{"key", func(c *Credentials) { c.Key = []byte("key2") }},
		{"server name", func(c *Credentials) { c.ServerName = "d.ns.svc.cluster.local" }},
		{"bytes shifted between fields", func(c *Credentials) { c.Username, c.Password = "operatorp", "w" }},
		{"bytes shifted between PEM fields", func(c *Credentials) { c.Cert, c.Key = []byte("certk"), []byte("ey") }},
	}
	tok := base.Token()
	assert.Len(t, tok, 64)
	assert.Equal(t, tok, base.Token(), "deterministic")
	seen := map[string]string{tok: "base"}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := base
			tt.change(&c)
			got := c.Token()
			assert.NotEqual(t, tok, got)
			assert.NotContains(t, seen, got, "collides with another variant")
			seen[got] = tt.name
		})
	}
}

func TestCredentialsStringHidesSecrets(t *testing.T) {
	c := Credentials{Username: "operator", Password: "s3cret-pw", Key: []byte("PRIVATE-KEY-BYTES"), CA: []byte("x"), ServerName: "svc"}
	for _, s := range []string{c.String(), c.GoString(), fmtV(Options{Credentials: c}), fmtV(c)} {
		assert.NotContains(t, s, "s3cret-pw")
		assert.NotContains(t, s, "PRIVATE-KEY-BYTES")
		assert.NotContains(t, s, c.Token())
	}
}

func TestCredentialsTLSConfig(t *testing.T) {
	const name = "c.ns.svc.cluster.local"
	names := testcerts.ForCluster("c", "ns")
	now := time.Now()
	valid := testcerts.New(t, testcerts.Options{DNSNames: names})
	// testcerts CAs are valid from an hour ago: these leaves expired after their CA was made.
	expired := testcerts.New(t, testcerts.Options{DNSNames: names, NotBefore: now.Add(-50 * time.Minute), NotAfter: now.Add(-time.Minute)})
	expiredBeforeCA := testcerts.New(t, testcerts.Options{DNSNames: names, NotBefore: now.Add(-48 * time.Hour), NotAfter: now.Add(-24 * time.Hour)})
	notYet := testcerts.New(t, testcerts.Options{DNSNames: names, NotBefore: now.Add(24 * time.Hour), NotAfter: now.Add(48 * time.Hour)})
	otherNames := testcerts.New(t, testcerts.Options{DNSNames: testcerts.ForCluster("d", "ns")})
	expiredOtherNames := testcerts.New(t, testcerts.Options{DNSNames: testcerts.ForCluster("d", "ns"), NotBefore: now.Add(-50 * time.Minute), NotAfter: now.Add(-time.Minute)})
	other := testcerts.New(t, testcerts.Options{DNSNames: names})
	expiredOther := testcerts.New(t, testcerts.Options{DNSNames: names, NotBefore: now.Add(-50 * time.Minute), NotAfter: now.Add(-time.Minute)})

	tests := []struct {
		name       string
		server     testcerts.Bundle // certificate the server presents
		ca         []byte           // CA the client trusts
		serverName string
		wantErr    string // "" = handshake succeeds
	}{
		{name: "valid", server: valid, ca: valid.CA, serverName: name},
		{name: "wildcard SAN", server: valid, ca: valid.CA, serverName: "node-0." + name},
		{name: "expired is accepted", server: expired, ca: expired.CA, serverName: name},
		{name: "expired before its CA existed is refused", server: expiredBeforeCA, ca: expiredBeforeCA.CA, serverName: name, wantErr: "is before"},
		{name: "not yet valid is accepted", server: notYet, ca: notYet.CA, serverName: name},
		{name: "another CA is refused", server: other, ca: valid.CA, serverName: name, wantErr: "unknown authority"},
		{name: "expired from another CA is refused", server: expiredOther, ca: valid.CA, serverName: name, wantErr: "unknown authority"},
		{name: "wrong server name is refused", server: otherNames, ca: otherNames.CA, serverName: name, wantErr: "certificate is valid for d.ns"},
		{name: "expired with wrong server name is refused", server: expiredOtherNames, ca: expiredOtherNames.CA, serverName: name, wantErr: "certificate is valid for d.ns"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := Credentials{Password: "pw", CA: tt.ca, ServerName: tt.serverName}.TLSConfig()
			require.NoError(t, err)
			require.NotNil(t, cfg)
			assert.Equal(t, uint16(tls.VersionTLS12), cfg.MinVersion)
			err = handshake(t, serverConfig(t, tt.server, nil), cfg)
			if tt.wantErr == "" {
				assert.NoError(t, err)
			} else {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tt.wantErr)
			}
		})
	}
}

func TestCredentialsTLSConfigClientCertificate(t *testing.T) {
	b := testcerts.New(t, testcerts.Options{DNSNames: []string{"svc"}})
	clientCAs := x509.NewCertPool()
	require.True(t, clientCAs.AppendCertsFromPEM(b.CA))

	with, err := Credentials{CA: b.CA, Cert: b.Cert, Key: b.Key, ServerName: "svc"}.TLSConfig()
	require.NoError(t, err)
	require.Len(t, with.Certificates, 1)
	assert.NoError(t, handshake(t, serverConfig(t, b, clientCAs), with), "client certificate presented")

	without, err := Credentials{CA: b.CA, ServerName: "svc"}.TLSConfig()
	require.NoError(t, err)
	assert.Error(t, handshake(t, serverConfig(t, b, clientCAs), without), "server requires a client certificate")
}

// An expired client certificate is not offered: a server that verifies a certificate when one
// is given (tls-auth-clients optional) refuses an expired one, and takes a connection that
// offers none.
func TestCredentialsTLSConfigExpiredClientCertificate(t *testing.T) {
	expired := testcerts.New(t, testcerts.Options{DNSNames: []string{"svc"},
		NotBefore: time.Now().Add(-2 * time.Hour), NotAfter: time.Now().Add(-time.Minute)})
	valid := testcerts.New(t, testcerts.Options{DNSNames: []string{"svc"}})
	optional := func(b testcerts.Bundle) *tls.Config {
		clientCAs := x509.NewCertPool()
		require.True(t, clientCAs.AppendCertsFromPEM(b.CA))
		cfg := serverConfig(t, b, clientCAs)
		cfg.ClientAuth = tls.VerifyClientCertIfGiven
		return cfg
	}
	for _, tt := range []struct {
		name    string
		b       testcerts.Bundle
		offered bool
	}{{"valid: offered", valid, true}, {"expired: not offered", expired, false}} {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := Credentials{CA: tt.b.CA, Cert: tt.b.Cert, Key: tt.b.Key, ServerName: "svc"}.TLSConfig()
			require.NoError(t, err)
			require.NotNil(t, cfg.GetClientCertificate)
			got, err := cfg.GetClientCertificate(&tls.CertificateRequestInfo{})
			require.NoError(t, err)
			assert.Equal(t, tt.offered, len(got.Certificate) > 0)
			assert.NoError(t, handshake(t, optional(tt.b), cfg), "the server verifying a given certificate takes the connection")
		})
	}
}

func TestCredentialsTLSConfigInvalid(t *testing.T) {
	b := testcerts.New(t, testcerts.Options{DNSNames: []string{"svc"}})
	tests := []struct {
		name    string
		c       Credentials
		wantNil bool
		wantErr string
	}{
		{name: "plaintext", c: Credentials{Password: "pw"}, wantNil: true},
		{name: "empty CA is plaintext", c: Credentials{CA: []byte{}, ServerName: "svc"}, wantNil: true},
		{name: "unparsable CA", c: Credentials{CA: []byte("not pem"), ServerName: "svc"}, wantErr: "CA"},
		{name: "CA without server name", c: Credentials{CA: b.CA}, wantErr: "server name"},
		{name: "key of another certificate", c: Credentials{CA: b.CA, ServerName: "svc", Cert: b.Cert, Key: testcerts.OtherKey(t)}, wantErr: "client certificate"},
		{name: "certificate without key", c: Credentials{CA: b.CA, ServerName: "svc", Cert: b.Cert}, wantErr: "client certificate"},
		{name: "key without certificate", c: Credentials{CA: b.CA, ServerName: "svc", Key: b.Key}, wantErr: "client certificate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := tt.c.TLSConfig()
			if tt.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tt.wantErr)
				assert.Nil(t, cfg)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.wantNil, cfg == nil)
		})
	}
}

func TestNewAdminRejectsInvalidCredentials(t *testing.T) {
	_, err := NewAdmin(Options{Credentials: Credentials{Password: "pw", CA: []byte("junk"), ServerName: "svc"}})
	assert.ErrorIs(t, err, model.ErrInvalidSpec)
}

// serverConfig serves b's certificate, requiring a client certificate from clientCAs if set.
func serverConfig(t *testing.T, b testcerts.Bundle, clientCAs *x509.CertPool) *tls.Config {
	t.Helper()
	pair, err := tls.X509KeyPair(b.Cert, b.Key)
	require.NoError(t, err)
	cfg := &tls.Config{Certificates: []tls.Certificate{pair}}
	if clientCAs != nil {
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
		cfg.ClientCAs = clientCAs
	}
	return cfg
}

// handshake runs a TLS handshake over loopback TCP and returns the client's error, or the
// server's if only the server failed.
func handshake(t *testing.T, server, client *tls.Config) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	srvErr := make(chan error, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			srvErr <- err
			return
		}
		defer conn.Close()
		s := tls.Server(conn, server)
		if err = s.HandshakeContext(ctx); err == nil {
			// A TLS 1.3 server checks the client certificate after the client's handshake
			// returned: only a reply proves the client was accepted.
			_, err = s.Write([]byte("x"))
		}
		srvErr <- err
	}()
	d := tls.Dialer{Config: client}
	conn, err := d.DialContext(ctx, "tcp", ln.Addr().String())
	if err == nil {
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		_, err = conn.Read(make([]byte, 1))
		conn.Close()
	}
	if sErr := <-srvErr; err == nil && sErr != nil {
		err = sErr
	}
	return err
}

func fmtV(v any) string {
	var b strings.Builder
	for _, f := range []string{"%v", "%+v", "%#v"} {
		b.WriteString(fmt.Sprintf(f, v))
	}
	return b.String()
}
