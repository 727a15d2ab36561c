package model

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestMaxRDBVersion(t *testing.T) {
	for _, tc := range []struct {
		version string
		want    int
		known   bool
	}{
		{"7.2.5", 11, true},
		{"8.0.1", 11, true},
		{"8.0", 11, true},
		{"8.1.1", 11, true},
		{"9.0.0", 80, true},
		{"9.1.2", 80, true},
		{"9.2.0", 81, true},
		{"7.0.15", 0, false}, // older than the table: not guessed
		{"9.3.0", 0, false},  // newer than the table: may load more
		{"10.0.0", 0, false},
		{"", 0, false},
		{"unstable", 0, false},
		{"9", 0, false},
	} {
		t.Run(tc.version, func(t *testing.T) {
			got, known := MaxRDBVersion(tc.version)
			assert.Equal(t, tc.known, known)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestForeignRDBVersion(t *testing.T) {
	for v, want := range map[int]bool{10: false, 11: false, 12: true, 50: true, 79: true, 80: false, 81: false} {
		assert.Equal(t, want, ForeignRDBVersion(v), "RDB %d", v)
	}
}
