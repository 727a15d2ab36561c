package objectstore_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gomomento/valkey-operator/devcluster/objectstore"
)

func TestEnvFileRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "object-store.env")
	a := objectstore.Access{Endpoint: "http://10.213.0.1:18333", Bucket: "dev", AccessKey: "devabc", SecretKey: "s3cr=t"}
	require.NoError(t, a.WriteEnvFile(path))

	b, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, "ENDPOINT=http://10.213.0.1:18333\nBUCKET=dev\nACCESS_KEY=devabc\nSECRET_KEY=s3cr=t\n", string(b))
	st, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), st.Mode().Perm())

	got, err := objectstore.ReadEnvFile(path)
	require.NoError(t, err)
	assert.Equal(t, a, got)
}

func TestReadEnvFileRefusesMissingKey(t *testing.T) {
	path := filepath.Join(t.TempDir(), "object-store.env")
	require.NoError(t, os.WriteFile(path, []byte("ENDPOINT=http://x:1\nBUCKET=dev\nACCESS_KEY=a\n"), 0o600))
	_, err := objectstore.ReadEnvFile(path)
	var missing *objectstore.MissingKeyError
	require.ErrorAs(t, err, &missing)
	assert.Equal(t, "SECRET_KEY", missing.Key)
}
