package reconciler

import (
	"cmp"
	"context"
)

// concern is one part of the Active phase's work on the servers: it plans from the pass's one
// observation (observe.go) and acts through its own port. needs says what the observation must
// read for it this pass (nil: the snapshot alone).
type concern struct {
	name  string
	needs func(r *Reconciler, p *pass) reading
	// act plans and performs the concern's next action(s). An outcome ends the pass: the
	// concerns after it wait for the next pass, which plans from a fresh observation.
	act func(ctx context.Context, p *pass) *outcome
}

// concerns is the registry of the Active phase, in order of precedence. Credentials come
// first: a password rotation's switch of the operator's own login ends the pass, so nothing
// else acts with the login it replaces. Certificates come next and never end a pass (a node
// waiting for its volume asks for an early one), then availability zones and client
// addresses, which never end one either; client addresses come before topology, so a server
// is told its external address before it is handed slots. Topology comes last and performs
// at most one action per pass. Each plans with a pure function of the observation and the
// desired spec, then acts through its own port: credentials with planCredentials
// (live_acl.go), certificates with certRollout.plan (live_tls.go), zones and client
// addresses with planLive (livesetting.go; zones.go, announce.go), topology with plan.Next
// (which also forms a Creating cluster, in its forming mode). A new concern (persistence,
// backup) declares its port and its planner beside its code, adds what it reads to reading,
// and one line here.
func (r *Reconciler) concerns() []concern {
	return []concern{
		{"sync-credentials", credentialsNeed, r.syncCredentials},
		{"rotate-certificates", certificatesNeed, r.rotateCertificates},
		{"set-zones", zonesNeed, r.setZones},
		{"announce-client-addresses", announcesNeed, r.setAnnounces},
		{"plan-and-act", nil, r.planActive},
	}
}

// reading says which parts an observation reads beside the snapshot.
type reading struct {
	// credentials are the inputs (credentialInputs) the servers' users are to be checked
	// against; "" reads none.
	credentials  string
	certificates bool
	// zones names the members whose availability-zone setting is to be read (zones.go).
	zones []string
	// announces names the members whose client address is to be read (announce.go).
	announces []string
}

// needs is what this pass's observation reads for every registered concern.
func (r *Reconciler) needs(p *pass) reading {
	var all reading
	for _, c := range r.concerns() {
		if c.needs == nil {
			continue
		}
		n := c.needs(r, p)
		all.credentials = cmp.Or(all.credentials, n.credentials)
		all.certificates = all.certificates || n.certificates
		all.zones = append(all.zones, n.zones...)
		all.announces = append(all.announces, n.announces...)
	}
	return all
}

// credentialsNeed: the servers' users are read unless they were found converged on the same
// inputs a moment ago (credcheck.go), or the cluster has no ACL yet.
func credentialsNeed(r *Reconciler, p *pass) reading {
	if p.acl.OperatorPassword == "" {
		return reading{}
	}
	inputs := credentialInputs(p)
	if r.memory.credentialsFresh(p.key, inputs, r.opts.Now()) {
		return reading{}
	}
	return reading{credentials: inputs}
}

// certificatesNeed: with TLS, the certificate every member serves is read every pass (a
// handshake, no command).
func certificatesNeed(_ *Reconciler, p *pass) reading {
	return reading{certificates: p.tlsData != nil}
}
