package views_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
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

// TestRequestPolicyAgrees: the admission policies spell the annotation keys declared here,
// and valkeycluster-requests admits exactly the values ParseRequest accepts (CEL's matches()
// is RE2, as Go's regexp).
func TestRequestPolicyAgrees(t *testing.T) {
	users, err := os.ReadFile(filepath.Join("..", "..", "deploy", "20-admission-policy.yaml"))
	require.NoError(t, err)
	operator, err := os.ReadFile(filepath.Join("..", "..", "deploy", "25-operator-writes-policy.yaml"))
	require.NoError(t, err)
	assert.Contains(t, string(users), "'"+views.RequestAnnotation+"'")
	assert.Contains(t, string(operator), "'"+views.RequestAnnotation+"'")
	assert.Contains(t, string(operator), "'"+views.RequestAnswerAnnotation+"'")

	m := regexp.MustCompile(`\.matches\('([^']+)'\)`).FindSubmatch(users)
	require.NotNil(t, m, "valkeycluster-requests' pattern")
	admitted := regexp.MustCompile(string(m[1]))
	for _, v := range []string{"rebalance", "failover:c-abcde", "failover:a", "failover:", "failover:C_1", "failover:-a", "rebalance:c",
		"restart", "", " rebalance", "failover:" + strings.Repeat("a", 63), "failover:" + strings.Repeat("a", 64)} {
		_, err := views.ParseRequest(v)
		parsed := err == nil
		assert.Equal(t, parsed, admitted.MatchString(v), "%q: parsed %v", v, parsed)
	}
}
