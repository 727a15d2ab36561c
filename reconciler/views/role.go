package views

import (
	"github.com/gomomento/valkey-operator/crds"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Rule is one category or command entry of a ValkeyRole.
type Rule struct {
	Name  string
	Allow bool
}

// Role is the typed view of a ValkeyRole.
type Role struct{ U *unstructured.Unstructured }

// NewRoleObject returns an empty ValkeyRole object with its GVK set.
func NewRoleObject() *unstructured.Unstructured { return object(crds.KindRole) }

// roleSpec is a ValkeyRole's spec as crds/valkeyroles.yaml defines it.
type roleSpec struct {
	Categories []storedRule `json:"categories,omitempty"`
	Commands   []storedRule `json:"commands,omitempty"`
}

// storedRule is a Rule as stored: access is the word "allow" or "deny", where Rule, which
// callers only ever test, has a bool.
type storedRule struct {
	Name   string `json:"name"`
	Access string `json:"access"`
}

const (
	accessAllow = "allow"
	accessDeny  = "deny"
)

func (r Role) spec() roleSpec { return decode[roleSpec](r.U, specKey) }

func (r Role) Name() string       { return r.U.GetName() }
func (r Role) Categories() []Rule { return rules(r.spec().Categories) }
func (r Role) Commands() []Rule   { return rules(r.spec().Commands) }

func (r Role) SetCategories(l []Rule) {
	update(r.U, specKey, func(w *roleSpec) { w.Categories = storedRules(l) })
}

func (r Role) SetCommands(l []Rule) {
	update(r.U, specKey, func(w *roleSpec) { w.Commands = storedRules(l) })
}

func rules(stored []storedRule) []Rule {
	var out []Rule
	for _, s := range stored {
		out = append(out, Rule{Name: s.Name, Allow: s.Access == accessAllow})
	}
	return out
}

func storedRules(l []Rule) []storedRule {
	var out []storedRule
	for _, r := range l {
		access := accessDeny
		if r.Allow {
			access = accessAllow
		}
		out = append(out, storedRule{Name: r.Name, Access: access})
	}
	return out
}
