package poll_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gomomento/valkey-operator/internal/poll"
)

func TestUntilReturnsOnceDone(t *testing.T) {
	calls := 0
	err := poll.Until(context.Background(), time.Millisecond, time.Second, "third call", func(context.Context) (bool, string, error) {
		calls++
		return calls == 3, fmt.Sprintf("call %d", calls), nil
	})
	require.NoError(t, err)
	assert.Equal(t, 3, calls)
}

func TestUntilTimeoutNamesLastStatus(t *testing.T) {
	err := poll.Until(context.Background(), time.Millisecond, 20*time.Millisecond, "never", func(context.Context) (bool, string, error) {
		return false, "still waiting", nil
	})
	require.Error(t, err)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Contains(t, err.Error(), "never: not reached within 20ms")
	assert.Contains(t, err.Error(), "last seen: still waiting")
}

func TestUntilStopsOnConditionError(t *testing.T) {
	boom := errors.New("boom")
	calls := 0
	err := poll.Until(context.Background(), time.Millisecond, time.Second, "aborts", func(context.Context) (bool, string, error) {
		calls++
		return false, "", boom
	})
	assert.ErrorIs(t, err, boom)
	assert.Equal(t, "aborts: boom", err.Error())
	assert.Equal(t, 1, calls)
}
