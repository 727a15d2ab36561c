package valkeyops

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestSameRanges(t *testing.T) {
	tests := []struct {
		got, want string
		same      bool
	}{
		{"0-100 200-300", "0-100 200-300", true},
		{"5-5", "5", true},
		{"0-100,200-300", "0-100 200-300", true},
		{"0-100", "0-101", false},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.same, sameRanges(tt.got, tt.want), "%q vs %q", tt.got, tt.want)
	}
}
