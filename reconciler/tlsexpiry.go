package reconciler

import (
	"fmt"
	"time"

	"github.com/gomomento/valkey-operator/reconciler/plan"
)

// Certificate expiry and the topology (docs/tls.md). Valkey's servers verify each other's
// certificates on the TLS cluster bus and on replication links, expiry included, at every
// handshake; links made before the expiry hold. So a formed cluster whose certificate expires
// keeps serving, but no server can meet a new peer or attach a replica until the certificate
// is renewed: a Join or Replicate would wait out its timeouts and fail without saying why, and
// a new cluster could never form. While the certificate is expired such steps are not tried;
// they wait, with a Warning Event that names the expiry. Everything else (a failover, a
// rebalance, retiring a node, reloading a renewed certificate) goes on.

// certExpiredAt is when the certificate that keeps servers from meeting expired: the TLS
// Secret's, or failing that the earliest expired one a node still serves (a renewed Secret
// whose files the node has not reloaded yet). Zero when none is expired.
func (p *pass) certExpiredAt(now time.Time) time.Time {
	if !p.certNotAfter.IsZero() && now.After(p.certNotAfter) {
		return p.certNotAfter
	}
	return p.servedExpired
}

// noteServed records that a node serves a certificate expiring at notAfter, if it has
// expired by now.
func (p *pass) noteServed(notAfter, now time.Time) {
	if now.After(notAfter) && (p.servedExpired.IsZero() || notAfter.Before(p.servedExpired)) {
		p.servedExpired = notAfter
	}
}

// expiryNote says why servers cannot meet: the certificate of TLS Secret secret expired at.
func expiryNote(secret string, at time.Time) string {
	return fmt.Sprintf("the TLS certificate of Secret %q expired at %s; servers refuse an expired peer on the cluster bus until it is renewed",
		secret, at.UTC().Format(time.RFC3339))
}

// expiryStall turns a planned action that needs servers to make new bus or replication links
// (Join, Replicate) into a Wait with a Warning naming the expiry, when a certificate expired
// at expiredAt (zero: none, and a is returned as it is).
func expiryStall(a plan.Action, secret string, expiredAt time.Time) (plan.Action, bool) {
	if expiredAt.IsZero() || (a.Kind != plan.Join && a.Kind != plan.Replicate) {
		return a, false
	}
	return plan.Action{Kind: plan.Wait, Warning: true,
		Reason: fmt.Sprintf("%s (%s) waits: %s", a.Kind, a.Reason, expiryNote(secret, expiredAt))}, true
}
