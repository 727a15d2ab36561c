// Package views gives each of the operator's kinds a small typed view over its unstructured
// object. A view owns every field path of its kind: no other package spells "spec" or
// "shards". The paths live in one place per kind, the json tags of the structs that the
// kind's spec and status decode into, and one converter moves data between those structs
// and the object, so no view converts numbers, maps or lists by hand.
//
// Readers tolerate missing fields. A part (spec or status) that does not match its struct
// reads as that struct's zero value: only an object built around the CRD schema can hold
// one, and the schema, not the views, is the validator. Setters store only what the
// converter produces (string, int64, float64, bool, map[string]any, []any), the types that
// deep-copying an unstructured object accepts.
package views

import (
	"fmt"

	"github.com/gomomento/valkey-operator/crds"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// Top-level parts of an object, the only keys not spelled in a json tag.
const (
	specKey   = "spec"
	statusKey = "status"
)

// decode reads the top-level part key of u into a T. A missing part, or one whose shape the
// converter rejects, reads as the zero T (see the package comment).
func decode[T any](u *unstructured.Unstructured, key string) T {
	var out T
	if u == nil {
		return out
	}
	m, ok := u.Object[key].(map[string]any)
	if !ok {
		return out
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m, &out); err != nil {
		var zero T
		return zero
	}
	return out
}

// encode replaces the top-level part key of u with v, a pointer to a JSON-tagged struct.
// Empty fields are left out by their omitempty/omitzero tags, and a part with nothing left
// in it is removed, so that "not set" is always stored as absent.
func encode(u *unstructured.Unstructured, key string, v any) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(v)
	if err != nil {
		// Only a struct the converter cannot represent fails, whatever its values: a bug in
		// this package that its round-trip tests exist to catch, not a runtime condition.
		panic(fmt.Sprintf("views: encoding %T: %v", v, err))
	}
	if len(m) == 0 {
		delete(u.Object, key)
		return
	}
	if u.Object == nil {
		u.Object = map[string]any{}
	}
	u.Object[key] = m
}

// update rewrites the part key through its struct: decode, let set change it, encode. Each
// single-field setter is one such edit, so it names only its own field and every other one
// is carried over as read.
func update[T any](u *unstructured.Unstructured, key string, set func(*T)) {
	v := decode[T](u, key)
	set(&v)
	encode(u, key, &v)
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
