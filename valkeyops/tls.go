package valkeyops

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
)

// ReloadTLS makes node re-read its certificate, key and CA files without a restart: Valkey
// only reads them when the settings are set, so they are set again to their current paths in
// one CONFIG SET (all or nothing).
func (a *Admin) ReloadTLS(ctx context.Context, node Node) error {
	msg, err := a.cmd(ctx, node, "tls-reload", "CONFIG", "GET", "tls-*-file")
	if err != nil {
		return err
	}
	kv, err := msg.AsStrMap()
	if err != nil {
		return opErr(node.Name, "tls-reload", err)
	}
	args := []string{"CONFIG", "SET"}
	for _, k := range []string{"tls-cert-file", "tls-key-file", "tls-ca-cert-file", "tls-client-cert-file", "tls-client-key-file"} {
		if v := kv[k]; v != "" {
			args = append(args, k, v)
		}
	}
	if len(args) == 2 || kv["tls-cert-file"] == "" {
		return opErr(node.Name, "tls-reload", errors.New("node has no TLS certificate configured"))
	}
	_, err = a.cmd(ctx, node, "tls-reload", args...)
	return err
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
		return nil, opErr(addr, "served-certificate", err)
	}
	defer conn.Close()
	if leaf == nil {
		return nil, opErr(addr, "served-certificate", fmt.Errorf("handshake without certificate"))
	}
	return leaf, nil
}
