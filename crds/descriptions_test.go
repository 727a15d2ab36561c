package crds_test

import (
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	"github.com/gomomento/valkey-operator/crds"
)

// TestEverySchemaNodeIsDescribed: `kubectl explain` prints a field's description, so every
// schema node a user can reach with it must have one (see undescribed for exactly which),
// in every served version of every CRD. A failure names each JSON path that lacks one.
func TestEverySchemaNodeIsDescribed(t *testing.T) {
	defs, err := crds.Definitions()
	require.NoError(t, err)
	require.Len(t, defs, 6)
	for _, d := range defs {
		for _, v := range d.Spec.Versions {
			if !v.Served {
				continue
			}
			t.Run(d.Spec.Names.Kind+"/"+v.Name, func(t *testing.T) {
				require.NotNil(t, v.Schema, "served version has no schema")
				require.NotNil(t, v.Schema.OpenAPIV3Schema, "served version has no openAPIV3Schema")
				missing := undescribed(v.Schema.OpenAPIV3Schema)
				assert.Empty(t, missing, "%s %s: schema nodes without a description:\n  %s",
					d.Name, v.Name, strings.Join(missing, "\n  "))
			})
		}
	}
}

// TestUndescribed pins down which nodes undescribed requires a description on, so that
// TestEverySchemaNodeIsDescribed cannot pass by walking too little.
func TestUndescribed(t *testing.T) {
	for _, tc := range []struct {
		name   string
		schema string
		want   []string
	}{{
		name: "fully described",
		schema: `{type: object, description: r, properties: {
			apiVersion: {type: string}, kind: {type: string}, metadata: {type: object},
			spec: {type: object, description: s, properties: {
				n: {type: integer, description: d},
				q: {x-kubernetes-int-or-string: true, description: d},
				tags: {type: array, description: d, items: {type: string}},
				labels: {type: object, description: d, additionalProperties: {type: string}}}}}}`,
	}, {
		name:   "root",
		schema: `{type: object, properties: {spec: {type: object, description: s}}}`,
		want:   []string{"."},
	}, {
		name: "spec, status and scalars at every depth",
		schema: `{type: object, description: r, properties: {
			spec: {type: object, properties: {
				a: {type: string},
				b: {type: object, description: " ", properties: {c: {type: boolean}, d: {type: number, description: d}}},
				q: {x-kubernetes-int-or-string: true}}},
			status: {type: object}}}`,
		want: []string{".spec", ".spec.a", ".spec.b", ".spec.b.c", ".spec.q", ".status"},
	}, {
		name: "arrays and their object items",
		schema: `{type: object, description: r, properties: {spec: {type: object, description: s, properties: {
			names: {type: array, items: {type: string}},
			users: {type: array, description: d, items: {type: object, properties: {
				name: {type: string},
				keys: {type: array, description: d, items: {type: object, description: d, properties: {p: {type: string}}}}}}}}}}}`,
		want: []string{".spec.names", ".spec.users[*]", ".spec.users[*].keys[*].p", ".spec.users[*].name"},
	}, {
		name: "maps of objects",
		schema: `{type: object, description: r, properties: {spec: {type: object, description: s, properties: {
			plain: {type: object, description: d, additionalProperties: {type: string}},
			nested: {type: object, description: d, additionalProperties: {type: object, properties: {x: {type: string}}}}}}}}`,
		want: []string{".spec.nested{*}", ".spec.nested{*}.x"},
	}, {
		name:   "apiVersion, kind and metadata are exempt only at the root",
		schema: `{type: object, description: r, properties: {spec: {type: object, description: s, properties: {metadata: {type: object}, kind: {type: string}}}}}`,
		want:   []string{".spec.kind", ".spec.metadata"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			var s apiextensionsv1.JSONSchemaProps
			require.NoError(t, yaml.UnmarshalStrict([]byte(tc.schema), &s))
			assert.Equal(t, tc.want, undescribed(&s))
		})
	}
}

// undescribed returns, sorted, the JSON paths of the nodes under root that need a non-blank
// description and lack one. Those nodes are:
//   - the root schema itself (path ".");
//   - every schema under `properties`, at any depth and of any type (object, array, scalar,
//     int-or-string), which includes spec and status; the root's apiVersion, kind and metadata
//     are the exception, because the API server replaces them with the standard TypeMeta and
//     ObjectMeta schemas and their descriptions when it publishes the CRD's OpenAPI;
//   - an array's `items` schema when it is an object or has properties (path suffix "[*]");
//     scalar items are described by their array;
//   - a map's `additionalProperties` schema when it is an object or has properties (path suffix
//     "{*}"); scalar values are described by their map.
//
// The walk continues below every node whether or not that node is described.
func undescribed(root *apiextensionsv1.JSONSchemaProps) []string {
	var missing []string
	var walk func(path string, s *apiextensionsv1.JSONSchemaProps, required bool)
	walk = func(path string, s *apiextensionsv1.JSONSchemaProps, required bool) {
		if s == nil {
			return
		}
		if required && strings.TrimSpace(s.Description) == "" {
			if path == "" {
				missing = append(missing, ".")
			} else {
				missing = append(missing, path)
			}
		}
		for name, p := range s.Properties {
			if path == "" && (name == "apiVersion" || name == "kind" || name == "metadata") {
				continue
			}
			walk(path+"."+name, &p, true)
		}
		if s.Items != nil {
			walk(path+"[*]", s.Items.Schema, isObject(s.Items.Schema))
			for i := range s.Items.JSONSchemas {
				walk(path+"[*]", &s.Items.JSONSchemas[i], isObject(&s.Items.JSONSchemas[i]))
			}
		}
		if s.AdditionalProperties != nil {
			walk(path+"{*}", s.AdditionalProperties.Schema, isObject(s.AdditionalProperties.Schema))
		}
	}
	walk("", root, true)
	sort.Strings(missing)
	return missing
}

func isObject(s *apiextensionsv1.JSONSchemaProps) bool {
	return s != nil && (s.Type == "object" || len(s.Properties) > 0)
}
