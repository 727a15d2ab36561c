// Package resolve turns a ValkeyCluster's configRef into the concrete settings its nodes are
// built from: the ValkeyConfig chain (baseRef) merged child-over-base, then the ValkeyImage
// behind the effective imageRef. It is resolved fresh on every reconcile, so creating a
// missing object unblocks a cluster without any spec edit.
package resolve

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"strings"

	"github.com/gomomento/valkey-operator/reconciler/views"
)

// Lookup finds cluster-scoped menu objects by name; found=false means "does not exist".
type Lookup interface {
	Config(ctx context.Context, name string) (views.Config, bool, error)
	Image(ctx context.Context, name string) (views.Image, bool, error)
}

// Resolved is the merged result of a configRef.
type Resolved struct {
	// Chain lists the ValkeyConfig names walked, child first.
	Chain []string
	// ImageName is the ValkeyImage name the chain selects ("" if none was reached).
	ImageName string
	Image     string // full reference repository:tag
	Version   string
	Valkey    map[string]string
	Resources views.Resources
	// Exporter: the nodes run the metrics exporter sidecar (spec.exporter.enabled, the
	// child's value winning; off when no config of the chain sets it).
	Exporter bool
	// Persistence is spec.persistence merged field by field, the child's fields winning, with
	// mode None and reclaim Delete where no config of the chain sets them.
	Persistence views.Persistence
}

// PersistenceConflictError: a config of the chain sets a persistence directive in spec.valkey
// while the chain's persistence mode, which owns those directives, is not None. The schema
// refuses that within one ValkeyConfig; across a baseRef chain only the resolution can see it.
type PersistenceConflictError struct {
	Directive, SetBy string // the directive and the config whose spec.valkey sets it
	Mode, ModeBy     string // the mode and the config that sets it
}

func (e *PersistenceConflictError) Error() string {
	return fmt.Sprintf("ValkeyConfig %q sets %s in spec.valkey, but persistence mode %s (from ValkeyConfig %q) sets it for the operator; remove it from spec.valkey",
		e.SetBy, e.Directive, e.Mode, e.ModeBy)
}

// PersistenceDirectives are the valkey.conf directives a persistence mode other than None owns.
var PersistenceDirectives = []string{"appendfsync", "appendonly", "save"}

// MissingConfigError: a ValkeyConfig in the chain does not exist.
type MissingConfigError struct {
	Name         string
	ReferencedBy string // "" for the cluster's own configRef, else the child config
}

func (e *MissingConfigError) Error() string {
	if e.ReferencedBy == "" {
		return fmt.Sprintf("ValkeyConfig %q not found", e.Name)
	}
	return fmt.Sprintf("ValkeyConfig %q not found (baseRef of ValkeyConfig %q)", e.Name, e.ReferencedBy)
}

// CycleError: the baseRef chain loops.
type CycleError struct{ Chain []string }

func (e *CycleError) Error() string {
	return fmt.Sprintf("ValkeyConfig baseRef cycle: %s", strings.Join(e.Chain, " -> "))
}

// NoImageError: no config in the chain sets imageRef.
type NoImageError struct{ Config string }

func (e *NoImageError) Error() string {
	return fmt.Sprintf("ValkeyConfig %q and its bases set no imageRef", e.Config)
}

// MissingImageError: the ValkeyImage named by the chain does not exist.
type MissingImageError struct{ Name, Config string }

func (e *MissingImageError) Error() string {
	return fmt.Sprintf("ValkeyImage %q not found (imageRef of ValkeyConfig %q)", e.Name, e.Config)
}

// Resolve walks configRef's chain and the image. On error the returned Resolved still holds
// the chain walked so far (and ImageName when reached), which watch mapping uses to find the
// clusters a newly created object unblocks.
func Resolve(ctx context.Context, l Lookup, configRef string) (Resolved, error) {
	var res Resolved
	var configs []views.Config
	seen := map[string]bool{}
	name, referrer := configRef, ""
	for name != "" {
		if seen[name] {
			return res, &CycleError{Chain: append(append([]string(nil), res.Chain...), name)}
		}
		seen[name] = true
		res.Chain = append(res.Chain, name)
		c, found, err := l.Config(ctx, name)
		if err != nil {
			return res, err
		}
		if !found {
			return res, &MissingConfigError{Name: name, ReferencedBy: referrer}
		}
		configs = append(configs, c)
		referrer, name = name, c.BaseRef()
	}

	// Merge from the root base down to the child so the child wins.
	res.Valkey = map[string]string{}
	imageConfig := ""
	for i := len(configs) - 1; i >= 0; i-- {
		c := configs[i]
		if ref := c.ImageRef(); ref != "" {
			res.ImageName, imageConfig = ref, c.Name()
		}
		maps.Copy(res.Valkey, c.Valkey())
		r := c.Resources()
		if r.CPU != "" {
			res.Resources.CPU = r.CPU
		}
		if r.Memory != "" {
			res.Resources.Memory = r.Memory
		}
		if on, set := c.ExporterEnabled(); set {
			res.Exporter = on
		}
		mergePersistence(&res.Persistence, c.Persistence())
	}
	res.Persistence.Mode = cmp.Or(res.Persistence.Mode, views.PersistenceNone)
	res.Persistence.Reclaim = cmp.Or(res.Persistence.Reclaim, views.ReclaimDelete)
	if err := persistenceConflict(configs, res.Persistence); err != nil {
		return res, err
	}
	if len(res.Valkey) == 0 {
		res.Valkey = nil
	}
	if res.ImageName == "" {
		return res, &NoImageError{Config: configRef}
	}
	img, found, err := l.Image(ctx, res.ImageName)
	if err != nil {
		return res, err
	}
	if !found {
		return res, &MissingImageError{Name: res.ImageName, Config: imageConfig}
	}
	res.Image, res.Version = img.Reference(), img.Version()
	return res, nil
}

// mergePersistence lays the fields a config sets over what its bases set.
func mergePersistence(into *views.Persistence, p views.Persistence) {
	into.Mode = cmp.Or(p.Mode, into.Mode)
	into.Size = cmp.Or(p.Size, into.Size)
	into.StorageClassName = cmp.Or(p.StorageClassName, into.StorageClassName)
	into.Reclaim = cmp.Or(p.Reclaim, into.Reclaim)
}

// persistenceConflict finds a persistence directive set in spec.valkey by a config of the
// chain (child first) while the resolved mode owns it.
func persistenceConflict(configs []views.Config, p views.Persistence) error {
	if !p.Durable() {
		return nil
	}
	modeBy := modeSetBy(configs)
	for _, c := range configs {
		for _, d := range PersistenceDirectives {
			if _, ok := c.Valkey()[d]; ok {
				return &PersistenceConflictError{Directive: d, SetBy: c.Name(), Mode: p.Mode, ModeBy: modeBy}
			}
		}
	}
	return nil
}

// modeSetBy is the config of the chain (child first) that sets the persistence mode.
func modeSetBy(configs []views.Config) string {
	for _, c := range configs {
		if c.Persistence().Mode != "" {
			return c.Name()
		}
	}
	return ""
}
