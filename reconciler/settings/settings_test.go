package settings_test

import (
	"errors"
	"testing"

	"github.com/gomomento/valkey-operator/reconciler/settings"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		data    map[string]string
		want    string
		invalid bool
	}{
		{name: "absent", data: nil, want: "bestEffort"},
		{name: "required", data: map[string]string{"defaultZoneSpread": "required"}, want: "required"},
		{name: "bestEffort", data: map[string]string{"defaultZoneSpread": "bestEffort"}, want: "bestEffort"},
		{name: "invalid", data: map[string]string{"defaultZoneSpread": "sometimes"}, invalid: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := settings.Parse("op", tc.data)
			if tc.invalid {
				var inv *settings.InvalidError
				require.True(t, errors.As(err, &inv))
				assert.Contains(t, err.Error(), `"sometimes"`)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, s.DefaultZoneSpread)
		})
	}
}
