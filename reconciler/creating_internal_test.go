package reconciler

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestInParallel(t *testing.T) {
	errOdd := errors.New("odd")
	for _, tc := range []struct {
		name    string
		n       int
		fail    func(i int) error
		wantErr bool
	}{
		{"nothing to do", 0, func(int) error { return nil }, false},
		{"all succeed", 20, func(int) error { return nil }, false},
		{"some fail: every item still runs, errors joined", 20, func(i int) error {
			if i%2 == 1 {
				return errOdd
			}
			return nil
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ran, running, most atomic.Int32
			err := inParallel(tc.n, func(i int) error {
				now := running.Add(1)
				for {
					m := most.Load()
					if now <= m || most.CompareAndSwap(m, now) {
						break
					}
				}
				time.Sleep(5 * time.Millisecond)
				running.Add(-1)
				ran.Add(1)
				return tc.fail(i)
			})
			assert.EqualValues(t, tc.n, ran.Load())
			assert.LessOrEqual(t, most.Load(), int32(writeConcurrency))
			if tc.n >= writeConcurrency {
				assert.Greater(t, most.Load(), int32(1), "items run concurrently")
			}
			if !tc.wantErr {
				require.NoError(t, err)
				return
			}
			assert.ErrorIs(t, err, errOdd)
		})
	}
}
