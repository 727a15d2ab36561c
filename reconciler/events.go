package reconciler

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// Event reasons, every one the reconciler records (stable, for `kubectl get events` filters
// and alerts). A Warning reason stands until its condition clears (raise, settle,
// reportProblems); a Normal one records something that happened.
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
	// ReasonRestoreRefused: spec.restoreFrom names a backup that cannot be restored into
	// this cluster (missing, incomplete, too new for its Valkey); nothing is created.
	ReasonRestoreRefused = "RestoreRefused"
	// ReasonRestoreFailed: a shard's snapshot could not be fetched into its first pod.
	ReasonRestoreFailed = "RestoreFailed"

	// Warnings of the Active phase's topology.
	ReasonTopologyStall = "TopologyStalled"
	ReasonTopologyFail  = "TopologyActionFailed"
	ReasonSlotsLost     = "SlotsLost" // also a total outage: every copy of the data lost
	// ReasonStranger: a server of another cluster (met by hand, or through a reused pod IP)
	// was found among a server's peers and forgotten.
	ReasonStranger = "StrangerForgotten"

	// Warnings of data volumes (volumes.go).
	ReasonStorageClassMissing = "StorageClassMissing"
	ReasonVolumeNotExpandable = "VolumeExpansionUnsupported"
	ReasonVolumeShrinkRefused = "VolumeShrinkRefused"
	ReasonVolumeChangeRefused = "VolumeChangeRefused"
	ReasonPersistenceFailing  = "PersistenceFailing" // a server cannot write its data to disk
	ReasonVolumeNotBound      = "VolumeNotBound"

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
	ReasonVolumeCreated     = "VolumeCreated"
	ReasonVolumeExpanding   = "VolumeExpanding"
	ReasonNodeRestarted     = "NodeRestarted"
	// ReasonRestoreShardLoaded: a restored cluster formed; one per shard, with the keys its
	// primary holds against the backup's count.
	ReasonRestoreShardLoaded = "RestoreShardLoaded"

	// External access (external.go) and requests (requests.go).
	// ReasonExternalRefused (Warning): a node cannot be given the external address asked for (a
	// NodePort below Valkey 9.0, a load balancer that gives a hostname only).
	ReasonExternalRefused = "ExternalAccessRefused"
	// ReasonClientAddress (Normal): a server now announces this client address.
	ReasonClientAddress = "ClientAddressAnnounced"
	// ReasonRequest: a request was carried out, or needed nothing (a balanced cluster).
	ReasonRequest = "Request"
	// ReasonRequestRefused (Warning): a request was refused: another topology action runs, the
	// node is no primary, it has no in-sync replica, or the annotation is malformed.
	ReasonRequestRefused = "RequestRefused"
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

// problem is one decision a step made about a Warning: raised with its message, or settled
// (its condition is gone, so a recurrence is reported again). Steps record problems as data
// on the pass; reportProblems, run once as the pass ends, is the one place Warnings are sent
// and forgotten. Only a step that decided about a reason this pass settles it: a pass that
// ended before a step ran leaves that step's Warnings standing.
type problem struct {
	key, reason, action, msg string
	settled                  bool
}

// raise records a Warning; it is sent once per distinct (reason, message) until settled.
func (p *pass) raise(reason, action, msg string) { p.raiseAs(reason, reason, action, msg) }

// raiseAs is raise remembered under key, for a reason that several objects can each raise.
func (p *pass) raiseAs(key, reason, action, msg string) {
	p.problems = append(p.problems, problem{key: key, reason: reason, action: action, msg: msg})
}

// settle records that the Warnings under keys no longer stand.
func (p *pass) settle(keys ...string) {
	for _, k := range keys {
		p.problems = append(p.problems, problem{key: k, settled: true})
	}
}

// reportProblems sends and forgets Warnings as the pass's steps decided, in the order they
// decided.
func (r *Reconciler) reportProblems(p *pass) {
	for _, pr := range p.problems {
		if pr.settled {
			r.memory.peek(p.key, func(c *clusterMemory) { delete(c.warned, pr.key) })
			continue
		}
		if !r.firstTime(p, pr.key, pr.msg) {
			continue
		}
		p.log.Info("warning", "reason", pr.reason, "message", pr.msg)
		if r.opts.Recorder != nil {
			r.opts.Recorder.Eventf(p.obj, nil, corev1.EventTypeWarning, pr.reason, pr.action, "%s", pr.msg)
		}
	}
	p.problems = nil
}

// noteOnce records a Normal Event once until cleared.
func (r *Reconciler) noteOnce(p *pass, reason, action, msg string) {
	if r.firstTime(p, reason, msg) {
		r.event(p, nil, reason, action, "%s", msg)
	}
}
