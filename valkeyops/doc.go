// Package valkeyops performs every Valkey cluster operation the operator needs against real
// servers: observing a set of nodes, forming a cluster, moving slots with their keys, failing
// over, forgetting departed nodes, live ACL changes and TLS certificate reloads.
//
// It knows nothing about Kubernetes: callers hand it Nodes (a name, a dialable address and the
// shard the node is meant for) and it talks to them through one authenticated admin connection
// per node. Pure parts (the CLUSTER NODES parser, Health, the rebalance planner and the ACL
// renderer) are separate functions so they can be tested without servers.
package valkeyops
