//go:build envtest

package backup

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/gomomento/valkey-operator/internal/poll"
	"github.com/gomomento/valkey-operator/internal/testenv"
	"github.com/gomomento/valkey-operator/reconciler/render"
	"github.com/gomomento/valkey-operator/reconciler/views"
)

// scheduledFlag records what the scheduler reports to metrics.
type scheduledFlag struct{ on map[string]bool }

func (f *scheduledFlag) BackupCompleted(string, string, time.Time) {}
func (f *scheduledFlag) BackupScheduled(ns, cluster string, on bool) {
	f.on[ns+"/"+cluster] = on
}

// TestSchedulerOnAPIServer runs the backup controller and its scheduler against a real
// kube-apiserver (no object store and no Valkey: the runs it makes fail at their missing
// storage Secret, which the schedule does not wait on). A schedule the cron parser refuses is
// reported and makes nothing; a due run while the cluster is not Active is skipped with an
// Event; once Active, each due time makes a ValkeyBackup named after it, labelled, with the
// storage copied and no owner; suspend stops the runs.
func TestSchedulerOnAPIServer(t *testing.T) {
	env := testenv.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	k8s, err := client.New(env.Config, client.Options{Scheme: clientgoscheme.Scheme})
	require.NoError(t, err)
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme: clientgoscheme.Scheme, Metrics: metricsserver.Options{BindAddress: "0"},
		Client: client.Options{Cache: &client.CacheOptions{Unstructured: true}},
	})
	require.NoError(t, err)
	flag := &scheduledFlag{on: map[string]bool{}}
	require.NoError(t, Setup(ctx, mgr, Options{Recorder: mgr.GetEventRecorder("valkey-operator"), Metrics: flag}, true))
	go func() { _ = mgr.Start(ctx) }()

	const ns, name = "default", "sched"
	c := views.Cluster{U: views.NewClusterObject()}
	c.U.SetNamespace(ns)
	c.U.SetName(name)
	c.SetConfigRef("standard")
	c.SetShards(1)
	keep := 2
	storage := views.BackupStorage{Endpoint: "http://127.0.0.1:1", Bucket: "backups", Prefix: "p", CredentialsSecret: views.SecretRef{Name: "absent"}}
	c.SetBackup(&views.BackupSchedule{Schedule: "0 5-1 * * *", Keep: &keep, Storage: storage})
	require.NoError(t, k8s.Create(ctx, c.U))
	key := types.NamespacedName{Namespace: ns, Name: name}

	reasons := func() string {
		l := &eventsv1.EventList{}
		require.NoError(t, k8s.List(ctx, l, client.InNamespace(ns)))
		var out []string
		for _, e := range l.Items {
			if e.Regarding.Kind == "ValkeyCluster" && e.Regarding.Name == name {
				out = append(out, e.Reason+": "+e.Note)
			}
		}
		return strings.Join(out, "\n")
	}
	runs := func() []views.Backup {
		l := views.NewBackupListObject()
		require.NoError(t, k8s.List(ctx, l, client.InNamespace(ns), client.MatchingLabels{LabelScheduled: "true"}))
		var out []views.Backup
		for i := range l.Items {
			out = append(out, views.Backup{U: &l.Items[i]})
		}
		return out
	}
	wait := func(what string, timeout time.Duration, cond func() (bool, string)) {
		t.Helper()
		require.NoError(t, poll.Until(ctx, 100*time.Millisecond, timeout, what, func(context.Context) (bool, string, error) {
			ok, status := cond()
			return ok, status, nil
		}))
	}
	patchBackup := func(edit func(*views.BackupSchedule)) {
		t.Helper()
		cur := views.Cluster{U: views.NewClusterObject()}
		require.NoError(t, k8s.Get(ctx, key, cur.U))
		b := *cur.Backup()
		edit(&b)
		cur.SetBackup(&b)
		require.NoError(t, k8s.Update(ctx, cur.U))
	}

	wait("BackupScheduleInvalid", 20*time.Second, func() (bool, string) {
		r := reasons()
		return strings.Contains(r, ReasonScheduleInvalid), r
	})
	assert.Contains(t, reasons(), `"0 5-1 * * *"`)
	assert.Empty(t, runs(), "an invalid schedule makes nothing")

	// Due every 2 s while the cluster has no state yet: skipped, with the reason.
	patchBackup(func(b *views.BackupSchedule) { b.Schedule = "@every 2s" })
	wait("BackupSkipped", 20*time.Second, func() (bool, string) {
		r := reasons()
		return strings.Contains(r, ReasonSkipped+": ") && strings.Contains(r, "not Active"), r
	})
	assert.Empty(t, runs(), "no run while the cluster is not Active")
	assert.True(t, flag.on[ns+"/"+name])

	// Active: runs are made at the due times, named after them.
	cur := views.Cluster{U: views.NewClusterObject()}
	require.NoError(t, k8s.Get(ctx, key, cur.U))
	st := cur.Status()
	st.State = views.StateActive
	cur.SetStatus(st)
	require.NoError(t, k8s.Status().Update(ctx, cur.U))
	wait("two scheduled runs", 30*time.Second, func() (bool, string) {
		n := len(runs())
		return n >= 2, fmt.Sprintf("%d runs", n)
	})
	created := cur.U.GetCreationTimestamp().Time
	for _, b := range runs() {
		due, ok := RunTime(name, b.U.GetName())
		require.True(t, ok, b.U.GetName())
		assert.Zero(t, due.Sub(created.UTC())%(2*time.Second), "%s: a due time of @every 2s from the creation", b.U.GetName())
		assert.Equal(t, name, b.U.GetLabels()[render.LabelCluster])
		assert.Empty(t, b.U.GetOwnerReferences(), "not owned by the cluster")
		assert.Equal(t, views.BackupSpec{Cluster: name, Storage: storage}, b.Spec())
	}
	assert.Contains(t, reasons(), ReasonScheduled)

	// Suspended: no new run over several intervals (a bounded wait asserting an absence).
	patchBackup(func(b *views.BackupSchedule) { b.Suspend = true })
	wait("reported suspended", 10*time.Second, func() (bool, string) { return !flag.on[ns+"/"+name], "" })
	before := map[string]bool{}
	for _, b := range runs() {
		before[b.U.GetName()] = true
	}
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		for _, b := range runs() {
			require.True(t, before[b.U.GetName()], "run %s made while suspended", b.U.GetName())
		}
	}

	// keep on Failed runs (pruning goes on while suspended): each failed before it started
	// (no Secret), so it wrote nothing, and goes once keep newer scheduled backups completed.
	// Two later runs are marked Completed here by hand, as the store they would need is absent.
	failed := len(before)
	for i := 1; i <= keep; i++ {
		b := views.Backup{U: views.NewBackupObject()}
		b.U.SetNamespace(ns)
		b.U.SetName(RunName(name, time.Now().Add(time.Duration(i)*time.Hour)))
		b.U.SetLabels(map[string]string{render.LabelCluster: name, LabelScheduled: "true"})
		b.SetSpec(views.BackupSpec{Cluster: name, Storage: storage})
		require.NoError(t, k8s.Create(ctx, b.U))
		patch := client.MergeFrom(b.U.DeepCopy())
		b.SetStatus(views.BackupStatus{Phase: views.BackupCompleted, CompletedAt: time.Now().UTC().Format(time.RFC3339)})
		require.NoError(t, k8s.Status().Patch(ctx, b.U, patch))
	}
	wait("the Failed runs pruned", 20*time.Second, func() (bool, string) {
		var left []string
		for _, b := range runs() {
			left = append(left, b.U.GetName()+" "+b.Status().Phase)
		}
		return len(left) == keep && !strings.Contains(strings.Join(left, ","), views.BackupFailed), strings.Join(left, ", ")
	})
	wait("one BackupPruned per Failed run, each naming it", 10*time.Second, func() (bool, string) {
		r := reasons()
		return strings.Count(r, ReasonPruned+": ") == failed, r
	})
	before = map[string]bool{}
	for _, b := range runs() {
		before[b.U.GetName()] = true
	}

	// Deleting the cluster keeps its runs (nothing owns them).
	require.NoError(t, k8s.Delete(ctx, c.U))
	wait("cluster gone", 20*time.Second, func() (bool, string) {
		err := k8s.Get(ctx, key, views.NewClusterObject())
		return err != nil, ""
	})
	assert.Len(t, runs(), len(before))
	var made []string
	for _, b := range runs() {
		made = append(made, b.U.GetName()+" "+b.Status().Phase)
	}
	t.Logf("runs made (created %s): %v", created.UTC().Format(time.RFC3339), made)
}
