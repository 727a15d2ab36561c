// A backup's status writes and Events.

package backup

import (
	"context"
	"time"

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
