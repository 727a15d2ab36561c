package reconciler

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/gomomento/valkey-operator/reconciler/plan"
)

func TestExpiryStall(t *testing.T) {
	at := time.Date(2026, 12, 5, 12, 0, 0, 0, time.FixedZone("X", 3600))
	join := plan.Action{Kind: plan.Join, Reason: "shard 2 joins the cluster"}
	const note = `the TLS certificate of Secret "s-tls" expired at 2026-12-05T11:00:00Z; servers refuse an expired peer on the cluster bus until it is renewed`
	tests := []struct {
		name    string
		a       plan.Action
		expired time.Time
		want    plan.Action
		stalled bool
	}{
		{"join while expired waits with a warning naming the expiry", join, at,
			plan.Action{Kind: plan.Wait, Warning: true, Reason: "Join (shard 2 joins the cluster) waits: " + note}, true},
		{"replicate while expired waits too", plan.Action{Kind: plan.Replicate, Node: "n", Reason: "n joins shard 0 as a replica"}, at,
			plan.Action{Kind: plan.Wait, Warning: true, Reason: "Replicate (n joins shard 0 as a replica) waits: " + note}, true},
		{"join with a valid certificate goes ahead", join, time.Time{}, join, false},
		{"a failover needs no new link", plan.Action{Kind: plan.Failover, Node: "n"}, at, plan.Action{Kind: plan.Failover, Node: "n"}, false},
		{"a rebalance goes ahead", plan.Action{Kind: plan.Rebalance}, at, plan.Action{Kind: plan.Rebalance}, false},
		{"nothing to do stays so", plan.Action{}, at, plan.Action{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, stalled := expiryStall(tt.a, "s-tls", tt.expired)
			assert.Equal(t, tt.stalled, stalled)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestCertExpiredAt(t *testing.T) {
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	earlier, later := now.Add(-2*time.Minute), now.Add(-time.Minute)
	var p pass
	assert.True(t, p.certExpiredAt(now).IsZero(), "without TLS: nothing expired")

	p.certNotAfter = now.Add(time.Hour)
	assert.True(t, p.certExpiredAt(now).IsZero(), "a valid Secret, every node serving a valid certificate")
	p.noteServed(now.Add(time.Hour), now)
	assert.True(t, p.certExpiredAt(now).IsZero(), "a valid served certificate is no fact")

	p.noteServed(later, now)
	p.noteServed(earlier, now)
	assert.Equal(t, earlier, p.certExpiredAt(now), "the renewed Secret is not loaded everywhere yet: the earliest expired served one")

	p.certNotAfter = later
	assert.Equal(t, later, p.certExpiredAt(now), "the Secret's own expiry comes first")
}
