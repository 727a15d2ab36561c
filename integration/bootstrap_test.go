//go:build integration

package integration

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gomomento/valkey-operator/integration/harness"
	"github.com/gomomento/valkey-operator/valkeyops"
	"github.com/gomomento/valkey-operator/valkeyops/model"
)

// A 3x1 bootstrap satisfies Health; a second Bootstrap changes nothing (Valkey 8.0 and 9.1).
func TestBootstrapHealthyAndIdempotent(t *testing.T) {
	t.Parallel()
	for _, image := range []string{harness.Image(), harness.Image9()} {
		t.Run(image, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, harness.Config{Image: image}, 3, 2, valkeyops.Options{})
			ctx := ctxT(t, 2*time.Minute)

			start := time.Now()
			require.NoError(t, f.admin.Bootstrap(ctx, f.nodes, 3))
			before := waitHealthy(t, f, f.nodes, 3, 1, 30*time.Second)
			t.Logf("bootstrap 3x1 healthy after %s", time.Since(start))

			ranges := model.EvenRanges(3)
			for _, p := range before.Primaries() {
				require.Len(t, p.Slots, 1)
				assert.Equal(t, ranges[p.Shard], p.Slots[0], "primary %s owns its shard's even range", p.Name)
			}

			require.NoError(t, f.admin.Bootstrap(ctx, f.nodes, 3))
			after := waitHealthy(t, f, f.nodes, 3, 1, 10*time.Second)
			for _, b := range before.Nodes {
				a := after.ByName(b.Name)
				assert.Equal(t, b.ID, a.ID)
				assert.Equal(t, b.Role, a.Role)
				assert.Equal(t, b.PrimaryID, a.PrimaryID)
				assert.Equal(t, b.Slots, a.Slots)
				assert.Equal(t, b.ConfigEpoch, a.ConfigEpoch, "second bootstrap must not bump epochs on %s", b.Name)
				assert.Equal(t, b.CurrentEpoch, a.CurrentEpoch)
			}
		})
	}
}
