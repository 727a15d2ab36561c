package reconciler

import (
	"context"
	"testing"
	"time"

	"github.com/gomomento/valkey-operator/reconciler/plan"
	"github.com/gomomento/valkey-operator/valkeyops"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/types"
)

// TestMemoryForget: forgetting a cluster drops everything kept of it in one call (its
// expectations, Warnings, certificate rollout, login and credential check) and cancels its
// background move; another cluster's entry is untouched.
func TestMemoryForget(t *testing.T) {
	key, other := types.NamespacedName{Namespace: "ns", Name: "c"}, types.NamespacedName{Namespace: "ns", Name: "d"}
	r := &Reconciler{}
	p := &pass{key: key}
	t0 := time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)
	r.expect(p, "n0", true)
	r.firstTime(p, ReasonTopologyStall, "waiting")
	r.rollout(key).revision = "r1"
	r.memory.loggedIn(key, "pw")
	r.memory.credentialsConverged(key, "inputs", t0)
	r.memory.loggedIn(other, "other-pw")
	moveCancelled := make(chan struct{})
	r.memory.startMove(context.Background(), key, plan.Action{Kind: plan.Rebalance}, func(ctx context.Context) (valkeyops.MoveStats, error) {
		<-ctx.Done()
		close(moveCancelled)
		return valkeyops.MoveStats{}, ctx.Err()
	})
	require.True(t, r.memory.moving(key))

	r.memory.forget(key)

	select {
	case <-moveCancelled:
	case <-time.After(10 * time.Second):
		t.Fatal("the background move was not cancelled")
	}
	assert.NotContains(t, r.memory.clusters, key, "one entry, dropped whole")
	assert.Equal(t, 0, r.pendingWrites(key, nil))
	assert.True(t, r.firstTime(p, ReasonTopologyStall, "waiting"), "a Warning forgotten is reported again")
	assert.Empty(t, r.rollout(key).revision)
	assert.Empty(t, r.memory.login(key))
	assert.False(t, r.memory.credentialsFresh(key, "inputs", t0))
	assert.Equal(t, "other-pw", r.memory.login(other), "another cluster keeps its entry")
}

// TestMemoryPeekCreatesNothing: reads and updates of a cluster that has no entry (a pod event
// after its cluster was deleted) do not bring one back.
func TestMemoryPeekCreatesNothing(t *testing.T) {
	var m memory
	key := types.NamespacedName{Namespace: "ns", Name: "gone"}
	m.serverExited(key)
	assert.Empty(t, m.login(key))
	assert.False(t, m.moving(key))
	ended, busy := m.moveFinished(key)
	assert.Nil(t, ended)
	assert.False(t, busy)
	assert.NotContains(t, m.clusters, key)
}

// TestMoveFinishedOnce: a move is busy while it runs, and its outcome is handed out exactly
// once after it ends.
func TestMoveFinishedOnce(t *testing.T) {
	var m memory
	key := types.NamespacedName{Namespace: "ns", Name: "c"}
	release := make(chan struct{})
	m.startMove(context.Background(), key, plan.Action{Kind: plan.Rebalance}, func(context.Context) (valkeyops.MoveStats, error) {
		<-release
		return valkeyops.MoveStats{Slots: 3}, nil
	})
	ended, busy := m.moveFinished(key)
	assert.Nil(t, ended)
	assert.True(t, busy)
	close(release)
	require.Eventually(t, func() bool { return !m.moving(key) }, 10*time.Second, time.Millisecond)
	ended, busy = m.moveFinished(key)
	require.NotNil(t, ended)
	assert.False(t, busy)
	assert.Equal(t, 3, ended.moved.Slots)
	ended, busy = m.moveFinished(key)
	assert.Nil(t, ended, "handed out once")
	assert.False(t, busy)
}
