package reconciler

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// Event reasons (stable, for `kubectl get events` filters).
const (
	ReasonStateChanged      = "StateChanged"
	ReasonInvalidTLS        = "InvalidTLSSecret"
	ReasonCertExpired       = "CertificateExpired"
	ReasonConfigUnresolved  = "ConfigUnresolved"
	ReasonRoleMissing       = "RoleMissing"
	ReasonACLRejected       = "ACLRejected"
	ReasonNodeCreated       = "NodeCreated"
	ReasonPodCreated        = "PodCreated"
	ReasonBootstrap         = "Bootstrap"
	ReasonBootstrapFailed   = "BootstrapFailed"
	ReasonObserveFailed     = "ObserveFailed"
	ReasonClusterFormed     = "ClusterFormed"
	ReasonSecretUnavailable = "AuthSecretUnavailable"
	ReasonConnectFailed     = "ConnectFailed"
	ReasonObjectConflict    = "ObjectConflict"
	ReasonPodsUnschedulable = "PodsUnschedulable"
	ReasonConfigRejected    = "ConfigRejected" // a setting valkey-server refused at start-up
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
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.warned[p.key]
	if m == nil {
		m = map[string]string{}
		r.warned[p.key] = m
	}
	repeat := m[reason] == msg
	m[reason] = msg
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
	r.mu.Lock()
	delete(r.warned[p.key], reason)
	r.mu.Unlock()
}
