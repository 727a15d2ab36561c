package valkeyops

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"

	"github.com/valkey-io/valkey-go"

	"github.com/gomomento/valkey-operator/valkeyops/model"
)

// ReloadTLS makes node re-read its certificate, key and CA files without a restart: Valkey
// only reads them when the settings are set, so they are set again to their current paths in
// one CONFIG SET (all or nothing).
//
// If the node cannot be reached with the Admin's client certificate, the reload is sent over
// a connection that offers none (the servers verify client certificates only when one is
// presented). That is the CA change done in a hurry: the Secret's new certificate, which the
// Admin presents, is signed by a CA that the node will trust only once it has reloaded the
// new ca.crt, and only this reload can make it do so.
func (a *Admin) ReloadTLS(ctx context.Context, node model.Node) error {
	err := reloadTLS(node, func(args ...string) (valkey.ValkeyMessage, error) { return a.cmd(ctx, node, "tls-reload", args...) })
	var server *valkey.ValkeyError
	if err == nil || a.tls == nil || len(a.tls.Certificates) == 0 || errors.As(err, &server) || errors.Is(err, errNoTLSFiles) {
		return err
	}
	cfg := a.tls.Clone()
	cfg.Certificates, cfg.GetClientCertificate = nil, nil
	c, cerr := valkey.NewClient(valkey.ClientOption{
		InitAddress:       []string{a.remap(node.Addr)},
		Username:          a.opts.Credentials.Username,
		Password:          a.opts.Credentials.Password,
		TLSConfig:         cfg,
		ForceSingleClient: true,
		DisableCache:      true,
		DisableRetry:      true,
		Dialer:            net.Dialer{Timeout: a.opts.DialTimeout},
		ClientName:        "valkey-operator",
	})
	if cerr != nil {
		return err // the first error says more
	}
	defer c.Close()
	a.logf("tls-reload on %s: retried without a client certificate after: %v", node.Name, err)
	return reloadTLS(node, func(args ...string) (valkey.ValkeyMessage, error) {
		msg, err := c.Do(ctx, c.B().Arbitrary(args...).Build()).ToMessage()
		return msg, model.NewOpError(node.Name, "tls-reload", err)
	})
}

var errNoTLSFiles = errors.New("node has no TLS certificate configured")

// reloadTLS sends the reload's two commands through do.
func reloadTLS(node model.Node, do func(args ...string) (valkey.ValkeyMessage, error)) error {
	msg, err := do("CONFIG", "GET", "tls-*-file")
	if err != nil {
		return err
	}
	kv, err := msg.AsStrMap()
	if err != nil {
		return model.NewOpError(node.Name, "tls-reload", err)
	}
	args := []string{"CONFIG", "SET"}
	for _, k := range []string{"tls-cert-file", "tls-key-file", "tls-ca-cert-file", "tls-client-cert-file", "tls-client-key-file"} {
		if v := kv[k]; v != "" {
			args = append(args, k, v)
		}
	}
	if len(args) == 2 || kv["tls-cert-file"] == "" {
		return model.NewOpError(node.Name, "tls-reload", errNoTLSFiles)
	}
	_, err = do(args...)
	return err
}

// ServedCertificate returns the leaf certificate node presents in a TLS handshake. It is a
// read: the handshake is all that is sent, no command. The chain is checked as the Admin's own
// connections check it (the credentials' CA bundle and server name, see Credentials.TLSConfig)
// except for validity periods: an expired certificate is returned, not refused, because expiry
// is only a warning and the operator must still see which certificate a node serves in order
// to get a renewed one loaded. No client certificate is offered (the servers do not demand
// one), so a node that does not trust the operator's certificate yet still shows its own.
//
// Errors: model.ErrUntrustedCertificate when the chain or name does not verify, model.ErrUnreachable when
// no handshake completes, model.ErrInvalidSpec for credentials without a CA (not a TLS cluster).
func (a *Admin) ServedCertificate(ctx context.Context, node model.Node) (*x509.Certificate, error) {
	const step = "served-certificate"
	cred := a.opts.Credentials
	if !cred.TLS() {
		return nil, model.NewOpError(node.Name, step, fmt.Errorf("%w: credentials without a CA", model.ErrInvalidSpec))
	}
	cas := parseCerts(cred.CA)
	roots := x509.NewCertPool()
	for _, ca := range cas {
		roots.AddCert(ca)
	}
	var leaf *x509.Certificate
	var untrusted error
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS12,
		ServerName: cred.ServerName,
		// Replaced by verifyIgnoringValidity below, as in Credentials.TLSConfig.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if err := verifyIgnoringValidity(cs.PeerCertificates, roots, cas, cred.ServerName); err != nil {
				untrusted = err
				return err
			}
			leaf = cs.PeerCertificates[0]
			return nil
		},
	}
	dctx, cancel := context.WithTimeout(ctx, a.opts.DialTimeout)
	defer cancel()
	d := tls.Dialer{NetDialer: &net.Dialer{}, Config: cfg}
	conn, err := d.DialContext(dctx, "tcp", a.remap(node.Addr))
	switch {
	case untrusted != nil:
		return nil, model.NewOpError(node.Name, step, fmt.Errorf("%w: %v", model.ErrUntrustedCertificate, untrusted))
	case err != nil:
		return nil, model.NewOpError(node.Name, step, fmt.Errorf("%w: %v", model.ErrUnreachable, err))
	}
	_ = conn.Close()
	return leaf, nil
}

// ServedCertificate returns the leaf certificate the server at addr presents, after verifying
// its chain against roots. Host names are not checked: nodes are dialed by IP while their
// certificates name the service (announcing IPs breaks hostname verification).
func ServedCertificate(ctx context.Context, addr string, roots *x509.CertPool) (*x509.Certificate, error) {
	var leaf *x509.Certificate
	cfg := &tls.Config{
		InsecureSkipVerify: true, // replaced by the chain check below
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("no certificate presented")
			}
			inter := x509.NewCertPool()
			for _, c := range cs.PeerCertificates[1:] {
				inter.AddCert(c)
			}
			if _, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter}); err != nil {
				return err
			}
			leaf = cs.PeerCertificates[0]
			return nil
		},
	}
	d := tls.Dialer{NetDialer: &net.Dialer{}, Config: cfg}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, model.NewOpError(addr, "served-certificate", err)
	}
	defer conn.Close()
	if leaf == nil {
		return nil, model.NewOpError(addr, "served-certificate", fmt.Errorf("handshake without certificate"))
	}
	return leaf, nil
}
