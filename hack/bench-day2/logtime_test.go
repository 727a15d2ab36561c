package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestLogTime(t *testing.T) {
	for _, tc := range []struct {
		name, line string
		want       time.Time
		ok         bool
	}{
		{"whole seconds (the Deployment)", `{"level":"info","ts":"2026-12-05T16:55:03Z","msg":"topology action"}`,
			time.Date(2026, 12, 5, 16, 55, 3, 0, time.UTC), true},
		{"sub-second (the host operator)", `{"level":"info","ts":"2026-12-05T16:57:46.656123Z","msg":"x"}`,
			time.Date(2026, 12, 5, 16, 57, 46, 656123000, time.UTC), true},
		{"a klog line", `I1205 14:25:36.384843   24170 shared_informer.go:503] "Waiting for caches to sync"`, time.Time{}, false},
		{"JSON without ts", `{"level":"info","msg":"x"}`, time.Time{}, false},
		{"an epoch ts", `{"ts":1765000000.5}`, time.Time{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := logTime(tc.line)
			assert.Equal(t, tc.ok, ok)
			assert.True(t, tc.want.Equal(got), "got %s", got)
		})
	}
}
