package model

// Node is one Valkey server the operator manages, identified by its ValkeyNode/Pod name.
type Node struct {
	Name  string // ValkeyNode (= Pod) name
	Addr  string // dialable "host:port" (the pod IP + 6379)
	Shard int    // desired shard index from the ValkeyNode spec
	// NodeTimeoutMillis is the cluster-node-timeout the server was started with (its command
	// line), which CONFIG GET cannot tell once a pass changed it at runtime. valkeyops'
	// Admin.Bootstrap leaves the server at it; 0 = unknown, and Bootstrap leaves the server's
	// timeout alone.
	NodeTimeoutMillis int
	// ClientAddr is the client address ("host:port") the server was told to announce
	// (external access), "" when none: Observe places an entry showing it back at Addr. Only
	// the caller can tell it from the stale address of a server that restarted at a new IP,
	// which the server's own CLUSTER NODES line shows the same way.
	ClientAddr string
}
