package dockerpods

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestNotReadyWaitProbesOftenInAContainersFirstSeconds(t *testing.T) {
	for _, tc := range []struct {
		name   string
		since  time.Duration
		period time.Duration
		want   time.Duration
	}{
		{"just started", 0, 10 * time.Second, startupRetry},
		{"within the window", startupWindow - time.Millisecond, 10 * time.Second, startupRetry},
		{"after the window", startupWindow, 10 * time.Second, notReadyPeriod},
		{"long after", time.Minute, 10 * time.Second, notReadyPeriod},
		{"never over the probe's period", time.Minute, 300 * time.Millisecond, 300 * time.Millisecond},
		{"never over the probe's period, early", 0, 50 * time.Millisecond, 50 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, notReadyWait(tc.since, tc.period))
		})
	}
}
