// Package settings reads the operator-wide settings from the ConfigMap valkey-operator-config
// in the operator's namespace. They are read once at start-up; a bad value stops the process
// with a clear error instead of running with a guess.
package settings

import (
	"context"
	"fmt"

	"github.com/gomomento/valkey-operator/reconciler/views"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ConfigMapName is the operator settings ConfigMap.
const ConfigMapName = "valkey-operator-config"

// KeyDefaultZoneSpread selects the zoneSpread of clusters that do not set one.
const KeyDefaultZoneSpread = "defaultZoneSpread"

// Settings are the operator-wide defaults.
type Settings struct {
	DefaultZoneSpread string
}

// Defaults apply when the ConfigMap or a key is absent.
func Defaults() Settings { return Settings{DefaultZoneSpread: views.ZoneSpreadBestEffort} }

// InvalidError reports a setting with a value the operator does not accept.
type InvalidError struct {
	Namespace, Key, Value string
	Allowed               []string
}

func (e *InvalidError) Error() string {
	return fmt.Sprintf("ConfigMap %s/%s: key %q has invalid value %q (allowed: %q)",
		e.Namespace, ConfigMapName, e.Key, e.Value, e.Allowed)
}

// Load reads the settings ConfigMap from namespace with an uncached reader.
func Load(ctx context.Context, r client.Reader, namespace string) (Settings, error) {
	s := Defaults()
	cm := &corev1.ConfigMap{}
	err := r.Get(ctx, types.NamespacedName{Namespace: namespace, Name: ConfigMapName}, cm)
	if apierrors.IsNotFound(err) {
		return s, nil
	}
	if err != nil {
		return s, fmt.Errorf("reading ConfigMap %s/%s: %w", namespace, ConfigMapName, err)
	}
	return Parse(namespace, cm.Data)
}

// Parse validates the ConfigMap's data.
func Parse(namespace string, data map[string]string) (Settings, error) {
	s := Defaults()
	if v, ok := data[KeyDefaultZoneSpread]; ok {
		switch v {
		case views.ZoneSpreadBestEffort, views.ZoneSpreadRequired:
			s.DefaultZoneSpread = v
		default:
			return s, &InvalidError{Namespace: namespace, Key: KeyDefaultZoneSpread, Value: v,
				Allowed: []string{views.ZoneSpreadBestEffort, views.ZoneSpreadRequired}}
		}
	}
	return s, nil
}
