package reconciler

import (
	"context"
	"testing"

	"github.com/go-logr/logr"
	"github.com/gomomento/valkey-operator/crds"
	"github.com/gomomento/valkey-operator/reconciler/views"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// TestRunningBackup: the planner's BackupRunning names a Running ValkeyBackup of the pass's
// cluster, and nothing for another cluster's, another namespace's, or a Pending, Completed or
// Failed one; a backup wakes its cluster when it is created or changes phase, not on its
// progress writes.
func TestRunningBackup(t *testing.T) {
	scheme := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(scheme))
	scheme.AddKnownTypeWithName(crds.GVK(crds.KindBackup), &unstructured.Unstructured{})
	scheme.AddKnownTypeWithName(crds.GVK(crds.KindBackup+"List"), &unstructured.UnstructuredList{})
	backup := func(ns, name, cluster, phase string, bytes int64) *unstructured.Unstructured {
		b := views.Backup{U: views.NewBackupObject()}
		b.U.SetNamespace(ns)
		b.U.SetName(name)
		b.SetSpec(views.BackupSpec{Cluster: cluster})
		b.SetStatus(views.BackupStatus{Phase: phase, Bytes: bytes})
		return b.U
	}
	pass := func(ns, name string) *pass {
		return &pass{key: types.NamespacedName{Namespace: ns, Name: name}, log: logr.Discard()}
	}
	ctx := context.Background()

	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(
		backup("ns1", "old", "c1", views.BackupCompleted, 10), backup("ns1", "bad", "c1", views.BackupFailed, 0),
		backup("ns1", "next", "c1", views.BackupPending, 0), backup("ns1", "other", "c2", views.BackupRunning, 0),
		backup("ns2", "elsewhere", "c1", views.BackupRunning, 0),
	).Build()
	r := New(c, nil, Options{})
	assert.Empty(t, r.runningBackup(ctx, pass("ns1", "c1")), "none of c1's backups in ns1 runs")
	assert.Equal(t, "other", r.runningBackup(ctx, pass("ns1", "c2")))
	assert.Equal(t, "elsewhere", r.runningBackup(ctx, pass("ns2", "c1")))
	require.NoError(t, c.Create(ctx, backup("ns1", "now", "c1", views.BackupRunning, 0)))
	assert.Equal(t, "now", r.runningBackup(ctx, pass("ns1", "c1")))

	assert.Equal(t, []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: "ns1", Name: "c1"}}},
		backupToCluster(ctx, backup("ns1", "now", "c1", views.BackupRunning, 0)))
	p := backupPhaseChanged()
	assert.True(t, p.Create(event.CreateEvent{Object: backup("ns1", "now", "c1", views.BackupPending, 0)}))
	assert.True(t, p.Update(event.UpdateEvent{ObjectOld: backup("ns1", "now", "c1", views.BackupPending, 0), ObjectNew: backup("ns1", "now", "c1", views.BackupRunning, 0)}))
	assert.True(t, p.Update(event.UpdateEvent{ObjectOld: backup("ns1", "now", "c1", views.BackupRunning, 5), ObjectNew: backup("ns1", "now", "c1", views.BackupCompleted, 9)}))
	assert.False(t, p.Update(event.UpdateEvent{ObjectOld: backup("ns1", "now", "c1", views.BackupRunning, 5), ObjectNew: backup("ns1", "now", "c1", views.BackupRunning, 9)}), "progress wakes no cluster")
	assert.True(t, p.Delete(event.DeleteEvent{Object: backup("ns1", "now", "c1", views.BackupRunning, 0)}))
}
