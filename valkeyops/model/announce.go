package model

import (
	"net"
	"strconv"
)

// ClientAddress is the address a server tells clients to reach it at (CLUSTER SHARDS, CLUSTER
// SLOTS, CLUSTER NODES and MOVED/ASK redirects), apart from the address the cluster bus and
// replication use. The zero value announces nothing: clients are given the server's own
// address, as without it.
type ClientAddress struct {
	// IP is cluster-announce-client-ipv4 ("" when unset).
	IP string
	// Port is cluster-announce-client-port (and -tls-port), 0 when unset: clients are then
	// given the server's own port. Only Valkey 9.0 and later have the directive.
	Port int
}

// String is the address as a client dials it: host:port, with the server's own port when
// Port is 0.
func (a ClientAddress) String() string {
	if a.IP == "" {
		return ""
	}
	port := a.Port
	if port == 0 {
		port = 6379
	}
	return net.JoinHostPort(a.IP, strconv.Itoa(port))
}

// ClientPortMinMajor is the first Valkey major release with cluster-announce-client-port.
const ClientPortMinMajor = 9

// AnnouncesClientPort reports whether a server of valkeyVersion ("9.1.2") has the
// cluster-announce-client-port directive; an unparsable version has not.
func AnnouncesClientPort(valkeyVersion string) bool {
	major, _, ok := parseMajorMinor(valkeyVersion)
	return ok && major >= ClientPortMinMajor
}
