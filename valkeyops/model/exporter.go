package model

// ExporterUser is the ACL user the metrics exporter sidecar (ValkeyConfig spec.exporter)
// logs in to its own node's server as. It may read only the statistics the exporter turns
// into metrics (exporterAccess): no key, no channel, no configuration, no command
// arguments. It exists on every cluster, whether or not its nodes run the exporter, so
// turning the exporter on or off (a rolling replacement) never needs an ACL change, and
// nodes with and without it can serve side by side during that roll; with no exporter
// running, nobody holds its password but the auth Secret.
const ExporterUser = "exporter"

// ExporterPassword derives the exporter user's password from the operator password, as
// ReplicationPassword does with another label, so the two are unrelated: it rotates with
// the operator password by the same two phases and reveals nothing of it.
func ExporterPassword(operatorPassword string) string {
	return derivePassword(operatorPassword, "valkey-operator/exporter")
}

// exporterAccess is what the metrics exporter needs, and only that, proven by the
// integration suite against the Debian exporters of both local images (1.45 and 1.86):
//
//   - info: every INFO section, the source of nearly all its metrics (redis_up, key
//     counts, memory, replication, clients, commandstats);
//   - cluster|info: cluster state, slots and epochs (CLUSTER INFO, on a cluster-mode server);
//   - latency|latest, latency|histogram: latency events and per-command latency
//     distributions, timings only;
//   - slowlog|len: how many slow commands are logged. Not slowlog|get: its entries hold
//     the slow commands' arguments, keys and values included, which is data, not
//     statistics. The exporter asks for it and is refused (one ACL LOG entry, its count
//     growing), losing only its last-slow-command metrics;
//   - client|setname: names its own connection redis_exporter, so CLIENT LIST shows whose
//     it is; it changes nothing else.
//
// Not CONFIG GET (it would show masterauth, the replication password): the sidecar runs
// with the exporter's CONFIG command turned off. No PING: the exporter is not asked to ping.
// No key and no channel.
func exporterAccess() aclPermRules {
	return aclPermRules{commands: []string{"-@all", "+info", "+cluster|info", "+latency|latest", "+latency|histogram", "+slowlog|len", "+client|setname"}}
}
