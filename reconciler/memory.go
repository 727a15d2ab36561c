package reconciler

import (
	"context"
	"sync"

	"github.com/gomomento/valkey-operator/valkeyops/model"
	"k8s.io/apimachinery/pkg/types"
)

// memory is everything the reconciler keeps of its clusters between passes: one entry per
// cluster, behind one lock, dropped in one place (forget). Everything else a pass needs it
// reads again, from the API through the cache or from the servers, so an operator that
// restarts (or a new leader) loses only what these fields save, and each field says what
// that is. The zero value is ready.
type memory struct {
	mu       sync.Mutex
	clusters map[types.NamespacedName]*clusterMemory
}

// clusterMemory is one cluster's entry. Its fields are read and written only under
// memory.mu, inside with or peek, whose functions never block (no API or Valkey calls).
// Pointers handed out (the certificate rollout) are used by the cluster's own passes, which
// controller-runtime never runs two at a time.
type clusterMemory struct {
	// expected holds ValkeyNodes created or deleted that the informer cache does not show
	// yet; until it catches up the cluster is not acted on (members.go). Lost on restart:
	// the new process lists from a cache that already agrees with the API.
	expected map[string]expectation
	// warned is the last Event message per reason key (events.go). Lost on restart: a
	// standing Warning is recorded once more.
	warned map[string]string
	// cert is the certificate rollout under way (live_tls.go). Lost on restart: the
	// served certificates are read again and the Secret's revision is the new baseline.
	cert *certRollout
	// login is the operator password the servers last accepted, the fallback should
	// {cluster}-auth-applied be deleted (live_acl.go).
	login string
	// credCheck is the last pass that found every server holding the wanted credentials,
	// so idle passes need not read them (credcheck.go). Lost on restart: one more read.
	credCheck credentialCheck
	// reads cancels the reads a pass is making of the servers when one of them exits
	// (interrupt.go); nil when no pass is reading.
	reads context.CancelCauseFunc
	// move is the slot move running in the background (tasks.go). Lost on restart: the
	// move's progress lives in Valkey, and the next pass resumes it.
	move *task
	// restore is the manifest of the backup a Creating cluster is restored from
	// (restore.go). Lost on restart: read again from the object store.
	restore *restoring
	// zones is the availability-zone each pod's server holds, by pod UID (zones.go). Lost on
	// restart: each server's setting is read once more.
	zones map[types.UID]held[string]
	// announced is the client address each pod's server announces, by pod UID
	// (announce.go). Lost on restart: each server's is read once more.
	announced map[types.UID]held[model.ClientAddress]
}

// with runs fn on key's entry under the lock, creating the entry if there is none.
func (m *memory) with(key types.NamespacedName, fn func(c *clusterMemory)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.clusters == nil {
		m.clusters = map[types.NamespacedName]*clusterMemory{}
	}
	c := m.clusters[key]
	if c == nil {
		c = &clusterMemory{}
		m.clusters[key] = c
	}
	fn(c)
}

// peek runs fn on key's entry under the lock if there is one: a read, or an update that must
// not bring back an entry forget dropped (a pod event arriving after its cluster was deleted).
func (m *memory) peek(key types.NamespacedName, fn func(c *clusterMemory)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if c := m.clusters[key]; c != nil {
		fn(c)
	}
}

// forget drops what is kept of a cluster that is gone, cancelling its background move.
func (m *memory) forget(key types.NamespacedName) {
	m.mu.Lock()
	c := m.clusters[key]
	delete(m.clusters, key)
	m.mu.Unlock()
	if c != nil && c.move != nil {
		c.move.cancel()
	}
}
