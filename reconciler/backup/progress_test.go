package backup

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gomomento/valkey-operator/reconciler/views"
)

// TestProgressDue: a running backup's bytes are written when they changed, and no sooner
// than the interval after its last status write of any kind.
func TestProgressDue(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 6, 0, 0, 0, time.UTC)
	tests := []struct {
		name    string
		after   time.Duration
		changed bool
		want    bool
	}{
		{"changed, interval passed", 5 * time.Second, true, true},
		{"changed, long after", time.Hour, true, true},
		{"changed, too soon", 4999 * time.Millisecond, true, false},
		{"changed, at once", 0, true, false},
		{"unchanged (a fork, the diskless delay, a stall)", time.Hour, false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, progressDue(t0, t0.Add(tc.after), 5*time.Second, tc.changed))
		})
	}
}

// TestWithProgress: shards still streaming show their bytes so far and the total follows;
// an uploaded shard keeps its recorded figure; the status it came from is left as it was.
func TestWithProgress(t *testing.T) {
	st := views.BackupStatus{Phase: views.BackupRunning, Bytes: 100, Shards: []views.BackupShard{
		{Index: 0, Bytes: 100, SHA256: "done"}, {Index: 1}, {Index: 2, Bytes: 7},
	}}
	got := withProgress(st, map[int]int64{0: 999, 1: 40, 2: 60})
	assert.Equal(t, []int64{100, 40, 60}, []int64{got.Shards[0].Bytes, got.Shards[1].Bytes, got.Shards[2].Bytes})
	assert.EqualValues(t, 200, got.Bytes)
	assert.False(t, sameBytes(st, got))
	assert.EqualValues(t, 0, st.Shards[1].Bytes, "the source status is not changed")
	assert.True(t, sameBytes(got, withProgress(got, map[int]int64{1: 40, 2: 60})), "nothing new: nothing to write")
}

// TestDeadline: the timeout counts from status.startedAt, so a restarted operator keeps it.
func TestDeadline(t *testing.T) {
	due, err := deadline("2026-12-07T06:00:00Z", 6*time.Hour)
	require.NoError(t, err)
	assert.Equal(t, time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC), due.UTC())
	_, err = deadline("yesterday", time.Hour)
	assert.Error(t, err)
	assert.Contains(t, timeoutMessage(6*time.Hour, "2026-12-07T06:00:00Z"), "--backup-timeout")
}

// TestTryCopies: a shard whose stream fails because of its source is streamed again from
// the next candidate (replicas, then the primary), each switch reported; an upload failure or
// a cancelled backup stops at once; when every copy failed the error says so and keeps the
// last cause.
func TestTryCopies(t *testing.T) {
	src := shardSource{Index: 1, Candidates: []member{{Name: "r1"}, {Name: "r2"}, {Name: "p"}}}
	bySource := func(name string) error {
		return &sourceError{errors.New("snapshot from " + name + ": connection reset")}
	}
	upload := errors.New("upload: bucket full")
	tests := []struct {
		name     string
		fails    map[string]error // per candidate; absent = succeeds
		cancel   bool
		tried    []string
		switches []string
		err      string
	}{
		{"first copy works", nil, false, []string{"r1"}, nil, ""},
		{"a replica fails: the next replica", map[string]error{"r1": bySource("r1")}, false, []string{"r1", "r2"}, []string{"r2"}, ""},
		{"both replicas fail: the primary", map[string]error{"r1": bySource("r1"), "r2": bySource("r2")}, false, []string{"r1", "r2", "p"}, []string{"r2", "p"}, ""},
		{"every copy fails", map[string]error{"r1": bySource("r1"), "r2": bySource("r2"), "p": bySource("p")}, false,
			[]string{"r1", "r2", "p"}, []string{"r2", "p"}, "shard 1: every copy failed (3 tried); the last: snapshot from p: connection reset"},
		{"an upload failure is not retried", map[string]error{"r1": upload}, false, []string{"r1"}, nil, "bucket full"},
		{"a cancelled backup is not retried", map[string]error{"r1": bySource("r1")}, true, []string{"r1"}, nil, "connection reset"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var tried, switches []string
			shard, err := tryCopies(ctx, src, func(from member) (views.BackupShard, error) {
				tried = append(tried, from.Name)
				if tc.cancel {
					cancel()
				}
				if e := tc.fails[from.Name]; e != nil {
					return views.BackupShard{}, e
				}
				return views.BackupShard{Index: 1, Node: from.Name}, nil
			}, func(attempt int, from member, why error) {
				assert.Equal(t, from, src.Candidates[attempt])
				assert.Error(t, why, "a switch says why")
				switches = append(switches, from.Name)
			})
			assert.Equal(t, tc.tried, tried)
			assert.Equal(t, tc.switches, switches)
			if tc.err != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.tried[len(tc.tried)-1], shard.Node, "recorded from the copy that worked")
		})
	}
}
