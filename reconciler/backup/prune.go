// keep pruning: the only place the operator deletes bucket objects.

package backup

import (
	"context"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gomomento/valkey-operator/reconciler/views"
)

// prune removes each scheduled backup of cluster that keep no longer retains, oldest first.
// For each: its manifest first (from then on it is not a backup: restore never reads a
// directory without one), then its shard objects and anything else under its path, any
// unfinished upload there, and the ValkeyBackup last, so a prune cut short by a crash or a
// store error is finished by the next pass instead of leaving objects nobody lists. A
// failure is reported and returned; the remaining backups wait for the next pass.
func (s *Scheduler) prune(ctx context.Context, cluster views.Cluster, runs []Run, byName map[string]views.Backup, keep int) error {
	for _, r := range runs {
		b, ok := byName[r.Name]
		if !ok {
			continue
		}
		n, err := s.pruneOne(ctx, b)
		if errors.Is(err, errPruned) {
			continue // the cache had not seen an earlier prune's deletion yet
		}
		if err != nil {
			s.event(cluster, b.U, corev1.EventTypeWarning, ReasonPruneFailed, "Prune", "pruning the scheduled backup %s: %s", r.Name, err.Error())
			return err
		}
		why := fmt.Sprintf("keep is %d", keep)
		if r.Phase == views.BackupFailed {
			why = fmt.Sprintf("it failed and %d newer scheduled backups completed", keep)
		}
		s.event(cluster, b.U, corev1.EventTypeNormal, ReasonPruned, "Prune", "pruned the scheduled backup %s and its %d objects: %s", r.Name, n, why)
	}
	return nil
}

// errPruneInput is a pruning problem of the user's to fix (a Secret gone).
var errPruneInput = errors.New("cannot open the backup's storage")

// errPruned says the backup is already gone from the API server.
var errPruned = errors.New("already pruned")

// pruneOne deletes b's objects in order, then b; it returns how many objects there were.
func (s *Scheduler) pruneOne(ctx context.Context, cached views.Backup) (int, error) {
	ns := cached.U.GetNamespace()
	// Read around the cache: a backup pruned a moment ago may still be listed there.
	b := views.Backup{U: views.NewBackupObject()}
	if err := s.c.reader.Get(ctx, types.NamespacedName{Namespace: ns, Name: cached.U.GetName()}, b.U); err != nil {
		if apierrors.IsNotFound(err) {
			return 0, errPruned
		}
		return 0, err
	}
	if b.U.GetUID() != cached.U.GetUID() || b.U.GetDeletionTimestamp() != nil {
		return 0, errPruned
	}
	path := b.Status().Path
	if path == "" {
		// Failed before Running (a missing Secret, refused credentials, no bucket, a cluster
		// not Active): the path is recorded before anything is written, so there is nothing
		// in the store, which may well be the unreachable part.
		return 0, s.deleteBackup(ctx, b)
	}
	store, msg, err := s.c.openStore(ctx, ns, b.Spec().Storage)
	if err != nil {
		return 0, err
	}
	if msg != "" {
		return 0, fmt.Errorf("%w: %s", errPruneInput, msg)
	}
	dir := store.Key(path) + "/"
	existing, err := store.List(ctx, dir)
	if err != nil {
		return 0, err
	}
	// The manifest first, then the shards the status names, then whatever else is there.
	order := []string{store.Key(path, ManifestName)}
	for _, sh := range b.Status().Shards {
		if sh.Object != "" && strings.HasPrefix(sh.Object, dir) { // never outside its own directory
			order = append(order, sh.Object)
		}
	}
	order = append(order, existing...)
	done := map[string]bool{}
	for _, key := range order {
		if done[key] {
			continue
		}
		if err := store.Delete(ctx, key); err != nil {
			return 0, err
		}
		done[key] = true
	}
	if err := store.AbortIncomplete(ctx, dir); err != nil {
		return 0, err
	}
	return len(existing), s.deleteBackup(ctx, b)
}
