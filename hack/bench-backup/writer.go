package main

import (
	"context"
	"fmt"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/gomomento/valkey-operator/internal/loadgen"
	"github.com/gomomento/valkey-operator/internal/poll"
)

// writerPrefix names the writer's keys, apart from the pre-loaded keyPrefix ones, so that the
// digest of the pre-loaded keys does not depend on how far the writer got.
const writerPrefix = "w:"

// startWriter starts a writer of distinct keys through c, one SET at a time with a
// millisecond between them, recording when each was acknowledged. It returns once writes are
// acknowledged and a second boundary has passed since: status.startedAt has whole seconds, so
// some writes must be acknowledged in an earlier second for the check to have any.
func startWriter(ctx context.Context, c valkey.Client) (*loadgen.Writer, error) {
	w := loadgen.Start(c, loadgen.Options{Prefix: writerPrefix, Pace: time.Millisecond, Record: true})
	err := poll.Until(ctx, 50*time.Millisecond, 30*time.Second, "writer acknowledged", func(context.Context) (bool, string, error) {
		return w.Acked() >= 200, fmt.Sprintf("%d acknowledged", w.Acked()), nil
	})
	if err != nil {
		w.Stop()
		return nil, err
	}
	acked := time.Now()
	err = poll.Until(ctx, 50*time.Millisecond, 5*time.Second, "a second boundary after acknowledged writes", func(context.Context) (bool, string, error) {
		return time.Now().Truncate(time.Second).After(acked), "", nil
	})
	if err != nil {
		w.Stop()
		return nil, err
	}
	return w, nil
}

// checkWriterKeys fails unless every writer key of idx is in c with its value.
func checkWriterKeys(ctx context.Context, c valkey.Client, idx []int) error {
	missing, first := loadgen.Missing(ctx, c, writerPrefix, idx)
	if missing > 0 {
		return fmt.Errorf("%d of %d writes acknowledged before the backup started are missing or different; first: %v", missing, len(idx), first)
	}
	return nil
}
