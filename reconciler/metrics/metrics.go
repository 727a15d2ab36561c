// Package metrics is the operator's own series on its metrics endpoint, beside
// controller-runtime's (reconcile counts and times, work queue depth): what each cluster is
// (state, desired and ready size, nodes per lifecycle, slots assigned, certificate expiry)
// and what the operator did to it (topology actions by kind and outcome, errors by step).
// Every cluster series is labelled namespace and cluster and is dropped when the cluster is
// deleted.
package metrics

import (
	"errors"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gomomento/valkey-operator/reconciler"
	"github.com/gomomento/valkey-operator/reconciler/backup"
	"github.com/gomomento/valkey-operator/reconciler/metrics/series"
	"github.com/gomomento/valkey-operator/reconciler/views"
	"github.com/gomomento/valkey-operator/valkeyops"
)

// States are the values of valkey_cluster_state's state label.
var States = []string{views.StateCreating, views.StateInvalid, views.StateActive}

// Lifecycles are the values of valkey_cluster_nodes' lifecycle label.
var Lifecycles = []string{views.LifecycleJoining, views.LifecycleActive, views.LifecycleLeaving}

// Recorder implements reconciler.Metrics.
type Recorder struct {
	state, shards, replicas, nodes, ready, slots, certExpiry *prometheus.GaugeVec
	lastBackup                                               *prometheus.GaugeVec
	backupsMu                                                sync.Mutex
	latestBackup                                             map[types.NamespacedName]time.Time
	actions, slotsMoved, keysMoved                           *prometheus.CounterVec
	stepErrors                                               *prometheus.CounterVec
	backupScheduled                                          *prometheus.GaugeVec
	clusterVecs                                              []interface {
		DeletePartialMatch(prometheus.Labels) int
	}
}

var (
	_ reconciler.Metrics     = (*Recorder)(nil)
	_ backup.Metrics         = (*Recorder)(nil)
	_ backup.ScheduleMetrics = (*Recorder)(nil)
)

// New registers the series with reg.
func New(reg prometheus.Registerer) (*Recorder, error) {
	cl := []string{"namespace", "cluster"}
	gauge := func(name, help string, extra ...string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, append(append([]string(nil), cl...), extra...))
	}
	r := &Recorder{
		state:        gauge(series.ClusterState, "1 for the cluster's state (Creating, Invalid, Active), 0 for the others.", "state"),
		shards:       gauge(series.ShardsDesired, "spec.shards."),
		replicas:     gauge(series.ReplicasPerShardDesired, "spec.replicasPerShard."),
		nodes:        gauge(series.Nodes, "ValkeyNodes by lifecycle (Joining, Active, Leaving).", "lifecycle"),
		ready:        gauge(series.NodesReady, "ValkeyNodes whose pods are ready."),
		slots:        gauge(series.SlotsAssigned, "Slots assigned as the servers see them (16384 when the cluster serves every slot)."),
		certExpiry:   gauge(series.CertNotAfter, "When the cluster's TLS certificate expires (Unix time); absent without TLS."),
		lastBackup:   gauge(series.BackupLastSuccess, "When the cluster's latest ValkeyBackup completed (Unix time); absent until one has."),
		latestBackup: map[types.NamespacedName]time.Time{},
		actions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: series.TopologyActions,
			Help: "Topology actions on Active clusters by kind (CreateNodes, Replicate, Failover, ForceFailover, Takeover, Rebalance, MarkLeaving, Remove, Forget, Delete, ...) and result (ok, failed)."},
			append(append([]string(nil), cl...), "action", "result")),
		slotsMoved: prometheus.NewCounterVec(prometheus.CounterOpts{Name: series.SlotsMoved,
			Help: "Slots whose ownership the operator moved to another primary (scaling, draining a leaving primary, rebalancing)."}, cl),
		keysMoved: prometheus.NewCounterVec(prometheus.CounterOpts{Name: series.KeysMoved,
			Help: "Keys carried with the moved slots."}, cl),
		stepErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: series.ReconcileErrors,
			Help: "Reconcile passes that ended in an error, by the step that failed."}, []string{"step"}),
	}
	r.backupScheduled = gauge(series.BackupScheduled, "1 while the cluster has a backup schedule that is not suspended, 0 otherwise.")
	for _, c := range []prometheus.Collector{r.state, r.shards, r.replicas, r.nodes, r.ready, r.slots, r.certExpiry, r.lastBackup, r.backupScheduled, r.actions, r.slotsMoved, r.keysMoved, r.stepErrors} {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if !errors.As(err, &are) {
				return nil, err
			}
		}
	}
	r.clusterVecs = append(r.clusterVecs, r.state, r.shards, r.replicas, r.nodes, r.ready, r.slots, r.certExpiry, r.lastBackup, r.backupScheduled, r.actions, r.slotsMoved, r.keysMoved)
	return r, nil
}

// ReconcileDone counts a pass that ended in an error by the step that ended it.
func (r *Recorder) ReconcileDone(_ types.NamespacedName, endedAt string, _ time.Duration, err error) {
	if err != nil {
		if endedAt == "" {
			endedAt = "load"
		}
		r.stepErrors.WithLabelValues(endedAt).Inc()
	}
}

// ClusterSeen sets the cluster's gauges from what a pass saw; what it did not look at keeps
// its last value.
func (r *Recorder) ClusterSeen(c types.NamespacedName, rep reconciler.ClusterReport) {
	ns, name := c.Namespace, c.Name
	for _, s := range States {
		v := 0.0
		if s == rep.State {
			v = 1
		}
		r.state.WithLabelValues(ns, name, s).Set(v)
	}
	r.shards.WithLabelValues(ns, name).Set(float64(rep.Shards))
	r.replicas.WithLabelValues(ns, name).Set(float64(rep.ReplicasPerShard))
	if rep.Nodes != nil {
		for _, l := range Lifecycles {
			r.nodes.WithLabelValues(ns, name, l).Set(float64(rep.Nodes[l]))
		}
	}
	if rep.ReadyNodes >= 0 {
		r.ready.WithLabelValues(ns, name).Set(float64(rep.ReadyNodes))
	}
	if rep.SlotsAssigned >= 0 {
		r.slots.WithLabelValues(ns, name).Set(float64(rep.SlotsAssigned))
	}
	if rep.CertNotAfter.IsZero() {
		r.certExpiry.DeleteLabelValues(ns, name)
	} else {
		r.certExpiry.WithLabelValues(ns, name).Set(float64(rep.CertNotAfter.Unix()))
	}
}

// ActionDone counts a topology action.
func (r *Recorder) ActionDone(c types.NamespacedName, kind string, err error) {
	result := "ok"
	if err != nil {
		result = "failed"
	}
	r.actions.WithLabelValues(c.Namespace, c.Name, kind, result).Inc()
}

// Moved counts what one slot move carried.
func (r *Recorder) Moved(c types.NamespacedName, moved valkeyops.MoveStats) {
	r.slotsMoved.WithLabelValues(c.Namespace, c.Name).Add(float64(moved.Slots))
	r.keysMoved.WithLabelValues(c.Namespace, c.Name).Add(float64(moved.Keys))
}

// BackupCompleted moves the cluster's latest-backup time forward to at (never back: an
// older backup reconciled after a newer one leaves it).
func (r *Recorder) BackupCompleted(namespace, cluster string, at time.Time) {
	key := types.NamespacedName{Namespace: namespace, Name: cluster}
	r.backupsMu.Lock()
	defer r.backupsMu.Unlock()
	if !at.After(r.latestBackup[key]) {
		return
	}
	r.latestBackup[key] = at
	r.lastBackup.WithLabelValues(namespace, cluster).Set(float64(at.Unix()))
}

// BackupScheduled sets whether the cluster has a backup schedule that is not suspended.
func (r *Recorder) BackupScheduled(namespace, cluster string, scheduled bool) {
	v := 0.0
	if scheduled {
		v = 1
	}
	r.backupScheduled.WithLabelValues(namespace, cluster).Set(v)
}

// ClusterGone drops every series of the cluster.
func (r *Recorder) ClusterGone(c types.NamespacedName) {
	r.backupsMu.Lock()
	delete(r.latestBackup, c)
	r.backupsMu.Unlock()
	for _, v := range r.clusterVecs {
		v.DeletePartialMatch(prometheus.Labels{"namespace": c.Namespace, "cluster": c.Name})
	}
}
