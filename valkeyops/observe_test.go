package valkeyops

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestStripVerbatim(t *testing.T) {
	tests := []struct{ in, want string }{
		{"txt:cluster_state:ok", "cluster_state:ok"},
		{"cluster_state:ok", "cluster_state:ok"},
		{"abc", "abc"},
		{"", ""},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, stripVerbatim(tt.in))
	}
}
