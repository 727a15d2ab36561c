// The scheduler: a controller of its own on ValkeyClusters that turns spec.backup.schedule
// into ValkeyBackups and prunes the scheduled ones beyond spec.backup.keep.
//
// It is keyed by cluster, where the backup controller is keyed by backup, so it has its own
// work queue; it shares the backup controller's clients, Recorder and store access, and is
// registered by Setup beside it. It wakes on the cluster's changes, on its scheduled
// backups' changes (a run completing is what prunes) and at the next due time
// (RequeueAfter); nothing polls.

package backup

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/gomomento/valkey-operator/reconciler/render"
	"github.com/gomomento/valkey-operator/reconciler/views"
)

// SchedulerName names the scheduler's controller (metrics, logs).
const SchedulerName = "valkeybackup-schedule"

// Event reasons of the schedule, on the ValkeyCluster.
const (
	ReasonScheduleInvalid = "BackupScheduleInvalid"
	ReasonSkipped         = "BackupSkipped"
	ReasonScheduled       = "BackupScheduled"
	ReasonPruned          = "BackupPruned"
	ReasonPruneFailed     = "BackupPruneFailed"
)

// ScheduleMetrics is what the scheduler reports, when Options.Metrics implements it too:
// whether a cluster has a schedule that is not suspended.
type ScheduleMetrics interface {
	BackupScheduled(namespace, cluster string, scheduled bool)
}

// pruneRetry is how soon a prune that failed (the store unreachable, a Secret gone) is tried
// again, unless the next run is due sooner.
const pruneRetry = 30 * time.Second

// Scheduler reconciles ValkeyClusters' backup schedules.
type Scheduler struct {
	c   *Controller
	now func() time.Time

	mu sync.Mutex
	// skipped is the due time last skipped per cluster: skipped runs are not made later.
	skipped map[types.NamespacedName]time.Time
	// invalid is the schedule last reported invalid per cluster, so the Warning is given
	// once per schedule written, not once per pass.
	invalid map[types.NamespacedName]string
}

func setupScheduler(mgr ctrl.Manager, c *Controller, skipNameValidation bool) error {
	s := &Scheduler{c: c, now: time.Now, skipped: map[types.NamespacedName]time.Time{}, invalid: map[types.NamespacedName]string{}}
	return ctrl.NewControllerManagedBy(mgr).
		Named(SchedulerName).
		For(views.NewClusterObject()).
		Watches(views.NewBackupObject(), handler.EnqueueRequestsFromMapFunc(scheduledToCluster),
			builder.WithPredicates(predicate.NewPredicateFuncs(isScheduled))).
		WithOptions(controller.Options{MaxConcurrentReconciles: 1, SkipNameValidation: ptr.To(skipNameValidation)}).
		Complete(s)
}

func isScheduled(o client.Object) bool { return o.GetLabels()[LabelScheduled] == "true" }

// scheduledToCluster wakes the cluster of a scheduled backup.
func scheduledToCluster(_ context.Context, o client.Object) []reconcile.Request {
	cluster := o.GetLabels()[render.LabelCluster]
	if cluster == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: cluster}}}
}

// Reconcile prunes what keep no longer retains, then makes or skips the run due now, and
// comes back at the next due time.
func (s *Scheduler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	cluster := views.Cluster{U: views.NewClusterObject()}
	if err := s.c.client.Get(ctx, req.NamespacedName, cluster.U); err != nil {
		if apierrors.IsNotFound(err) {
			s.forget(req.NamespacedName)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	if cluster.U.GetDeletionTimestamp() != nil {
		return ctrl.Result{}, nil
	}
	spec := cluster.Backup()
	s.reportScheduled(req.NamespacedName, spec != nil && !spec.Suspend)
	if spec == nil {
		s.forget(req.NamespacedName)
		return ctrl.Result{}, nil
	}
	sched, err := ParseSchedule(spec.Schedule)
	if err != nil {
		s.reportInvalid(cluster, req.NamespacedName, spec.Schedule, err)
		return ctrl.Result{}, nil
	}
	s.mu.Lock()
	delete(s.invalid, req.NamespacedName)
	s.mu.Unlock()

	runs, byName, err := s.runs(ctx, req.NamespacedName)
	if err != nil {
		return ctrl.Result{}, err
	}
	pruneErr := s.prune(ctx, cluster, ToPrune(runs, spec.KeepOrDefault()), byName, spec.KeepOrDefault())
	if spec.Suspend {
		return ctrl.Result{}, nil
	}

	now := s.now().UTC()
	s.mu.Lock()
	skipped := s.skipped[req.NamespacedName]
	s.mu.Unlock()
	d := Decide(sched, Inputs{Cluster: req.Name, Created: cluster.U.GetCreationTimestamp().Time, State: cluster.Status().State,
		Runs: runs, Now: now, Skipped: skipped})
	switch {
	case d.Skip != "":
		s.mu.Lock()
		s.skipped[req.NamespacedName] = d.Due
		s.mu.Unlock()
		var related *unstructured.Unstructured
		if b, ok := byName[d.SkippedFor]; ok {
			related = b.U
		}
		s.event(cluster, related, corev1.EventTypeNormal, ReasonSkipped, "Schedule", "the run due at %s is skipped: %s", d.Due.Format(time.RFC3339), d.Skip)
	case d.Create != "":
		if err := s.create(ctx, cluster, d.Create, spec.Storage); err != nil {
			return ctrl.Result{}, err
		}
	}
	after := d.Next.Sub(now)
	if after < time.Second {
		after = time.Second
	}
	if pruneErr != nil && after > pruneRetry {
		after = pruneRetry
	}
	return ctrl.Result{RequeueAfter: after}, nil
}

// runs lists the cluster's scheduled backups: labelled scheduled and with the cluster, of
// that cluster, and named after a due time. Anything else is a backup made by hand.
func (s *Scheduler) runs(ctx context.Context, key types.NamespacedName) ([]Run, map[string]views.Backup, error) {
	l := views.NewBackupListObject()
	if err := s.c.client.List(ctx, l, client.InNamespace(key.Namespace),
		client.MatchingLabels{render.LabelCluster: key.Name, LabelScheduled: "true"}); err != nil {
		return nil, nil, err
	}
	var runs []Run
	byName := map[string]views.Backup{}
	for i := range l.Items {
		b := views.Backup{U: &l.Items[i]}
		if b.Spec().Cluster != key.Name || b.U.GetDeletionTimestamp() != nil {
			continue
		}
		due, ok := RunTime(key.Name, b.U.GetName())
		if !ok {
			continue
		}
		runs = append(runs, Run{Name: b.U.GetName(), Due: due, Phase: b.Status().Phase})
		byName[b.U.GetName()] = b
	}
	return runs, byName, nil
}

// create makes the scheduled backup name of cluster, labelled with its cluster and as
// scheduled, and with no owner: deleting the cluster keeps its backups. AlreadyExists is
// success: that run was made already (by this process before a restart, or another).
func (s *Scheduler) create(ctx context.Context, cluster views.Cluster, name string, storage views.BackupStorage) error {
	b := views.Backup{U: views.NewBackupObject()}
	b.U.SetNamespace(cluster.U.GetNamespace())
	b.U.SetName(name)
	b.U.SetLabels(map[string]string{render.LabelCluster: cluster.U.GetName(), LabelScheduled: "true"})
	b.SetSpec(views.BackupSpec{Cluster: cluster.U.GetName(), Storage: storage})
	if err := s.c.client.Create(ctx, b.U); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return fmt.Errorf("creating the scheduled backup %s: %w", name, err)
	}
	s.event(cluster, b.U, corev1.EventTypeNormal, ReasonScheduled, "Schedule", "created the scheduled backup %s", name)
	return nil
}

func (s *Scheduler) reportInvalid(cluster views.Cluster, key types.NamespacedName, schedule string, err error) {
	s.mu.Lock()
	seen := s.invalid[key] == schedule
	s.invalid[key] = schedule
	s.mu.Unlock()
	if !seen {
		s.event(cluster, nil, corev1.EventTypeWarning, ReasonScheduleInvalid, "Schedule", "%s; no backup is scheduled until spec.backup.schedule is fixed", err.Error())
	}
}

func (s *Scheduler) reportScheduled(key types.NamespacedName, on bool) {
	if m, ok := s.c.opts.Metrics.(ScheduleMetrics); ok {
		m.BackupScheduled(key.Namespace, key.Name, on)
	}
}

func (s *Scheduler) forget(key types.NamespacedName) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.skipped, key)
	delete(s.invalid, key)
}

// event records an Event on the cluster, related to the backup it is about (nil: none).
// The related object also keeps Events apart: the recorder folds Events that differ only in
// their note into one series, which would hide every pruned backup's name but the first.
func (s *Scheduler) event(cluster views.Cluster, related *unstructured.Unstructured, eventType, reason, action, format string, args ...any) {
	if s.c.opts.Recorder == nil {
		return
	}
	if related == nil {
		s.c.opts.Recorder.Eventf(cluster.U, nil, eventType, reason, action, format, args...)
		return
	}
	s.c.opts.Recorder.Eventf(cluster.U, related, eventType, reason, action, format, args...)
}

// deleteBackup deletes b only if it is still the object that was pruned (same UID).
func (s *Scheduler) deleteBackup(ctx context.Context, b views.Backup) error {
	err := s.c.client.Delete(ctx, b.U, client.Preconditions{UID: ptr.To(b.U.GetUID())}, client.PropagationPolicy(metav1.DeletePropagationBackground))
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
