// Package series names the operator's own Prometheus series (docs/metrics.md). It imports
// nothing, so that hack/promqlcheck, which checks the example dashboard and alert rules
// against the names and lives in a module of its own (Prometheus's PromQL parser would
// otherwise join the operator's dependency graph), can take the list from the operator's
// code without compiling the operator.
package series

// The series package metrics registers; every cluster series is labelled namespace and
// cluster.
const (
	ClusterState            = "valkey_cluster_state"
	ShardsDesired           = "valkey_cluster_shards_desired"
	ReplicasPerShardDesired = "valkey_cluster_replicas_per_shard_desired"
	Nodes                   = "valkey_cluster_nodes"
	NodesReady              = "valkey_cluster_nodes_ready"
	SlotsAssigned           = "valkey_cluster_slots_assigned"
	CertNotAfter            = "valkey_cluster_tls_certificate_not_after_timestamp_seconds"
	BackupLastSuccess       = "valkey_backup_last_success_timestamp_seconds"
	BackupScheduled         = "valkey_backup_scheduled"
	TopologyActions         = "valkey_cluster_topology_actions_total"
	SlotsMoved              = "valkey_cluster_slots_moved_total"
	KeysMoved               = "valkey_cluster_keys_moved_total"
	ReconcileErrors         = "valkey_operator_reconcile_errors_total"
)

// All lists every name above; a test in package metrics holds it equal to what the
// operator registers.
func All() []string {
	return []string{
		ClusterState, ShardsDesired, ReplicasPerShardDesired, Nodes, NodesReady, SlotsAssigned,
		CertNotAfter, BackupLastSuccess, BackupScheduled, TopologyActions, SlotsMoved, KeysMoved,
		ReconcileErrors,
	}
}
