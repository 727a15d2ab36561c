package valkeyadapter_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"testing"

	"github.com/go-logr/logr"
	"github.com/gomomento/valkey-operator/reconciler/topology"
	"github.com/gomomento/valkey-operator/reconciler/valkeyadapter"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/types"
)

func TestRenderACLUsesValkeyops(t *testing.T) {
	a := valkeyadapter.New(logr.Discard(), nil)
	h := sha256.Sum256([]byte("app-pw"))
	spec := topology.ACLSpec{DefaultPassword: "d-pw", OperatorPassword: "o-pw", Users: []topology.ACLUser{{
		Name: "app", PasswordHashes: []string{hex.EncodeToString(h[:])},
		Permissions: []topology.ACLPermission{{Categories: []topology.ACLRule{{Name: "read", Allow: true}},
			Keys: []topology.KeyPattern{{Pattern: "app:*", Access: "read"}}}},
	}}}
	text := a.RenderACL(spec)
	for _, pw := range []string{"d-pw", "o-pw"} {
		sum := sha256.Sum256([]byte(pw))
		assert.Contains(t, text, "#"+hex.EncodeToString(sum[:]))
		assert.NotContains(t, text, " >"+pw)
	}
	assert.Contains(t, text, "user app ")
	assert.Contains(t, text, "user operator ")
}

func TestNoPasswordNoConnection(t *testing.T) {
	a := valkeyadapter.New(logr.Discard(), nil)
	defer a.Close()
	_, err := a.Observe(context.Background(), topology.Conn{Cluster: types.NamespacedName{Namespace: "n", Name: "c"}, Username: "operator"},
		[]topology.Member{{Name: "c-00000", Addr: "127.0.0.1:1"}}, 1, 0)
	require.Error(t, err, "auth is mandatory")
}
