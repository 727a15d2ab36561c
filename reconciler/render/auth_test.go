package render_test

import (
	"testing"

	"github.com/gomomento/valkey-operator/reconciler/render"
	"github.com/gomomento/valkey-operator/valkeyops/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The auth Secret gives new pods the replication login and the exporter's password file that
// go with the operator password every server accepts now, which lags the user's
// operator-password while a rotation to it is under way; the record Secret holds only that
// accepted password.
func TestAuthSecrets(t *testing.T) {
	tests := []struct {
		name, operator, login string
	}{
		{"steady", "op-pw", "op-pw"},
		{"rotation under way", "new-op-pw", "old-op-pw"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := render.AuthSecret("c1", "ns1", "app-pw", tt.operator, tt.login)
			require.NotNil(t, s.Name)
			assert.Equal(t, "c1-auth", *s.Name)
			assert.Equal(t, map[string][]byte{
				"password":                []byte("app-pw"),
				"operator-password":       []byte(tt.operator),
				"replication.conf":        []byte("masteruser replication\nmasterauth " + model.ReplicationPassword(tt.login) + "\n"),
				"exporter-passwords.json": render.ExporterPasswords(tt.login),
			}, s.Data)
			assert.Equal(t, render.Labels("c1"), s.Labels)

			rec := render.AppliedAuthSecret("c1", "ns1", tt.login)
			require.NotNil(t, rec.Name)
			assert.Equal(t, "c1-auth-applied", *rec.Name)
			assert.Equal(t, render.AppliedAuthSecretName("c1"), *rec.Name)
			assert.Equal(t, map[string][]byte{"operator-password": []byte(tt.login)}, rec.Data)
			assert.Equal(t, render.Labels("c1"), rec.Labels, "labelled, so the operator's cache and watch see it")
		})
	}
}
