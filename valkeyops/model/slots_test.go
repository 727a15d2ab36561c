package model

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseRanges(t *testing.T) {
	for _, tc := range []struct {
		in      []string
		want    []SlotRange
		wantErr string
	}{
		{in: []string{"0-5460"}, want: []SlotRange{{0, 5460}}},
		{in: []string{"0-99", "100", "16383"}, want: []SlotRange{{0, 99}, {100, 100}, {16383, 16383}}},
		{in: nil, want: []SlotRange{}},
		{in: []string{"5-4"}, wantErr: `"5-4" is not a slot range`},
		{in: []string{"16384"}, wantErr: `"16384" is not a slot range`},
		{in: []string{"-1"}, wantErr: `"-1" is not a slot range`},
		{in: []string{"a-b"}, wantErr: `"a-b" is not a slot range`},
	} {
		got, err := ParseRanges(tc.in)
		if tc.wantErr != "" {
			assert.ErrorContains(t, err, tc.wantErr, "%v", tc.in)
			continue
		}
		require.NoError(t, err, "%v", tc.in)
		assert.Equal(t, tc.want, got)
		// Round trip: what String writes, ParseRanges reads back.
		var back []string
		for _, r := range got {
			back = append(back, r.String())
		}
		again, err := ParseRanges(back)
		require.NoError(t, err)
		assert.Equal(t, got, again)
	}
}
