package reconciler

import (
	"context"

	"github.com/gomomento/valkey-operator/reconciler/views"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// Slot moves are held while a backup of the cluster streams (plan.Observed.BackupRunning):
// the backup controller streams each shard at its own moment, so a slot moved in between
// would be in two objects or in none. The planner learns it from the cluster's ValkeyBackups
// in phase Running, read from the cache, so an operator restart changes nothing.

// runningBackup names a ValkeyBackup of the pass's cluster that is Running ("" when none).
// A failed read holds nothing: it is logged, and the next pass reads again.
func (r *Reconciler) runningBackup(ctx context.Context, p *pass) string {
	l := views.NewBackupListObject()
	if err := r.client.List(ctx, l, client.InNamespace(p.key.Namespace)); err != nil {
		p.log.V(1).Info("listing the cluster's backups", "error", err.Error())
		return ""
	}
	for i := range l.Items {
		b := views.Backup{U: &l.Items[i]}
		if b.Spec().Cluster == p.key.Name && b.Status().Phase == views.BackupRunning && b.U.GetDeletionTimestamp() == nil {
			return b.U.GetName()
		}
	}
	return ""
}

// backupToCluster maps a ValkeyBackup to its cluster.
func backupToCluster(_ context.Context, o client.Object) []reconcile.Request {
	u, ok := o.(*unstructured.Unstructured)
	if !ok {
		return nil
	}
	cluster := views.Backup{U: u}.Spec().Cluster
	if cluster == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: cluster}}}
}

// backupPhaseChanged passes a backup's creation, deletion and phase changes: what starts or
// ends a hold. Its progress writes (every few seconds while it streams) wake no cluster.
func backupPhaseChanged() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			return backupPhase(e.ObjectOld) != backupPhase(e.ObjectNew)
		},
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}

// backupPhase is a watched backup's status.phase ("" for an object of another type).
func backupPhase(o client.Object) string {
	u, ok := o.(*unstructured.Unstructured)
	if !ok {
		return ""
	}
	return views.Backup{U: u}.Status().Phase
}
