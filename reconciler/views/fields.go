// Package views gives each of the operator's kinds a small typed view over its unstructured
// object. A view owns every field path of its kind: no other package spells "spec", "shards".
// Readers tolerate missing or mistyped fields (the CRD schema is the real validator); setters
// only ever store JSON-compatible Go types (string, int64, bool, map[string]any, []any) so
// that unstructured helpers cannot panic on a value like a Go int or []string.
package views

import (
	"encoding/json"
	"github.com/gomomento/valkey-operator/crds"
	"sort"
	"strconv"

	"github.com/tidwall/gjson"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// field reads the raw value at path, nil when absent.
func field(u *unstructured.Unstructured, path ...string) any {
	if u == nil {
		return nil
	}
	v, ok, err := unstructured.NestedFieldNoCopy(u.Object, path...)
	if err != nil || !ok {
		return nil
	}
	return v
}

func getString(u *unstructured.Unstructured, path ...string) string {
	s, _ := field(u, path...).(string)
	return s
}

// getInt reads an integer stored by the JSON decoder as int64 (or float64 when set by hand).
func getInt(u *unstructured.Unstructured, path ...string) (int64, bool) {
	switch v := field(u, path...).(type) {
	case int64:
		return v, true
	case int32:
		return int64(v), true
	case int:
		return int64(v), true
	case float64:
		return int64(v), true
	}
	return 0, false
}

// getQuantity reads an int-or-string field (resources.cpu/memory) as its string form.
func getQuantity(u *unstructured.Unstructured, path ...string) string {
	switch v := field(u, path...).(type) {
	case string:
		return v
	case int64:
		return strconv.FormatInt(v, 10)
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	return ""
}

func getStringMap(u *unstructured.Unstructured, path ...string) map[string]string {
	m, _ := field(u, path...).(map[string]any)
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		if s, ok := v.(string); ok {
			out[k] = s
		}
	}
	return out
}

func getStringSlice(u *unstructured.Unstructured, path ...string) []string {
	l, _ := field(u, path...).([]any)
	var out []string
	for _, v := range l {
		if s, ok := v.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

// rawJSON returns the sub-tree at path as gjson, for list-of-object fields that read more
// clearly as JSON queries than as nested type switches.
func rawJSON(u *unstructured.Unstructured, path ...string) gjson.Result {
	v := field(u, path...)
	if v == nil {
		return gjson.Result{}
	}
	b, err := json.Marshal(v)
	if err != nil {
		return gjson.Result{}
	}
	return gjson.ParseBytes(b)
}

// setOrRemove stores v at path, or removes the field when v is nil. v must already be a
// JSON-compatible value (see the package comment).
func setOrRemove(u *unstructured.Unstructured, v any, path ...string) {
	if v == nil {
		unstructured.RemoveNestedField(u.Object, path...)
		return
	}
	// SetNestedField deep-copies v; every value built here is JSON-compatible, so the copy
	// cannot panic. The error only signals a non-map intermediate field, which we overwrite.
	if err := unstructured.SetNestedField(u.Object, v, path...); err != nil {
		unstructured.RemoveNestedField(u.Object, path[0])
		_ = unstructured.SetNestedField(u.Object, v, path...)
	}
}

func setString(u *unstructured.Unstructured, s string, path ...string) {
	if s == "" {
		setOrRemove(u, nil, path...)
		return
	}
	setOrRemove(u, s, path...)
}

func setStringMap(u *unstructured.Unstructured, m map[string]string, path ...string) {
	if len(m) == 0 {
		setOrRemove(u, nil, path...)
		return
	}
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	setOrRemove(u, out, path...)
}

func setStringSlice(u *unstructured.Unstructured, l []string, path ...string) {
	if len(l) == 0 {
		setOrRemove(u, nil, path...)
		return
	}
	out := make([]any, len(l))
	for i, v := range l {
		out[i] = v
	}
	setOrRemove(u, out, path...)
}

// sortedCopy returns a sorted copy so that views hand out deterministic slices.
func sortedCopy(l []string) []string {
	if len(l) == 0 {
		return nil
	}
	out := append([]string(nil), l...)
	sort.Strings(out)
	return out
}

// Resources are the CPU and memory quantities of a Valkey container (requests = limits).
type Resources struct {
	CPU    string `json:"cpu,omitempty"`
	Memory string `json:"memory,omitempty"`
}

// Placement says where a cluster's pods may run and how strictly each shard spreads.
type Placement struct {
	Zones        []string          `json:"zones,omitempty"`
	ZoneSpread   string            `json:"zoneSpread,omitempty"`
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`
}

// Zone-spread modes of spec.placement.zoneSpread.
const (
	ZoneSpreadBestEffort = "bestEffort"
	ZoneSpreadRequired   = "required"
)

func getResources(u *unstructured.Unstructured, path ...string) Resources {
	return Resources{
		CPU:    getQuantity(u, append(append([]string(nil), path...), "cpu")...),
		Memory: getQuantity(u, append(append([]string(nil), path...), "memory")...),
	}
}

func setResources(u *unstructured.Unstructured, r Resources, path ...string) {
	m := map[string]any{}
	if r.CPU != "" {
		m["cpu"] = r.CPU
	}
	if r.Memory != "" {
		m["memory"] = r.Memory
	}
	if len(m) == 0 {
		setOrRemove(u, nil, path...)
		return
	}
	setOrRemove(u, m, path...)
}

func getPlacement(u *unstructured.Unstructured, path ...string) Placement {
	at := func(f string) []string { return append(append([]string(nil), path...), f) }
	return Placement{
		Zones:        getStringSlice(u, at("zones")...),
		ZoneSpread:   getString(u, at("zoneSpread")...),
		NodeSelector: getStringMap(u, at("nodeSelector")...),
	}
}

func setPlacement(u *unstructured.Unstructured, p Placement, path ...string) {
	m := map[string]any{}
	if len(p.Zones) > 0 {
		l := make([]any, len(p.Zones))
		for i, z := range p.Zones {
			l[i] = z
		}
		m["zones"] = l
	}
	if p.ZoneSpread != "" {
		m["zoneSpread"] = p.ZoneSpread
	}
	if len(p.NodeSelector) > 0 {
		s := map[string]any{}
		for k, v := range p.NodeSelector {
			s[k] = v
		}
		m["nodeSelector"] = s
	}
	if len(m) == 0 {
		setOrRemove(u, nil, path...)
		return
	}
	setOrRemove(u, m, path...)
}

// object returns an empty object of one of the operator's kinds, its GVK set so that the
// client and the cache know what it is.
func object(kind string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(crds.GVK(kind))
	return u
}

// list returns an empty list of one of the operator's kinds.
func list(kind string) *unstructured.UnstructuredList {
	l := &unstructured.UnstructuredList{}
	l.SetGroupVersionKind(crds.GVK(kind + "List"))
	return l
}
