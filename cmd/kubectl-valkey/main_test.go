package main

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseCommand(t *testing.T) {
	tests := []struct {
		args    []string
		output  string
		want    command
		wantErr string
	}{
		{args: []string{"status", "c"}, want: command{verb: "status", target: "c"}},
		{args: []string{"status", "c"}, output: "json", want: command{verb: "status", target: "c", json: true}},
		{args: []string{"failover", "c-abcde"}, want: command{verb: "failover", target: "c-abcde"}},
		{args: []string{"rebalance", "c"}, output: "text", want: command{verb: "rebalance", target: "c"}},
		{args: nil, wantErr: "no command"},
		{args: []string{"restart", "c"}, wantErr: `unknown command "restart"`},
		{args: []string{"status"}, wantErr: "status takes exactly one name"},
		{args: []string{"failover", "a", "b"}, wantErr: "failover takes exactly one name"},
		{args: []string{"failover", "a"}, output: "json", wantErr: "-o json is for status only"},
		{args: []string{"status", "c"}, output: "yaml", wantErr: `unknown output "yaml"`},
	}
	for _, tc := range tests {
		t.Run(tc.wantErr+tc.output, func(t *testing.T) {
			got, err := parseCommand(tc.args, tc.output)
			if tc.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestRunExitCodes(t *testing.T) {
	tests := []struct {
		args []string
		want int
		out  string // a part of stderr
	}{
		{args: []string{"--help"}, want: 0, out: "kubectl valkey status CLUSTER"},
		{args: []string{"bogus", "x"}, want: 2, out: `unknown command "bogus"`},
		{args: []string{"--nope"}, want: 2, out: "unknown flag: --nope"},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var stdout, stderr strings.Builder
			assert.Equal(t, tc.want, run(context.Background(), tc.args, &stdout, &stderr))
			assert.Contains(t, stderr.String(), tc.out)
		})
	}
}
