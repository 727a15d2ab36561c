package valkeycli

import (
	"context"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestPasswordOffTheCommandLine: the password reaches valkey-cli through its environment,
// never as an argument.
func TestPasswordOffTheCommandLine(t *testing.T) {
	cmd := Command(context.Background(), "s3cret", "--cluster", "check", "10.0.0.1:6379")
	assert.Equal(t, []string{"valkey-cli", "--cluster", "check", "10.0.0.1:6379"}, cmd.Args)
	assert.NotContains(t, cmd.Args, "-a")
	assert.True(t, slices.Contains(cmd.Env, AuthEnv+"=s3cret"), "the password is in the environment")
}
