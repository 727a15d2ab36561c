package views

import (
	"github.com/gomomento/valkey-operator/crds"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Config is the typed view of a ValkeyConfig.
type Config struct{ U *unstructured.Unstructured }

// NewConfigObject returns an empty ValkeyConfig object with its GVK set.
func NewConfigObject() *unstructured.Unstructured { return object(crds.KindConfig) }

func (c Config) Name() string                  { return c.U.GetName() }
func (c Config) ImageRef() string              { return getString(c.U, "spec", "imageRef") }
func (c Config) BaseRef() string               { return getString(c.U, "spec", "baseRef") }
func (c Config) Resources() Resources          { return getResources(c.U, "spec", "resources") }
func (c Config) Valkey() map[string]string     { return getStringMap(c.U, "spec", "valkey") }
func (c Config) SetImageRef(s string)          { setString(c.U, s, "spec", "imageRef") }
func (c Config) SetBaseRef(s string)           { setString(c.U, s, "spec", "baseRef") }
func (c Config) SetResources(r Resources)      { setResources(c.U, r, "spec", "resources") }
func (c Config) SetValkey(m map[string]string) { setStringMap(c.U, m, "spec", "valkey") }
