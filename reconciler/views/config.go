package views

import (
	"github.com/gomomento/valkey-operator/crds"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Config is the typed view of a ValkeyConfig.
type Config struct{ U *unstructured.Unstructured }

// NewConfigObject returns an empty ValkeyConfig object with its GVK set.
func NewConfigObject() *unstructured.Unstructured { return object(crds.KindConfig) }

// configSpec is a ValkeyConfig's spec as crds/valkeyconfigs.yaml defines it.
type configSpec struct {
	ImageRef  string            `json:"imageRef,omitempty"`
	BaseRef   string            `json:"baseRef,omitempty"`
	Resources Resources         `json:"resources,omitzero"`
	Valkey    map[string]string `json:"valkey,omitempty"`
	Exporter  *exporterSpec     `json:"exporter,omitempty"`
	// Persistence's empty fields are inherited through baseRef.
	Persistence Persistence `json:"persistence,omitzero"`
}

// exporterSpec is spec.exporter. Enabled is a pointer because a config that leaves it unset
// inherits its base's value, while one that sets false turns off what its base turned on.
type exporterSpec struct {
	Enabled *bool `json:"enabled,omitempty"`
}

func (c Config) spec() configSpec               { return decode[configSpec](c.U, specKey) }
func (c Config) editSpec(set func(*configSpec)) { update(c.U, specKey, set) }

func (c Config) Name() string              { return c.U.GetName() }
func (c Config) ImageRef() string          { return c.spec().ImageRef }
func (c Config) BaseRef() string           { return c.spec().BaseRef }
func (c Config) Resources() Resources      { return c.spec().Resources }
func (c Config) Valkey() map[string]string { return c.spec().Valkey }

// Persistence is spec.persistence as this config sets it: an empty field is left to its base
// (and the chain's root to the defaults, mode None and reclaim Delete).
func (c Config) Persistence() Persistence { return c.spec().Persistence }

// ExporterEnabled is spec.exporter.enabled; set is false when this config leaves it to its
// base (and the base chain's root to the default, off).
func (c Config) ExporterEnabled() (enabled, set bool) {
	if e := c.spec().Exporter; e != nil && e.Enabled != nil {
		return *e.Enabled, true
	}
	return false, false
}

func (c Config) SetImageRef(s string)     { c.editSpec(func(w *configSpec) { w.ImageRef = s }) }
func (c Config) SetBaseRef(s string)      { c.editSpec(func(w *configSpec) { w.BaseRef = s }) }
func (c Config) SetResources(r Resources) { c.editSpec(func(w *configSpec) { w.Resources = r }) }
func (c Config) SetValkey(m map[string]string) {
	c.editSpec(func(w *configSpec) { w.Valkey = m })
}

// SetPersistence sets spec.persistence (a zero value removes it).
func (c Config) SetPersistence(p Persistence) { c.editSpec(func(w *configSpec) { w.Persistence = p }) }

// SetExporterEnabled sets spec.exporter.enabled.
func (c Config) SetExporterEnabled(on bool) {
	c.editSpec(func(w *configSpec) { w.Exporter = &exporterSpec{Enabled: &on} })
}
