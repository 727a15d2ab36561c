// Package poll is the one way this project's dev cluster, tools and tests wait for a
// condition: k8s.io/apimachinery's wait.PollUntilContextTimeout, plus the last status the
// condition reported, so that a timeout explains itself.
package poll

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// Condition reports whether the awaited state is reached and, when it is not, what it saw
// instead. A non-nil error stops the wait at once; return (false, err.Error(), nil) for an
// error worth retrying.
type Condition func(ctx context.Context) (done bool, status string, err error)

// Until calls cond at once and then every interval until cond reports done, cond returns an
// error, timeout passes or ctx ends. The ctx cond receives carries the timeout. On timeout
// the error (which wraps context.DeadlineExceeded) names what was awaited and the last
// status cond reported.
func Until(ctx context.Context, interval, timeout time.Duration, what string, cond Condition) error {
	var last string
	var condErr error
	err := wait.PollUntilContextTimeout(ctx, interval, timeout, true, func(ctx context.Context) (bool, error) {
		done, status, err := cond(ctx)
		last, condErr = status, err
		return done, err
	})
	switch {
	case err == nil:
		return nil
	case condErr != nil && errors.Is(err, condErr):
		return fmt.Errorf("%s: %w", what, condErr)
	default:
		return fmt.Errorf("%s: not reached within %s (%w); last seen: %s", what, timeout, err, last)
	}
}
