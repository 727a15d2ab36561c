package metrics

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gomomento/valkey-operator/reconciler"
	"github.com/gomomento/valkey-operator/reconciler/metrics/series"
	"github.com/gomomento/valkey-operator/valkeyops"
)

func TestRecorder(t *testing.T) {
	reg := prometheus.NewRegistry()
	r, err := New(reg)
	require.NoError(t, err)
	a := types.NamespacedName{Namespace: "ns", Name: "a"}
	b := types.NamespacedName{Namespace: "ns", Name: "b"}
	expiry := time.Date(2027, 1, 2, 3, 4, 5, 0, time.UTC)

	r.ClusterSeen(a, reconciler.ClusterReport{State: "Active", Shards: 3, ReplicasPerShard: 1,
		Nodes: map[string]int{"Active": 6, "Joining": 1}, ReadyNodes: 7, SlotsAssigned: 16384, CertNotAfter: expiry})
	r.ClusterSeen(b, reconciler.ClusterReport{State: "Invalid", Shards: 1, ReadyNodes: -1, SlotsAssigned: -1})
	r.ActionDone(a, "Failover", nil)
	r.ActionDone(a, "Failover", nil)
	r.ActionDone(a, "Replicate", errors.New("refused"))
	r.Moved(a, valkeyops.MoveStats{Slots: 4096, Keys: 25000})
	r.Moved(a, valkeyops.MoveStats{Slots: 10, Keys: 3})
	r.ReconcileDone(a, "observe", time.Second, errors.New("boom"))
	r.ReconcileDone(a, "", time.Second, nil)

	assert.Equal(t, 1.0, testutil.ToFloat64(r.state.WithLabelValues("ns", "a", "Active")))
	assert.Equal(t, 0.0, testutil.ToFloat64(r.state.WithLabelValues("ns", "a", "Creating")))
	assert.Equal(t, 1.0, testutil.ToFloat64(r.state.WithLabelValues("ns", "b", "Invalid")))
	assert.Equal(t, 3.0, testutil.ToFloat64(r.shards.WithLabelValues("ns", "a")))
	assert.Equal(t, 6.0, testutil.ToFloat64(r.nodes.WithLabelValues("ns", "a", "Active")))
	assert.Equal(t, 1.0, testutil.ToFloat64(r.nodes.WithLabelValues("ns", "a", "Joining")))
	assert.Equal(t, 0.0, testutil.ToFloat64(r.nodes.WithLabelValues("ns", "a", "Leaving")))
	assert.Equal(t, 7.0, testutil.ToFloat64(r.ready.WithLabelValues("ns", "a")))
	assert.Equal(t, 16384.0, testutil.ToFloat64(r.slots.WithLabelValues("ns", "a")))
	assert.Equal(t, float64(expiry.Unix()), testutil.ToFloat64(r.certExpiry.WithLabelValues("ns", "a")))
	assert.Equal(t, 2.0, testutil.ToFloat64(r.actions.WithLabelValues("ns", "a", "Failover", "ok")))
	assert.Equal(t, 1.0, testutil.ToFloat64(r.actions.WithLabelValues("ns", "a", "Replicate", "failed")))
	assert.Equal(t, 1.0, testutil.ToFloat64(r.stepErrors.WithLabelValues("observe")))
	assert.Equal(t, 4106.0, testutil.ToFloat64(r.slotsMoved.WithLabelValues("ns", "a")))
	assert.Equal(t, 25003.0, testutil.ToFloat64(r.keysMoved.WithLabelValues("ns", "a")))

	// What a pass did not look at (b is Invalid: no nodes, no servers) has no series.
	text := gathered(t, reg)
	assert.NotContains(t, text, `valkey_cluster_nodes{cluster="b"`)
	assert.NotContains(t, text, `valkey_cluster_slots_assigned{cluster="b"`)
	assert.NotContains(t, text, `valkey_cluster_tls_certificate_not_after_timestamp_seconds{cluster="b"`)

	r.ClusterGone(a)
	text = gathered(t, reg)
	assert.NotContains(t, text, `cluster="a"`, "a deleted cluster's series are dropped")
	assert.Contains(t, text, `valkey_cluster_state{cluster="b",namespace="ns",state="Invalid"}`)
	assert.Contains(t, text, `valkey_operator_reconcile_errors_total{step="observe"}`)
}

// gathered lists every series of reg as name{label="value",...} (labels sorted by name).
func gathered(t *testing.T, reg *prometheus.Registry) string {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	var b strings.Builder
	for _, f := range families {
		for _, m := range f.GetMetric() {
			var pairs []string
			for _, l := range m.GetLabel() {
				pairs = append(pairs, l.GetName()+`="`+l.GetValue()+`"`)
			}
			b.WriteString(f.GetName() + "{" + strings.Join(pairs, ",") + "}\n")
		}
	}
	return b.String()
}

// TestSeriesListed: series.All, the list hack/promqlcheck checks the example dashboard and
// alert rules against, is exactly what the operator serves once every method has run, so a
// series renamed or added here cannot leave a panel or an alert silently dead or unchecked.
func TestSeriesListed(t *testing.T) {
	reg := prometheus.NewRegistry()
	r, err := New(reg)
	require.NoError(t, err)
	c := types.NamespacedName{Namespace: "ns", Name: "c"}
	r.ClusterSeen(c, reconciler.ClusterReport{State: "Active", Nodes: map[string]int{}, CertNotAfter: time.Now()})
	r.ActionDone(c, "Failover", nil)
	r.Moved(c, valkeyops.MoveStats{Slots: 1})
	r.ReconcileDone(c, "observe", 0, errors.New("x"))
	r.BackupCompleted(c.Namespace, c.Name, time.Now())
	r.BackupScheduled(c.Namespace, c.Name, true)
	families, err := reg.Gather()
	require.NoError(t, err)
	var served []string
	for _, f := range families {
		served = append(served, f.GetName())
	}
	assert.ElementsMatch(t, series.All(), served)
}

// TestLatestBackupOnlyMovesForward: the last-success time is the newest completed backup's,
// whatever order backups are reconciled in (an operator start reconciles them all), and it
// goes with its cluster.
func TestLatestBackupOnlyMovesForward(t *testing.T) {
	reg := prometheus.NewRegistry()
	r, err := New(reg)
	require.NoError(t, err)
	c := types.NamespacedName{Namespace: "ns", Name: "c"}
	newer, older := time.Unix(2_000_000_000, 0), time.Unix(1_900_000_000, 0)
	r.BackupCompleted("ns", "c", newer)
	r.BackupCompleted("ns", "c", older)
	assert.Equal(t, float64(newer.Unix()), testutil.ToFloat64(r.lastBackup.WithLabelValues("ns", "c")))
	r.ClusterGone(c)
	assert.Zero(t, testutil.CollectAndCount(r.lastBackup), "no series for a deleted cluster")
	r.BackupCompleted("ns", "c", older)
	assert.Equal(t, float64(older.Unix()), testutil.ToFloat64(r.lastBackup.WithLabelValues("ns", "c")), "a cluster made again under the name starts over")
}

// TestBackupScheduled: the series says whether a schedule runs (1) or is absent or
// suspended (0), follows the latest report, and goes with its cluster.
func TestBackupScheduled(t *testing.T) {
	reg := prometheus.NewRegistry()
	r, err := New(reg)
	require.NoError(t, err)
	c := types.NamespacedName{Namespace: "ns", Name: "c"}
	for _, tc := range []struct {
		name      string
		scheduled bool
		want      float64
	}{
		{"a schedule set", true, 1},
		{"suspended or removed", false, 0},
		{"resumed", true, 1},
	} {
		r.BackupScheduled(c.Namespace, c.Name, tc.scheduled)
		assert.Equal(t, tc.want, testutil.ToFloat64(r.backupScheduled.WithLabelValues("ns", "c")), tc.name)
	}
	r.ClusterGone(c)
	assert.Zero(t, testutil.CollectAndCount(r.backupScheduled), "no series for a deleted cluster")
}
