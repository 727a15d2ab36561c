package model_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/gomomento/valkey-operator/valkeyops/model"
)

func TestParseConfigRejection(t *testing.T) {
	for _, tc := range []struct {
		name   string
		output string
		want   model.ConfigRejection
		ok     bool
	}{
		{"a setting with injected words (Valkey 8.0.1's output)",
			"\n*** FATAL CONFIG FILE ERROR (Version 8.0.1) ***\nReading the configuration file, at line 2\n>>> 'maxmemory-policy \"noeviction\" \"--port\" \"6380\"'\nwrong number of arguments\n",
			model.ConfigRejection{Directive: "maxmemory-policy", Line: `maxmemory-policy "noeviction" "--port" "6380"`, Reason: "wrong number of arguments"}, true},
		{"a value Valkey does not know (9.1.2), after other log lines",
			"1:C 03 Dec 2026 12:00:00.000 # oO0OoO0OoO0Oo Valkey is starting oO0OoO0OoO0Oo\n\n*** FATAL CONFIG FILE ERROR (Version 9.1.2) ***\r\nReading the configuration file, at line 1\r\n>>> 'maxmemory-policy \"bogus\"'\r\nargument(s) must be one of the following: noeviction\r\n",
			model.ConfigRejection{Directive: "maxmemory-policy", Line: `maxmemory-policy "bogus"`, Reason: "argument(s) must be one of the following: noeviction"}, true},
		{"cut before the line", "*** FATAL CONFIG FILE ERROR (Version 8.0.1) ***\n", model.ConfigRejection{Reason: "unreadable configuration"}, true},
		{"another failure", "Can't open the log file: Permission denied\n", model.ConfigRejection{}, false},
		{"no output", "", model.ConfigRejection{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := model.ParseConfigRejection(tc.output)
			assert.Equal(t, tc.ok, ok)
			assert.Equal(t, tc.want, got)
		})
	}
}
