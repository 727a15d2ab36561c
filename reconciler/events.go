package reconciler

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// Event reasons, every one the reconciler records (stable, for `kubectl get events` filters
// and alerts). A Warning reason stands until its condition clears (warn, clearWarning); a
// Normal one records something that happened.
const (
	// Warnings of the cluster as a whole.
	ReasonInvalidTLS        = "InvalidTLSSecret"
	ReasonCertExpired       = "CertificateExpired"
	ReasonConfigUnresolved  = "ConfigUnresolved"
	ReasonConfigRejected    = "ConfigRejected" // a setting valkey-server refused at start-up
	ReasonRoleMissing       = "RoleMissing"
	ReasonACLRejected       = "ACLRejected"
	ReasonSecretUnavailable = "AuthSecretUnavailable"
	ReasonObjectConflict    = "ObjectConflict"
	ReasonPodsUnschedulable = "PodsUnschedulable"
	ReasonConnectFailed     = "ConnectFailed"
	ReasonObserveFailed     = "ObserveFailed"
	ReasonBootstrapFailed   = "BootstrapFailed"

	// Warnings of the Active phase's topology.
	ReasonTopologyStall = "TopologyStalled"
	ReasonTopologyFail  = "TopologyActionFailed"
	ReasonSlotsLost     = "SlotsLost" // also a total outage: every copy of the data lost
	// ReasonStranger: a server of another cluster (met by hand, or through a reused pod IP)
	// was found among a server's peers and forgotten.
	ReasonStranger = "StrangerForgotten"

	// Warnings of live credentials and certificates.
	ReasonACLApplyFailed   = "ACLApplyFailed"
	ReasonCertNotServed    = "CertificateNotServed"
	ReasonCertReloadFailed = "CertificateReloadFailed"
	ReasonCertUntrusted    = "CertificateUntrusted"
	ReasonCertNotMounted   = "CertificateSecretNotMounted"

	// Normal: what the operator did.
	ReasonStateChanged      = "StateChanged"
	ReasonNodeCreated       = "NodeCreated"
	ReasonPodCreated        = "PodCreated"
	ReasonBootstrap         = "Bootstrap"
	ReasonClusterFormed     = "ClusterFormed"
	ReasonTopology          = "TopologyAction"
	ReasonNodeRetired       = "NodeRetired"
	ReasonACLApplied        = "ACLApplied"
	ReasonCredentialRotated = "CredentialRotated"
	ReasonCertRotated       = "CertificateRotated"
)

// event records a Normal Event on the cluster. events.k8s.io folds Events with the same
// (regarding, related, reason, action) into one series whatever their note says, so callers
// give distinct happenings a distinct action or related object.
func (r *Reconciler) event(p *pass, related runtime.Object, reason, action, format string, args ...any) {
	if r.opts.Recorder != nil {
		r.opts.Recorder.Eventf(p.obj, related, corev1.EventTypeNormal, reason, action, format, args...)
	}
}

// firstTime remembers msg as the latest for (cluster, reason) and reports whether it differs
// from the one remembered before: idempotent steps re-run every pass, and an Event per pass
// would bury the one that matters.
func (r *Reconciler) firstTime(p *pass, reason, msg string) bool {
	repeat := false
	r.memory.with(p.key, func(c *clusterMemory) {
		if c.warned == nil {
			c.warned = map[string]string{}
		}
		repeat = c.warned[reason] == msg
		c.warned[reason] = msg
	})
	return !repeat
}

// warn records a Warning Event once per distinct (reason, message) until cleared.
func (r *Reconciler) warn(p *pass, reason, action, msg string) {
	r.warnAs(p, reason, reason, action, msg)
}

// warnAs is warn remembered under key, for a reason that several objects can each raise.
func (r *Reconciler) warnAs(p *pass, key, reason, action, msg string) {
	if !r.firstTime(p, key, msg) {
		return
	}
	p.log.Info("warning", "reason", reason, "message", msg)
	if r.opts.Recorder != nil {
		r.opts.Recorder.Eventf(p.obj, nil, corev1.EventTypeWarning, reason, action, "%s", msg)
	}
}

// noteOnce records a Normal Event once until cleared.
func (r *Reconciler) noteOnce(p *pass, reason, action, msg string) {
	if r.firstTime(p, reason, msg) {
		r.event(p, nil, reason, action, "%s", msg)
	}
}

// clearWarning forgets a warning so that a recurrence is reported again.
func (r *Reconciler) clearWarning(p *pass, reason string) {
	r.memory.peek(p.key, func(c *clusterMemory) { delete(c.warned, reason) })
}
