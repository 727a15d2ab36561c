package reconciler

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"time"

	"github.com/gomomento/valkey-operator/reconciler/tlscheck"
	"github.com/gomomento/valkey-operator/valkeyops/model"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Live certificate rotation (docs/tls.md, re-issuing a certificate). Valkey reads its
// certificate, key and CA files only when their settings are set, and a pod sees a changed
// Secret only once its kubelet has refreshed the volume: about a second on the dev cluster, up
// to a minute or so on a real one. Reloading as soon as the Secret changes would usually reload
// the old files, and waiting a fixed minute would be slow where the refresh is quick. So every
// Active pass compares the certificate each node actually serves (a TLS handshake: a read, no
// command) with tls.crt of the validated Secret. A node serving another one is told to reload
// and checked again at once: serving the new certificate, it is done (a Secret volume changes
// all its files in one atomic swap, so the key and CA it loaded are the new ones too); still
// serving the old one, its files have not been refreshed yet, and the reload is retried soon
// (certRetry), with no Warning unless that lasts longer than a kubelet may take.
//
// A change of ca.crt alone cannot be seen in a handshake (Valkey does not advertise the CAs it
// trusts), yet it is the step that matters in a CA change: every node must trust the new CA
// before any node presents a certificate signed by it, or the cluster bus and replication
// links between a node that already presents it and one that does not trust it yet fail. Such
// a change is reloaded on every node with a backoff across the refresh window, the last reload
// after the window has passed, so every node holds the new bundle once the window is over.
//
// The operator's own connections trust ca.crt and present tls.crt, so an old+new CA bundle lets
// it verify nodes serving either certificate; a node that does not trust the new certificate
// yet is reloaded over a connection without one (valkeyops.Admin.ReloadTLS).
//
// A Secret that fails validation never gets here: the state gate ends the pass as Invalid
// before any Valkey call, so nothing is reloaded from it.

// tlsRefreshWindow is how long a kubelet may take to project a changed Secret into a pod: its
// sync period (one minute by default) plus its cache's delay, with a margin.
const tlsRefreshWindow = 2 * time.Minute

// certRetry is the wait before the k-th retry (k >= 1) of a reload that left a node serving
// the old certificate: 1, 1, 2, then 4 s. Short, because on the dev cluster the volume is
// refreshed within a second; capped, so a minute-long kubelet refresh costs about fifteen
// cheap CONFIG SETs per node and is noticed within 4 s.
func certRetry(k int) time.Duration {
	switch {
	case k <= 2:
		return time.Second
	case k == 3:
		return 2 * time.Second
	}
	return 4 * time.Second
}

// windowRetry is the wait after the k-th reload (k >= 1) of a CA-only change: 1, 2, 4, ... s.
func windowRetry(k int) time.Duration {
	return time.Second << min(k-1, 16)
}

// certRollout is what the operator remembers of one cluster's certificates between passes:
// which Secret content (revision) it is rolling out since when, and where each node stands.
// Certificate changes need none of it to be found (the served certificate tells), so an
// operator restart loses only the CA-only window under way.
type certRollout struct {
	revision string    // tlsRevision of the Secret content being rolled out
	since    time.Time // when this process first saw the revision
	// changed: the revision replaced one seen before by this process. The first revision seen
	// is a baseline: nodes serving its certificate are taken to hold all of it.
	changed bool
	// switched: a reload made a node serve the revision's certificate.
	switched bool
	reported bool // the completion Event for the revision was recorded
	nodes    map[string]*nodeCert
}

// nodeCert is one node's standing in the rollout.
type nodeCert struct {
	loaded  string    // the revision the node is known to hold ("" = not known)
	reloads int       // reloads since the revision changed
	next    time.Time // no reload before this
}

// observe starts tracking revision at now, if it is new.
func (c *certRollout) observe(revision string, now time.Time) {
	if c.revision == revision {
		return
	}
	if c.nodes == nil {
		c.nodes = map[string]*nodeCert{}
	}
	c.changed = c.revision != ""
	c.revision, c.since, c.reported, c.switched = revision, now, false, false
	for _, n := range c.nodes {
		n.reloads, n.next = 0, time.Time{}
	}
}

// due reports whether node name, serving the revision's certificate or not, is to be
// reloaded now.
func (c *certRollout) due(name string, serves bool, now time.Time) bool {
	n := c.nodes[name]
	if n == nil {
		n = &nodeCert{}
		c.nodes[name] = n
		if serves && !c.changed {
			n.loaded = c.revision // baseline: nothing to roll out
		}
	}
	return n.loaded != c.revision && !now.Before(n.next)
}

// reloaded records a reload of node name at now: it served the revision's certificate before
// (before) and after it (after).
func (c *certRollout) reloaded(name string, before, after bool, now time.Time) {
	n := c.nodes[name]
	n.reloads++
	switch {
	case !after:
		// Its volume still holds an older certificate: not refreshed yet.
		n.next = now.Add(certRetry(n.reloads))
	case !before:
		// The reload switched the certificate, so it read the new files: all of them.
		n.loaded, c.switched = c.revision, true
	case now.Sub(c.since) >= tlsRefreshWindow:
		// Only ca.crt changed, and this reload came after every kubelet refreshed.
		n.loaded = c.revision
	default:
		n.next = now.Add(windowRetry(n.reloads))
		if end := c.since.Add(tlsRefreshWindow); n.next.After(end) {
			n.next = end
		}
	}
}

// failed records a reload of node name that failed at now; it is retried like one that found
// old files.
func (c *certRollout) failed(name string, now time.Time) {
	n := c.nodes[name]
	n.reloads++
	n.next = now.Add(certRetry(n.reloads))
}

// current reports whether node name is known to hold the revision.
func (c *certRollout) current(name string) bool {
	n := c.nodes[name]
	return n != nil && n.loaded == c.revision
}

// stalled reports whether node name still serves another certificate longer after the change
// than a kubelet may take to refresh its volume.
func (c *certRollout) stalled(name string, now time.Time) bool {
	return !c.current(name) && now.Sub(c.since) > tlsRefreshWindow
}

// report says whether the rollout's completion is news worth an Event: a change this process
// saw, or certificates it switched (after a restart, say), and not reported yet.
func (c *certRollout) report() bool { return (c.changed || c.switched) && !c.reported }

// nextDue is the earliest time a node among names is due, and false when none is pending.
func (c *certRollout) nextDue(names []string) (time.Time, bool) {
	var at time.Time
	pending := false
	for _, name := range names {
		n := c.nodes[name]
		if n == nil || n.loaded == c.revision {
			continue
		}
		if !pending || n.next.Before(at) {
			at, pending = n.next, true
		}
	}
	return at, pending
}

// prune forgets nodes that are no longer in keep.
func (c *certRollout) prune(keep map[string]bool) {
	for name := range c.nodes {
		if !keep[name] {
			delete(c.nodes, name)
		}
	}
}

// tlsRevision identifies the content of a TLS Secret: what a node loads from its volume.
func tlsRevision(data map[string][]byte) string {
	h := sha256.New()
	for _, k := range []string{tlscheck.KeyCert, tlscheck.KeyKey, tlscheck.KeyCA} {
		fmt.Fprintf(h, "%s\x00%d\x00", k, len(data[k]))
		h.Write(data[k])
	}
	return hex.EncodeToString(h.Sum(nil))
}

// leafOf parses the first certificate of a PEM bundle (tls.crt: the leaf, then its chain).
func leafOf(bundle []byte) (*x509.Certificate, error) {
	for rest := bundle; ; {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			return nil, errors.New("no certificate in tls.crt")
		}
		if b.Type == "CERTIFICATE" {
			return x509.ParseCertificate(b.Bytes)
		}
	}
}

// rollout returns the cluster's certificate rollout, creating it on first use.
func (r *Reconciler) rollout(key types.NamespacedName) (rollout *certRollout) {
	r.memory.with(key, func(c *clusterMemory) {
		if c.cert == nil {
			c.cert = &certRollout{nodes: map[string]*nodeCert{}}
		}
		rollout = c.cert
	})
	return rollout
}

// certMember is one ready member as the certificates concern sees it.
type certMember struct {
	node model.Node
	// going: its pod is being deleted (its replacement starts with the Secret's files).
	going bool
	// mounted is the TLS Secret its pod mounts: the one its spec was fixed with.
	mounted string
	// read is the certificate the observation found it serving; ok is false for a member the
	// observation did not read.
	read servedCertificate
	ok   bool
}

// certStepKind is what the certificates concern does about one member this pass.
type certStepKind int

const (
	certGoing      certStepKind = iota // being replaced: nothing, and the rollout is not complete
	certNotMounted                     // mounts another Secret: a Warning, it changes only when replaced
	certUnread                         // its certificate could not be read (untrusted: a Warning)
	certHeld                           // serving, not due: nothing to do
	certReload                         // due: reload its TLS files and check what it serves then
)

// certStep is the certificates concern's decision for one member.
type certStep struct {
	kind   certStepKind
	member certMember
	// serves: it served the wanted certificate when observed (certHeld, certReload).
	serves bool
}

// plan is the certificates concern's planner: from the observation of every ready member and
// the wanted certificate of Secret secret, what to do about each member now. It does no I/O; it
// records in the rollout only the baseline of members seen for the first time.
func (c *certRollout) plan(members []certMember, secret string, want *x509.Certificate, now time.Time) []certStep {
	steps := make([]certStep, 0, len(members))
	for _, m := range members {
		step := certStep{member: m}
		switch {
		case m.going:
			step.kind = certGoing
		case m.mounted != secret:
			step.kind = certNotMounted
		case !m.ok || m.read.err != nil:
			step.kind = certUnread
		default:
			step.serves = bytes.Equal(m.read.cert.Raw, want.Raw)
			step.kind = certHeld
			if c.due(m.node.Name, step.serves, now) {
				step.kind = certReload
			}
		}
		steps = append(steps, step)
	}
	return steps
}

// certMembers is every ready member with what the pass observed of it.
func certMembers(p *pass) []certMember {
	out := make([]certMember, 0, len(p.members))
	for _, m := range p.members {
		cm := certMember{node: m}
		n, err := p.node(m.Name)
		pod := p.pods[m.Name]
		if err != nil || pod == nil || pod.DeletionTimestamp != nil {
			cm.going = true
		} else {
			cm.mounted = n.Spec().TLSSecretRef
		}
		cm.read, cm.ok = p.seen.certs[m.Name]
		out = append(out, cm)
	}
	return out
}

// rotateCertificates is the Active step that gets the Secret's certificate served by every
// ready node (see the top of this file): the rollout plans from the pass's observation, and
// each step is carried out here. It never ends the pass: the planner's action runs after it,
// and a node still waiting for its volume asks for an early pass instead.
func (r *Reconciler) rotateCertificates(ctx context.Context, p *pass) *outcome {
	if p.tlsData == nil || p.seen == nil || p.seen.certs == nil {
		return nil
	}
	want, err := leafOf(p.tlsData[tlscheck.KeyCert])
	if err != nil {
		return nil // validated already: cannot happen
	}
	ctx, cancel := context.WithTimeout(ctx, observeTimeout)
	defer cancel()
	secret := p.cluster.TLSSecretRef()
	ro := r.rollout(p.key)
	now := time.Now()
	ro.observe(tlsRevision(p.tlsData), now)
	keep := map[string]bool{}
	for _, n := range p.nodes {
		keep[n.Name()] = true
	}
	ro.prune(keep)

	var examined []string // nodes whose served certificate was read
	complete := true
	for _, step := range ro.plan(certMembers(p), secret, want, now) {
		name := step.member.node.Name
		if step.kind != certNotMounted && step.kind != certGoing {
			p.settle(ReasonCertNotMounted + "/" + name)
		}
		switch step.kind {
		case certGoing:
			complete = false
		case certNotMounted:
			p.raiseAs(ReasonCertNotMounted+"/"+name, ReasonCertNotMounted, "ReloadTLS", fmt.Sprintf(
				"node %s mounts TLS Secret %q, not %q: its certificate changes only when the node is replaced", name, step.member.mounted, secret))
			complete = false
		case certUnread:
			if err := step.member.read.err; errors.Is(err, model.ErrUntrustedCertificate) {
				// The operator cannot talk to the node at all: its command connections verify
				// the same way. Typically a CA replaced in one step instead of through a bundle.
				p.raiseAs(ReasonCertUntrusted+"/"+name, ReasonCertUntrusted, "ReloadTLS", fmt.Sprintf(
					"node %s serves a certificate that ca.crt of TLS Secret %q does not trust (%v); during a CA change keep the old CA in ca.crt until every node serves the new certificate",
					name, secret, err))
			}
			complete = false
		case certHeld:
			p.settle(ReasonCertUntrusted + "/" + name)
			p.noteServed(step.member.read.cert.NotAfter, now)
			examined = append(examined, name)
			complete = complete && ro.current(name)
		case certReload:
			p.settle(ReasonCertUntrusted + "/" + name)
			examined = append(examined, name)
			complete = r.reloadNode(ctx, p, ro, step, want, now) && complete
		}
	}

	if at, pending := ro.nextDue(examined); pending {
		p.requeueWithin(max(time.Until(at), 100*time.Millisecond))
		return nil
	}
	if complete && len(examined) > 0 && ro.report() {
		ro.reported = true
		r.rotated(ctx, p, ro, want, len(examined))
	}
	return nil
}

// reloadNode carries out a certReload step: the node re-reads its TLS files, and the
// certificate it serves then says whether its volume held the Secret's content. It reports
// whether the node is known to hold the rollout's revision.
func (r *Reconciler) reloadNode(ctx context.Context, p *pass, ro *certRollout, step certStep, want *x509.Certificate, now time.Time) bool {
	m, served := step.member.node, step.member.read.cert
	failedKey := ReasonCertReloadFailed + "/" + m.Name
	if err := p.valkey.Certificates.ReloadTLS(ctx, m); err != nil {
		p.noteServed(served.NotAfter, now)
		ro.failed(m.Name, now)
		p.raiseAs(failedKey, ReasonCertReloadFailed, "ReloadTLS", fmt.Sprintf("reloading the TLS files of node %s failed: %v", m.Name, err))
		return false
	}
	p.settle(failedKey)
	after, err := p.valkey.Reads.ServedCertificate(ctx, m) // the reload's own check, past the observation
	nowServes := err == nil && bytes.Equal(after.Raw, want.Raw)
	if err == nil {
		p.noteServed(after.NotAfter, now)
	} else {
		p.noteServed(served.NotAfter, now)
	}
	ro.reloaded(m.Name, step.serves, nowServes, now)
	stallKey := ReasonCertNotServed + "/" + m.Name
	switch {
	case ro.current(m.Name):
		p.settle(stallKey)
		p.log.Info("node reloaded its TLS files", "node", m.Name, "serial", want.SerialNumber.String())
	case ro.stalled(m.Name, now) && !nowServes:
		old := "?"
		if after != nil {
			old = after.SerialNumber.String()
		}
		p.raiseAs(stallKey, ReasonCertNotServed, "ReloadTLS", fmt.Sprintf(
			"node %s still serves certificate serial %s, not serial %s of TLS Secret %q, more than %s after the Secret changed: its pod's copy of the Secret has not been refreshed",
			m.Name, old, want.SerialNumber.String(), p.cluster.TLSSecretRef(), tlsRefreshWindow))
	default:
		p.log.V(1).Info("node's TLS files not refreshed yet", "node", m.Name, "reloads", ro.nodes[m.Name].reloads)
	}
	return ro.current(m.Name)
}

// rotated records the completion of a rollout. The Event's related object is the Secret at
// its current resourceVersion, so each rotation is an Event of its own instead of one more
// count on the previous rotation's.
func (r *Reconciler) rotated(ctx context.Context, p *pass, ro *certRollout, want *x509.Certificate, nodes int) {
	sec := &corev1.Secret{}
	var related *corev1.Secret
	if err := r.apiReader.Get(ctx, types.NamespacedName{Namespace: p.key.Namespace, Name: p.cluster.TLSSecretRef()}, sec); err == nil {
		related = sec
	}
	took := time.Since(ro.since).Round(100 * time.Millisecond)
	var msg string
	if ro.switched {
		msg = fmt.Sprintf("Every node (%d) serves certificate serial %s of TLS Secret %q, reloaded without a restart %s after the change was seen",
			nodes, want.SerialNumber.String(), p.cluster.TLSSecretRef(), took)
	} else {
		msg = fmt.Sprintf("Every node (%d) reloaded ca.crt of TLS Secret %q (certificate serial %s unchanged) over the %s a kubelet may take to refresh it",
			nodes, p.cluster.TLSSecretRef(), want.SerialNumber.String(), tlsRefreshWindow)
	}
	p.log.Info("certificate rotation complete", "nodes", nodes, "serial", want.SerialNumber.String(), "took", took)
	if related != nil {
		r.event(p, related, ReasonCertRotated, "ReloadTLS", "%s", msg)
	} else {
		r.event(p, nil, ReasonCertRotated, "ReloadTLS", "%s", msg)
	}
}

// CertificateReload is the port of the certificates concern.
type CertificateReload interface {
	// ReloadTLS makes node re-read its certificate, key and CA files, without a restart.
	ReloadTLS(ctx context.Context, node model.Node) error
}
