//go:build envtest

package reconciler_test

import (
	"strings"
	"testing"
	"time"

	"github.com/gomomento/valkey-operator/reconciler/plan"
	"github.com/gomomento/valkey-operator/reconciler/views"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/types"
)

// TestRequests: the request annotation (`kubectl valkey failover`/`rebalance`) on the real
// manager and API server, Valkey played by the day-2 fakes. A failover of a primary is carried
// out as one Failover action and then the cluster is idle again (the answer stays, nothing is
// written); a rebalance of a balanced cluster does nothing; a request during a slot move is
// refused at once, not held until the move ends.
func TestRequests(t *testing.T) {
	t.Parallel()
	e := startDay2Env(t)
	e.startManager(t)
	key := e.createCluster(t, "req", 2, 1)
	e.waitConverged(t, key, 2, 1)

	t.Run("failover of a primary", func(t *testing.T) {
		primary := ""
		for _, n := range e.nodes(t, key) {
			if n.Shard() == 0 && e.valkey.model(key).roleOf(n.Name()) == "primary" {
				primary = n.Name()
			}
		}
		require.NotEmpty(t, primary)
		since := time.Now()
		answer := ask(t, e, key, "failover:"+primary)
		assert.True(t, strings.HasPrefix(answer, "accepted: failover:"+primary+": Failover requested: "), answer)
		waitUntil(t, primary+" a replica", func() (bool, string) {
			role := e.valkey.model(key).roleOf(primary)
			return role == "replica", role
		})
		e.waitConverged(t, key, 2, 1)
		failovers := 0
		for _, s := range e.timeline(key, since) {
			if s.Kind == string(plan.Failover) && s.OK {
				failovers++
			}
		}
		assert.Equal(t, 1, failovers, "one Failover, carried out once")
		e.assertIdle(t, key)
	})

	t.Run("rebalance of a balanced cluster", func(t *testing.T) {
		answer := ask(t, e, key, "rebalance")
		assert.Equal(t, "nothing: rebalance: the slots are balanced already (8192..8192 per primary): nothing to move", answer)
		e.assertIdle(t, key)
	})

	t.Run("refused during a slot move", func(t *testing.T) {
		held, release := e.valkey.log(key).holdNextRebalance()
		t.Cleanup(release)
		e.editCluster(t, key, func(c views.Cluster) { c.SetShards(3) })
		select {
		case <-held:
		case <-time.After(day2Wait):
			t.Fatal("the scale-out's Rebalance never started")
		}
		answer := ask(t, e, key, "rebalance")
		assert.Equal(t, "refused: rebalance: another topology action runs: a slot move is under way", answer)
		release()
		e.waitConverged(t, key, 3, 1)
	})
}

// ask sets the request annotation and waits until the operator removed it, returning its
// answer.
func ask(t *testing.T, e *day2Env, key types.NamespacedName, raw string) string {
	t.Helper()
	e.editCluster(t, key, func(c views.Cluster) { c.SetRequest(raw) })
	var answer string
	waitUntil(t, "request "+raw+" answered", func() (bool, string) {
		c := e.getCluster(t, key)
		answer = c.RequestAnswer()
		return c.Request() == "", "request " + c.Request() + " stands"
	})
	return answer
}
