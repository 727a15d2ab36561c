//go:build integration

package integration

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valkey-io/valkey-go"

	"github.com/gomomento/valkey-operator/integration/harness"
	"github.com/gomomento/valkey-operator/valkeyops"
	"github.com/gomomento/valkey-operator/valkeyops/model"
)

// TestAvailabilityZone: on Valkey 8.0 and 9.1, a server starts with no availability-zone,
// Admin.SetAvailabilityZone sets it live and Admin.AvailabilityZone (CONFIG GET) reads it
// back; 9.1's HELLO reports it to clients as availability_zone, 8.0's HELLO has no such field.
func TestAvailabilityZone(t *testing.T) {
	for _, tc := range []struct {
		image string
		hello bool
	}{{harness.Image(), false}, {harness.Image9(), true}} {
		t.Run(tc.image, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, harness.Config{Image: tc.image}, 1, 1, valkeyops.Options{})
			node := f.nodes[0]
			ctx := ctxT(t, time.Minute)

			zone, err := f.admin.AvailabilityZone(ctx, node)
			require.NoError(t, err)
			assert.Empty(t, zone, "a server starts without a zone")

			require.NoError(t, f.admin.SetAvailabilityZone(ctx, node, "zone-b"))
			zone, err = f.admin.AvailabilityZone(ctx, node)
			require.NoError(t, err)
			assert.Equal(t, "zone-b", zone)

			c, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{node.Addr}, Username: model.OperatorUser,
				Password: operatorPassword, ForceSingleClient: true, DisableCache: true, DisableRetry: true})
			require.NoError(t, err)
			t.Cleanup(c.Close)
			hello, err := c.Do(ctx, c.B().Arbitrary("HELLO", "3").Build()).AsMap()
			require.NoError(t, err)
			got, present := hello["availability_zone"]
			if !tc.hello {
				assert.False(t, present, "this release's HELLO has no availability_zone")
				return
			}
			require.True(t, present, "HELLO reports availability_zone")
			s, err := got.ToString()
			require.NoError(t, err)
			assert.Equal(t, "zone-b", s)
		})
	}
}
