package reconciler

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
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

// credentialCheck is, per cluster, the inputs of the last pass that found every server
// holding exactly the credentials they call for, and when (zero: none since the process
// started, or since a change that must be read back).
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
func (m *memory) credentialsFresh(key types.NamespacedName, inputs string, now time.Time) (fresh bool) {
	m.peek(key, func(c *clusterMemory) {
		last := c.credCheck
		fresh = last.inputs != "" && last.inputs == inputs && now.Sub(last.at) < credentialsRecheck
	})
	return fresh
}

// converged records that every server of the cluster holds what inputs call for.
func (m *memory) credentialsConverged(key types.NamespacedName, inputs string, now time.Time) {
	m.with(key, func(c *clusterMemory) { c.credCheck = credentialCheck{inputs: inputs, at: now} })
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
