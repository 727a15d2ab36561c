package views

import (
	"github.com/gomomento/valkey-operator/crds"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Image is the typed view of a ValkeyImage.
type Image struct{ U *unstructured.Unstructured }

// NewImageObject returns an empty ValkeyImage object with its GVK set.
func NewImageObject() *unstructured.Unstructured { return object(crds.KindImage) }

func (i Image) Name() string       { return i.U.GetName() }
func (i Image) Repository() string { return getString(i.U, "spec", "repository") }
func (i Image) Tag() string        { return getString(i.U, "spec", "tag") }
func (i Image) Version() string    { return getString(i.U, "spec", "version") }

// Reference is the full image reference "repository:tag".
func (i Image) Reference() string { return i.Repository() + ":" + i.Tag() }

func (i Image) SetRepository(s string) { setString(i.U, s, "spec", "repository") }
func (i Image) SetTag(s string)        { setString(i.U, s, "spec", "tag") }
func (i Image) SetVersion(s string)    { setString(i.U, s, "spec", "version") }
