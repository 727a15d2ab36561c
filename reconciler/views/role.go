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

func (r Role) Name() string       { return r.U.GetName() }
func (r Role) Categories() []Rule { return r.rules("categories") }
func (r Role) Commands() []Rule   { return r.rules("commands") }

func (r Role) rules(list string) []Rule {
	var out []Rule
	for _, e := range rawJSON(r.U, "spec", list).Array() {
		out = append(out, Rule{Name: e.Get("name").String(), Allow: e.Get("access").String() == "allow"})
	}
	return out
}

func (r Role) SetCategories(rules []Rule) { r.setRules("categories", rules) }
func (r Role) SetCommands(rules []Rule)   { r.setRules("commands", rules) }

func (r Role) setRules(list string, rules []Rule) {
	if len(rules) == 0 {
		setOrRemove(r.U, nil, "spec", list)
		return
	}
	l := make([]any, len(rules))
	for i, rule := range rules {
		access := "deny"
		if rule.Allow {
			access = "allow"
		}
		l[i] = map[string]any{"name": rule.Name, "access": access}
	}
	setOrRemove(r.U, l, "spec", list)
}
