// A backup's status writes and Events.

package backup

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gomomento/valkey-operator/reconciler/views"
)

// fail records Failed with msg, before any transfer started.
func (c *Controller) fail(ctx context.Context, b views.Backup, msg string) error {
	st := b.Status()
	st.Phase, st.Message = views.BackupFailed, msg
	if err := c.writeStatus(ctx, b, st); err != nil {
		return err
	}
	c.event(b, corev1.EventTypeWarning, ReasonFailed, "Fail", "%s", msg)
	return nil
}

// writeStatus patches b's status to st, failing on a conflict (the backup changed: a stale
// cache or another writer), so that two passes never both start one backup.
func (c *Controller) writeStatus(ctx context.Context, b views.Backup, st views.BackupStatus) error {
	before := b.U.DeepCopy()
	b.SetStatus(st)
	return c.client.Status().Patch(ctx, b.U, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))
}

// patchLatest writes st onto the backup as the API server has it now (a transfer's status
// writes come long after the pass that started it), and returns the backup it read, for the
// Event that follows (U is nil when it could not be read).
func (c *Controller) patchLatest(ctx context.Context, key types.NamespacedName, st views.BackupStatus) (views.Backup, error) {
	for attempt := 0; ; attempt++ {
		u := views.NewBackupObject()
		if err := c.reader.Get(ctx, key, u); err != nil {
			return views.Backup{}, err
		}
		b := views.Backup{U: u}
		err := c.writeStatus(ctx, b, st)
		if err == nil || !apierrors.IsConflict(err) || attempt >= 4 {
			return b, err
		}
	}
}

// event records an Event on b (none when b could not be read).
func (c *Controller) event(b views.Backup, eventType, reason, action, format string, args ...any) {
	if c.opts.Recorder != nil && b.U != nil {
		c.opts.Recorder.Eventf(b.U, nil, eventType, reason, action, format, args...)
	}
}

// reportCompleted hands a Completed backup of a cluster that still exists to Metrics (a
// deleted cluster's series are gone, and its backups must not bring them back).
func (c *Controller) reportCompleted(ctx context.Context, b views.Backup) {
	if c.opts.Metrics == nil {
		return
	}
	at, err := time.Parse(time.RFC3339, b.Status().CompletedAt)
	if err != nil {
		return
	}
	cluster := b.Spec().Cluster
	if err := c.client.Get(ctx, types.NamespacedName{Namespace: b.U.GetNamespace(), Name: cluster}, views.NewClusterObject()); err != nil {
		return
	}
	c.opts.Metrics.BackupCompleted(b.U.GetNamespace(), cluster, at)
}

// progressDue says whether a running backup's status is written now with the bytes its
// shards have streamed so far: only when a figure changed since the last write (nothing is
// written while a source forks, waits out its diskless delay or stalls), and no sooner than
// every after the backup's last status write of any kind. A status write costs the API
// server the same whatever bytes moved, so time alone spaces them: at most one per backup
// every 5 s by default, whatever its number of shards. A byte threshold as well ("and 64 MiB
// more") would save nothing on a fast transfer, where the 5 s govern, and would only hold
// the figure back on a slow one (64 MiB at 5 MB/s is 13 s), where progress matters most.
func progressDue(lastWrite, now time.Time, every time.Duration, changed bool) bool {
	return changed && now.Sub(lastWrite) >= every
}

// withProgress is st with each shard not uploaded yet showing the bytes its current stream
// has sent, and the total following.
func withProgress(st views.BackupStatus, streamed map[int]int64) views.BackupStatus {
	st.Shards = append([]views.BackupShard(nil), st.Shards...)
	for i := range st.Shards {
		if s := &st.Shards[i]; s.SHA256 == "" {
			if n, ok := streamed[s.Index]; ok {
				s.Bytes = n
			}
		}
	}
	st.Bytes = totalBytes(st.Shards)
	return st
}

// reportProgress writes the bytes streamed so far into the status (withProgress) while ctx
// lasts, as progressDue allows. It looks every second; the shards' goroutines only add to
// counters, so no stream ever waits on the API server.
func (c *Controller) reportProgress(ctx context.Context, j *job, log logr.Logger) {
	tick := time.NewTicker(min(time.Second, c.opts.ProgressEvery))
	defer tick.Stop()
	for {
		var now time.Time
		select {
		case <-ctx.Done():
			return
		case now = <-tick.C:
		}
		counts := map[int]int64{}
		for i, n := range j.streamed {
			counts[i] = n.Load()
		}
		j.mu.Lock()
		next := withProgress(j.status, counts)
		if progressDue(j.lastWrite, now, c.opts.ProgressEvery, !sameBytes(next, j.status)) {
			if _, err := c.patchLatest(ctx, j.key, next); err != nil {
				log.V(1).Info("recording progress", "error", err.Error())
			} else {
				j.status, j.lastWrite = next, now
			}
		}
		j.mu.Unlock()
	}
}

// sameBytes reports whether a and b show the same bytes for every shard.
func sameBytes(a, b views.BackupStatus) bool {
	if a.Bytes != b.Bytes || len(a.Shards) != len(b.Shards) {
		return false
	}
	for i := range a.Shards {
		if a.Shards[i].Bytes != b.Shards[i].Bytes {
			return false
		}
	}
	return true
}

// progressMessage is the message of a running backup.
func progressMessage(uploaded, shards int) string {
	return fmt.Sprintf("%d of %d shards uploaded", uploaded, shards)
}
