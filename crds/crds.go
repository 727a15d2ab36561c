// Package crds embeds the CustomResourceDefinitions that are the single source of truth for
// the operator's API. The manager, the envtest suites and `kubectl apply -f crds/` all read
// these same bytes, so there are no generated Go types that could drift from the schema.
package crds

import (
	"bytes"
	"embed"
	"fmt"
	"io/fs"
	"path/filepath"
	"runtime"
	"sort"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"
)

// Group and Version of every kind the operator serves.
const (
	Group   = "valkey.gomomento.com"
	Version = "v1alpha1"
)

// Kind names, spelled once.
const (
	KindImage   = "ValkeyImage"
	KindConfig  = "ValkeyConfig"
	KindRole    = "ValkeyRole"
	KindCluster = "ValkeyCluster"
	KindNode    = "ValkeyNode"
	KindBackup  = "ValkeyBackup"
)

//go:embed *.yaml
var files embed.FS

// GVK returns the GroupVersionKind of one of the operator's kinds.
func GVK(kind string) schema.GroupVersionKind {
	return schema.GroupVersionKind{Group: Group, Version: Version, Kind: kind}
}

// Definitions parses every embedded CRD, ordered by file name.
func Definitions() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	names, err := fs.Glob(files, "*.yaml")
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	var out []*apiextensionsv1.CustomResourceDefinition
	for _, name := range names {
		raw, err := files.ReadFile(name)
		if err != nil {
			return nil, err
		}
		for _, doc := range bytes.Split(raw, []byte("\n---")) {
			if len(bytes.TrimSpace(doc)) == 0 {
				continue
			}
			crd := &apiextensionsv1.CustomResourceDefinition{}
			if err := yaml.UnmarshalStrict(doc, crd); err != nil {
				return nil, fmt.Errorf("crds: %s: %w", name, err)
			}
			out = append(out, crd)
		}
	}
	return out, nil
}

// Dir is the absolute path of this folder in a source checkout; tests and tools that shell
// out to kubectl use it to apply the very files that are embedded.
func Dir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(file)
}
