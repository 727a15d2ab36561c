//go:build envtest

package reconciler_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"sync"

	"github.com/gomomento/valkey-operator/valkeyops"
	"github.com/gomomento/valkey-operator/valkeyops/model"
	"k8s.io/apimachinery/pkg/types"
)

// The fake servers' TLS side, the CertificateReload port and the served-certificate half of
// Reads. Each node serves the certificate it loaded last; it loads its pod's copy of the TLS
// Secret when it starts (first looked at) and on each reload. That copy is what the operator
// itself reads from the Secret (the credentials it connects with), as if the kubelet
// refreshed volumes at once, unless a test freezes it to play a kubelet that has not
// refreshed the volume yet.
//
// It refuses what a real server and handshake refuse: a reload on a server without TLS, and a
// served certificate that the operator's credentials do not trust (checked with their own
// verification, validity periods aside, as valkeyops does).

// fakeCertificateState is every fake server's TLS files, by cluster and node name.
type fakeCertificateState struct {
	// wire counts the commands and has the credentials the client connects with.
	wire    *fakeWire
	mu      sync.Mutex
	frozen  map[types.NamespacedName]*tlsFiles           // a cluster's volume content while frozen
	loaded  map[types.NamespacedName]map[string]tlsFiles // per node: what it serves and trusts
	reloads map[types.NamespacedName]map[string]int
}

// tlsFiles is what a node reads from its TLS volume.
type tlsFiles struct{ cert, ca []byte }

func newFakeCertificateState(w *fakeWire) *fakeCertificateState {
	return &fakeCertificateState{
		wire:    w,
		frozen:  map[types.NamespacedName]*tlsFiles{},
		loaded:  map[types.NamespacedName]map[string]tlsFiles{},
		reloads: map[types.NamespacedName]map[string]int{},
	}
}

// cluster is the certificates port of one cluster's servers.
func (f *fakeCertificateState) cluster(key types.NamespacedName) *fakeCertificates {
	return &fakeCertificates{f: f, key: key}
}

// freeze keeps the cluster's volumes at the content the operator last connected with, until
// thaw.
func (f *fakeCertificateState) freeze(key types.NamespacedName) {
	cred := f.wire.lastCredentials(key)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.frozen[key] = &tlsFiles{cert: cred.Cert, ca: cred.CA}
}

func (f *fakeCertificateState) thaw(key types.NamespacedName) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.frozen, key)
}

// reloadCount is how many reloads node got; total sums the cluster's nodes.
func (f *fakeCertificateState) reloadCount(key types.NamespacedName) (perNode map[string]int, total int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	perNode = map[string]int{}
	for n, c := range f.reloads[key] {
		perNode[n] = c
		total += c
	}
	return perNode, total
}

// trusted is the CA bundle node last loaded.
func (f *fakeCertificateState) trusted(key types.NamespacedName, node string) []byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.loaded[key][node].ca
}

// served is the certificate bundle node last loaded; false while it has not started.
func (f *fakeCertificateState) served(key types.NamespacedName, node string) ([]byte, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	files, ok := f.loaded[key][node]
	return files.cert, ok
}

// volume is the cluster's TLS volume content now; cred are the operator's latest credentials.
// f.mu must be held.
func (f *fakeCertificateState) volume(key types.NamespacedName, cred valkeyops.Credentials) tlsFiles {
	if v := f.frozen[key]; v != nil {
		return *v
	}
	return tlsFiles{cert: cred.Cert, ca: cred.CA}
}

// fakeCertificates is one cluster's servers as the CertificateReload port (and
// ServedCertificate) reach them.
type fakeCertificates struct {
	f   *fakeCertificateState
	key types.NamespacedName
}

func (c *fakeCertificates) ServedCertificate(_ context.Context, node model.Node) (*x509.Certificate, error) {
	cred := c.f.wire.call(c.key)
	if !cred.TLS() {
		return nil, fmt.Errorf("fake: %s: %w: not a TLS server", node.Name, model.ErrInvalidSpec)
	}
	f := c.f
	f.mu.Lock()
	if f.loaded[c.key] == nil {
		f.loaded[c.key] = map[string]tlsFiles{}
	}
	files, ok := f.loaded[c.key][node.Name]
	if !ok {
		files = f.volume(c.key, cred) // the server starts with what its volume holds
		f.loaded[c.key][node.Name] = files
	}
	f.mu.Unlock()
	chain, err := parseChain(files.cert)
	if err != nil {
		return nil, err
	}
	cfg, err := cred.TLSConfig()
	if err != nil {
		return nil, err
	}
	if err := cfg.VerifyConnection(tls.ConnectionState{ServerName: cfg.ServerName, PeerCertificates: chain}); err != nil {
		return nil, fmt.Errorf("fake: %s: %w: %v", node.Name, model.ErrUntrustedCertificate, err)
	}
	return chain[0], nil
}

func (c *fakeCertificates) ReloadTLS(_ context.Context, node model.Node) error {
	cred := c.f.wire.write(c.key) // CONFIG SET: a write command
	if !cred.TLS() {
		return fmt.Errorf("fake: %s: node has no TLS certificate configured", node.Name)
	}
	f := c.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.loaded[c.key] == nil {
		f.loaded[c.key] = map[string]tlsFiles{}
	}
	if f.reloads[c.key] == nil {
		f.reloads[c.key] = map[string]int{}
	}
	f.loaded[c.key][node.Name] = f.volume(c.key, cred)
	f.reloads[c.key][node.Name]++
	return nil
}

func parseChain(bundle []byte) ([]*x509.Certificate, error) {
	var chain []*x509.Certificate
	for rest := bundle; ; {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			break
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, err
		}
		chain = append(chain, c)
	}
	if len(chain) == 0 {
		return nil, fmt.Errorf("fake: no certificate")
	}
	return chain, nil
}
