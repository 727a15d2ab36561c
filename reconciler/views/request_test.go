package views_test

import (
	"testing"

	"github.com/gomomento/valkey-operator/reconciler/views"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseRequest(t *testing.T) {
	tests := []struct {
		in   string
		want views.Request
		bad  bool
	}{
		{in: "rebalance", want: views.Request{Kind: views.RequestRebalance}},
		{in: "failover:c-abcde", want: views.Request{Kind: views.RequestFailover, Node: "c-abcde"}},
		{in: "failover:", bad: true},
		{in: "failover:C_1", bad: true},
		{in: "rebalance:c", bad: true},
		{in: "restart", bad: true},
		{in: "", bad: true},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := views.ParseRequest(tc.in)
			if tc.bad {
				require.Error(t, err)
				assert.Contains(t, err.Error(), `is neither "rebalance" nor "failover:NODE"`)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
			assert.Equal(t, tc.in, got.String(), "round trip")
		})
	}
}

func TestAnswerRoundTrip(t *testing.T) {
	verdict, raw, why := views.ParseAnswer(views.FormatAnswer(views.AnswerRefused, "failover:c-a", "c-a has no in-sync replica: none: at all"))
	assert.Equal(t, views.AnswerRefused, verdict)
	assert.Equal(t, "failover:c-a", raw)
	assert.Equal(t, "c-a has no in-sync replica: none: at all", why)
}
