// Package model is what the operator knows about Valkey without talking to it: the types the
// planners reason with and the pure rules over them. It holds the nodes and slots
// (Node, SlotRange, slot counting), the parsed views of what servers report (ClusterNode and
// its parser ParseClusterNodes, NodeState and Snapshot with ParseNodeState), roles, health
// and election rules (Health, Electable, BestReplica), the rebalance plan (PlanRebalance,
// ScheduleRounds), the ACL model and its renderer (ACLSpec, ValidateACL, RenderACL,
// HashPassword, the operator's users and derived passwords, the command tables of each
// release), valkey-server's start-up errors (ParseConfigRejection) and the error values
// every operation returns (OpError, ErrUnsafe, ...).
//
// It is a package of its own so that code deciding what to do (reconciler/plan,
// reconciler/render) cannot reach the client: it imports no client library and nothing else
// of this repository, does no I/O and reads no clock, so everything in it is tested without
// servers. The client, package valkeyops, takes and returns these types.
//
// Valkey's own words stay here too. The protocol strings of a reply (flags such as
// "master" or "fail?", "connected", master_link_status "up", cluster_state "ok") are read
// only by the parsers; everything else asks the typed predicates (ClusterNode.Failing,
// NoAddr, Connected; NodeState.LinkedToPrimary, ClusterOK), so a planner never compares
// strings the server chose. The two links have distinct names because they are different
// things: ClusterNode.BusLink is the observing node's cluster-bus connection to a peer,
// NodeState.PrimaryLink a replica's replication link to its primary.
package model
