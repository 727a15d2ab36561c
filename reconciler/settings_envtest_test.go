//go:build envtest

package reconciler_test

import (
	"context"
	"errors"
	"testing"

	"github.com/gomomento/valkey-operator/reconciler"
	"github.com/gomomento/valkey-operator/reconciler/settings"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestOperatorSettingsAtStartup runs the manager's setup against namespaces holding
// different valkey-operator-config ConfigMaps: an invalid defaultZoneSpread stops start-up
// with a clear, typed error.
func TestOperatorSettingsAtStartup(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		data    map[string]string // nil = no ConfigMap
		want    string
		wantErr string
	}{
		{name: "no configmap", want: "bestEffort"},
		{name: "required", data: map[string]string{"defaultZoneSpread": "required"}, want: "required"},
		{name: "invalid", data: map[string]string{"defaultZoneSpread": "sideways"},
			wantErr: `key "defaultZoneSpread" has invalid value "sideways" (allowed: ["bestEffort" "required"])`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ns := newNamespace(t)
			if tc.data != nil {
				require.NoError(t, k8s.Create(context.Background(), &corev1.ConfigMap{
					ObjectMeta: metav1.ObjectMeta{Name: settings.ConfigMapName, Namespace: ns}, Data: tc.data}))
			}
			_, r, err := reconciler.NewManager(context.Background(), cfg, reconciler.ManagerConfig{
				Namespace: ns, MetricsAddr: "0", ProbeAddr: "0", Valkey: fake, SkipNameValidation: true,
			})
			if tc.wantErr == "" {
				require.NoError(t, err)
				assert.Equal(t, tc.want, r.Settings().DefaultZoneSpread)
				return
			}
			var inv *settings.InvalidError
			require.Error(t, err)
			assert.True(t, errors.As(err, &inv), "typed error, got %T", err)
			assert.Contains(t, err.Error(), tc.wantErr)
		})
	}
}
