// Package valkeyops is the client: it performs every Valkey cluster operation the operator
// needs against real servers, through valkey-go: observing a set of nodes, forming a
// cluster, moving slots with their keys, failing over, forgetting departed nodes, live ACL
// changes and TLS certificate reloads.
//
// It knows nothing about Kubernetes: callers hand it model.Nodes (a name, a dialable address
// and the shard the node is meant for) and it talks to them through one authenticated admin
// connection per node (Admin, pooled per cluster by Pool, connecting as Credentials say).
//
// What it reads and what it decides with is package model: the reply parsers, Health, the
// election rules, the rebalance planner, the ACL renderer and the error values live there,
// pure, so the planners can use them without importing a client, and so they are tested
// without servers. This package keeps only what sends commands or shapes a connection, and
// the private steps of its own procedures.
package valkeyops
