//go:build integration

package integration

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valkey-io/valkey-go"

	"github.com/gomomento/valkey-operator/integration/harness"
	"github.com/gomomento/valkey-operator/internal/poll"
	"github.com/gomomento/valkey-operator/valkeyops"
	"github.com/gomomento/valkey-operator/valkeyops/model"
)

// One operator holds connections to every server of every cluster, so what a server costs it
// is how many connections it keeps there: one, however many calls run at once, and the extra
// ones a slot move opens are closed once idle (Options.DedicatedIdle).
func TestOneConnectionPerServer(t *testing.T) {
	const idle = time.Second
	f := newFixture(t, harness.Config{}, 2, 1, valkeyops.Options{Log: t.Logf, DisableAtomic: true, DedicatedIdle: idle})
	ctx := ctxT(t, 3*time.Minute)
	require.NoError(t, f.admin.Bootstrap(ctx, f.nodes, 2))
	waitHealthy(t, f, f.nodes, 2, 0, 30*time.Second)
	fill(t, dataClient(t, f.nodes), "k:", 2000)

	counters := map[string]valkey.Client{}
	for _, n := range f.nodes {
		c, err := valkey.NewClient(valkey.ClientOption{
			InitAddress: []string{n.Addr}, Username: model.OperatorUser, Password: operatorPassword,
			ForceSingleClient: true, DisableCache: true, ClientName: "connection-counter",
		})
		require.NoError(t, err)
		t.Cleanup(c.Close)
		counters[n.Name] = c
	}
	// operatorConns is how many connections each server has from the Admin (its client name).
	operatorConns := func(ctx context.Context) (map[string]int, error) {
		out := map[string]int{}
		for name, c := range counters {
			list, err := c.Do(ctx, c.B().ClientList().Build()).ToString()
			if err != nil {
				return nil, err
			}
			out[name] = strings.Count(list, "name=valkey-operator ")
		}
		return out, nil
	}
	everyServerHasOne := func(ctx context.Context) (bool, string, error) {
		n, err := operatorConns(ctx)
		if err != nil {
			return false, "", err
		}
		for _, c := range n {
			if c != 1 {
				return false, "operator connections per server: " + fmt.Sprint(n), nil
			}
		}
		return true, "", nil
	}

	// Many calls at once still share the one connection to each server.
	var wg sync.WaitGroup
	errs := make([]error, 16)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = f.admin.Observe(ctx, f.nodes)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	ok, why, err := everyServerHasOne(ctx)
	require.NoError(t, err)
	assert.True(t, ok, "after 16 concurrent observes: %s", why)

	// A slot move (SETSLOT/MIGRATE path) spreads its SETSLOTs over extra connections...
	src := waitHealthy(t, f, f.nodes, 2, 0, 10*time.Second).Primaries()[1]
	most := 0
	moved := make(chan struct{})
	watched := make(chan error, 1)
	go func() {
		for {
			n, err := operatorConns(ctx)
			if err != nil {
				watched <- err
				return
			}
			for _, c := range n {
				most = max(most, c)
			}
			select {
			case <-moved:
				watched <- nil
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	_, err = f.admin.Rebalance(ctx, f.nodes, []string{src.Name})
	close(moved)
	require.NoError(t, err)
	require.NoError(t, <-watched)
	require.Greater(t, most, 1, "the move used extra connections")

	// ...which are closed once idle, leaving one per server.
	require.NoError(t, poll.Until(ctx, 200*time.Millisecond, 10*idle, "one operator connection per server", everyServerHasOne))
}
