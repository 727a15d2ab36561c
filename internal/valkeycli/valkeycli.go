// Package valkeycli runs the host's valkey-cli (tests and benchmarks use it) with a password
// that never appears on its command line: any user of the machine can read a process's
// arguments (ps, /proc), while its environment is readable only by its owner.
package valkeycli

import (
	"context"
	"os"
	"os/exec"
)

// AuthEnv is the variable valkey-cli reads its password from when -a is not given (a
// container's valkey-cli gets it with `docker run -e AuthEnv` and Env).
const AuthEnv = "REDISCLI_AUTH"

// Command is valkey-cli args, logging in with password (as the default user unless args
// name another with --user).
func Command(ctx context.Context, password string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "valkey-cli", args...)
	cmd.Env = Env(password)
	return cmd
}

// Env is this process's environment with password where valkey-cli looks for it.
func Env(password string) []string {
	return append(os.Environ(), AuthEnv+"="+password)
}
