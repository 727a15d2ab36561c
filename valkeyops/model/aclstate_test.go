package model

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// What a node holds, as ACL GETUSER would report it, compared with the spec: the pure half
// of the live ACL step. Servers are not needed: the reply shapes are proven by the
// integration suite (TestACLReadAuthMatchesSpec).
func TestACLDrift(t *testing.T) {
	h1, h2 := HashPassword("one"), HashPassword("two")
	h3 := HashPassword("three")
	app := ACLUser{Name: "app", PasswordHashes: []string{h1, h3}, Permissions: []ACLPermission{{
		Categories: []ACLRule{{Name: "read", Allow: true}},
		Keys:       []KeyPattern{{Pattern: "app:*", Access: "read"}},
	}}}
	spec := ACLSpec{DefaultPassword: "d", OperatorPassword: "o", Users: []ACLUser{app}}
	converged := spec.Expected()
	edit := func(f func(map[string]UserACL)) map[string]UserACL {
		held := map[string]UserACL{}
		for k, v := range converged {
			v.Hashes = append([]string(nil), v.Hashes...)
			v.Selectors = append([]ACLSelector(nil), v.Selectors...)
			held[k] = v
		}
		f(held)
		return held
	}
	tests := []struct {
		name string
		held map[string]UserACL
		want []string
	}{
		{"holds exactly the spec", converged, nil},
		{"hashes in another order", edit(func(m map[string]UserACL) {
			u := m["app"]
			u.Hashes = []string{h3, h1}
			m["app"] = u
		}), nil},
		{"user missing", edit(func(m map[string]UserACL) { delete(m, "app") }), []string{"user app: missing"}},
		{"user not in the spec", edit(func(m map[string]UserACL) { m["old"] = converged["app"] }), []string{"user old: not in the spec"}},
		{"one of two hashes held", edit(func(m map[string]UserACL) {
			u := m["app"]
			u.Hashes = []string{h1}
			m["app"] = u
		}), []string{"user app: password hashes differ"}},
		{"user switched off", edit(func(m map[string]UserACL) {
			u := m["app"]
			u.On = false
			m["app"] = u
		}), []string{`user app: state is "off", want "on"`}},
		{"permissions differ", edit(func(m map[string]UserACL) {
			u := m["app"]
			u.Selectors[0].Keys = "~app:*"
			m["app"] = u
		}), []string{`user app: keys is "~app:*", want "%R~app:*"`}},
		{"a selector too many", edit(func(m map[string]UserACL) {
			u := m["app"]
			u.Selectors = append(u.Selectors, ACLSelector{Commands: "+set"})
			m["app"] = u
		}), []string{"user app: selector count is 1, want 0"}},
		{"default password changed and operator extra hash", edit(func(m map[string]UserACL) {
			d := m["default"]
			d.Hashes = []string{h2}
			m["default"] = d
			o := m[OperatorUser]
			o.Hashes = append(o.Hashes, h1)
			m[OperatorUser] = o
		}), []string{"user default: password hashes differ", "user operator: password hashes differ"}},
	}
	t.Run("default user switched off by the spec", func(t *testing.T) {
		off := spec
		off.DefaultUserOff = true
		assert.Equal(t, []string{`user default: state is "on", want "off"`}, ACLDrift(off, converged))
		assert.Nil(t, ACLDrift(off, off.Expected()))
	})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ACLDrift(spec, tt.held)
			assert.Equal(t, tt.want, got)
			for _, line := range got {
				for _, secret := range []string{h1, h2, h3, HashPassword("d"), HashPassword("o"), "one", "two"} {
					assert.NotContains(t, line, secret, "drift lines name no password or hash")
				}
			}
		})
	}
}

func TestDriftedUsers(t *testing.T) {
	assert.Equal(t, []string{"app", "default"}, DriftedUsers([]string{"user app: missing", `user default: state is "off", want "on"`}))
	assert.Nil(t, DriftedUsers(nil))
}

// The operator's user accepts its login password and the extra hashes, each once, in an order
// that depends only on the set, so the ACL file changes only when the set does.
func TestOperatorExtraHashes(t *testing.T) {
	login, a, b := HashPassword("o"), HashPassword("a"), HashPassword("b")
	tests := []struct {
		name  string
		extra []string
		want  []string
	}{
		{"none", nil, []string{login}},
		{"one", []string{a}, []string{login, a}},
		{"sorted, deduplicated, login not repeated, case folded", []string{b, strings.ToUpper(a), login, a}, sortedAfter(login, a, b)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := ACLSpec{DefaultPassword: "d", OperatorPassword: "o", OperatorExtraHashes: tt.extra}
			require.NoError(t, ValidateACL(spec))
			assert.Equal(t, tt.want, spec.operatorHashes())
			line := strings.Split(RenderACL(spec), "\n")[1]
			assert.Equal(t, "user operator on #"+strings.Join(tt.want, " #")+" ~* resetchannels &* +@all", line)
			assert.ElementsMatch(t, tt.want, spec.Expected()[OperatorUser].Hashes)
		})
	}
	bad := ACLSpec{DefaultPassword: "d", OperatorPassword: "o", OperatorExtraHashes: []string{"o"}}
	assert.ErrorIs(t, ValidateACL(bad), ErrInvalidSpec, "an extra hash must be a hash")
}

func sortedAfter(first string, rest ...string) []string {
	if rest[0] > rest[1] {
		rest[0], rest[1] = rest[1], rest[0]
	}
	return append([]string{first}, rest...)
}
