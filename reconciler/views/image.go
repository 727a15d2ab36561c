package views

import (
	"github.com/gomomento/valkey-operator/crds"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Image is the typed view of a ValkeyImage.
type Image struct{ U *unstructured.Unstructured }

// NewImageObject returns an empty ValkeyImage object with its GVK set.
func NewImageObject() *unstructured.Unstructured { return object(crds.KindImage) }

// imageSpec is a ValkeyImage's spec as crds/valkeyimages.yaml defines it.
type imageSpec struct {
	Repository string `json:"repository,omitempty"`
	Tag        string `json:"tag,omitempty"`
	Version    string `json:"version,omitempty"`
}

func (i Image) spec() imageSpec { return decode[imageSpec](i.U, specKey) }

func (i Image) Name() string       { return i.U.GetName() }
func (i Image) Repository() string { return i.spec().Repository }
func (i Image) Tag() string        { return i.spec().Tag }
func (i Image) Version() string    { return i.spec().Version }

// Reference is the full image reference "repository:tag".
func (i Image) Reference() string {
	s := i.spec()
	return s.Repository + ":" + s.Tag
}

func (i Image) SetRepository(s string) { update(i.U, specKey, func(w *imageSpec) { w.Repository = s }) }
func (i Image) SetTag(s string)        { update(i.U, specKey, func(w *imageSpec) { w.Tag = s }) }
func (i Image) SetVersion(s string)    { update(i.U, specKey, func(w *imageSpec) { w.Version = s }) }
