package reconciler

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"sync"
	"time"

	"github.com/gomomento/valkey-operator/valkeyops/model"
	"k8s.io/apimachinery/pkg/types"
)

// credentialsRecheck is how long a cluster whose servers were all found holding the wanted
// credentials goes without reading them again, as long as nothing that decides them changed.
// Reading them is an ACL GETUSER per user and two CONFIG GETs on every server: done every
// pass, it was most of the commands an idle fleet sent its servers. The recheck still finds,
// within this bound, an ACL someone changed on a server behind the operator's back.
const credentialsRecheck = 5 * time.Minute

// credentialChecks remembers, per cluster, the inputs of the last pass that found every
// server holding exactly the credentials they call for, and when. The zero value is ready.
type credentialChecks struct {
	mu sync.Mutex
	m  map[types.NamespacedName]credentialCheck
}

type credentialCheck struct {
	inputs string
	at     time.Time
}

// credentialInputs fingerprints what decides the servers' credentials: the ACL (passwords
// only as hashes), the operator's login and wanted passwords, and which servers are members
// at which address (a replaced pod is a new server that must be read).
func credentialInputs(p *pass) string {
	h := sha256.New()
	h.Write([]byte(model.RenderACL(p.acl)))
	h.Write([]byte{0})
	h.Write([]byte(model.HashPassword(p.operatorPassword) + model.HashPassword(p.operatorPasswordWanted)))
	var members []string
	for _, m := range p.members {
		members = append(members, m.Name+"="+m.Addr)
	}
	slices.Sort(members)
	for _, m := range members {
		h.Write([]byte{0})
		h.Write([]byte(m))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// fresh reports whether the cluster's servers were found converged on these very inputs
// less than credentialsRecheck ago.
func (c *credentialChecks) fresh(key types.NamespacedName, inputs string, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	last, ok := c.m[key]
	return ok && last.inputs == inputs && now.Sub(last.at) < credentialsRecheck
}

// converged records that every server of the cluster holds what inputs call for.
func (c *credentialChecks) converged(key types.NamespacedName, inputs string, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[types.NamespacedName]credentialCheck{}
	}
	c.m[key] = credentialCheck{inputs: inputs, at: now}
}

// idle reports a plan that changes nothing: every server read holds what it should.
func (plan credentialsPlan) idle() bool {
	return len(plan.fixes) == 0 && len(plan.replication) == 0 && !plan.switchLogin && !plan.retired && plan.waiting == ""
}

// allRead reports that every one of the cluster's nodes was read.
func allRead(held []model.AuthState, nodes int) bool {
	if len(held) != nodes {
		return false
	}
	for _, st := range held {
		if st.Err != nil {
			return false
		}
	}
	return true
}

// forget drops the cluster (deleted, or a change was made that must be read back).
func (c *credentialChecks) forget(key types.NamespacedName) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, key)
}
