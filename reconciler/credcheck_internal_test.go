package reconciler

import (
	"errors"
	"testing"
	"time"

	"github.com/gomomento/valkey-operator/valkeyops/model"
	"github.com/stretchr/testify/assert"
	"k8s.io/apimachinery/pkg/types"
)

// TestCredentialChecks: a cluster found converged is not read again while its inputs stay
// the same and the recheck bound has not passed; any change of input, the bound, or forget
// makes the next pass read again.
func TestCredentialChecks(t *testing.T) {
	key := types.NamespacedName{Namespace: "ns", Name: "c"}
	t0 := time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)
	var m memory
	assert.False(t, m.credentialsFresh(key, "a", t0), "never checked")
	m.credentialsConverged(key, "a", t0)
	assert.True(t, m.credentialsFresh(key, "a", t0.Add(credentialsRecheck-time.Second)))
	assert.False(t, m.credentialsFresh(key, "b", t0.Add(time.Second)), "inputs changed")
	assert.False(t, m.credentialsFresh(key, "a", t0.Add(credentialsRecheck)), "recheck due")
	assert.False(t, m.credentialsFresh(types.NamespacedName{Namespace: "ns", Name: "other"}, "a", t0), "per cluster")
	m.forget(key)
	assert.False(t, m.credentialsFresh(key, "a", t0), "forgotten")
}

// TestCredentialInputs: what decides the servers' credentials changes the fingerprint.
func TestCredentialInputs(t *testing.T) {
	base := func() *pass {
		return &pass{acl: model.ACLSpec{DefaultPassword: "d", OperatorPassword: "o"}, operatorPassword: "o", operatorPasswordWanted: "o",
			members: []model.Node{{Name: "n0", Addr: "10.0.0.1:6379"}, {Name: "n1", Addr: "10.0.0.2:6379"}}}
	}
	same := base()
	same.members = []model.Node{same.members[1], same.members[0]}
	assert.Equal(t, credentialInputs(base()), credentialInputs(same), "member order does not matter")
	for name, change := range map[string]func(*pass){
		"ACL":              func(p *pass) { p.acl.DefaultPassword = "d2" },
		"wanted password":  func(p *pass) { p.operatorPasswordWanted = "o2" },
		"login password":   func(p *pass) { p.operatorPassword = "o2" },
		"a replaced pod":   func(p *pass) { p.members[1].Addr = "10.0.0.3:6379" },
		"one member fewer": func(p *pass) { p.members = p.members[:1] },
	} {
		p := base()
		change(p)
		assert.NotEqual(t, credentialInputs(base()), credentialInputs(p), name)
	}
}

// TestCredentialsPlanIdle: only a plan that changes nothing, over every node read, lets the
// next passes skip reading.
func TestCredentialsPlanIdle(t *testing.T) {
	assert.True(t, credentialsPlan{}.idle())
	assert.False(t, credentialsPlan{fixes: []aclFix{{}}}.idle())
	assert.False(t, credentialsPlan{replication: []model.Node{{}}}.idle())
	assert.False(t, credentialsPlan{switchLogin: true}.idle())
	assert.False(t, credentialsPlan{waiting: "n2"}.idle())
	ok := model.AuthState{}
	assert.True(t, allRead([]model.AuthState{ok, ok}, 2))
	assert.False(t, allRead([]model.AuthState{ok}, 2), "a node not read")
	assert.False(t, allRead([]model.AuthState{ok, {Err: errors.New("refused")}}, 2))
}
