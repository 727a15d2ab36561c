package model

import (
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
)

// ClusterNode is one line of CLUSTER NODES: how the observing node sees one cluster member.
type ClusterNode struct {
	ID          string
	IP          string // announced IP ("" while unknown, e.g. a fresh node seeing itself)
	Port        int
	BusPort     int
	Hostname    string
	Flags       []string
	PrimaryID   string // "" for primaries
	PingSent    int64
	PongRecv    int64
	ConfigEpoch uint64
	// BusLink is the observing node's cluster-bus link to this member (see Connected). It is
	// not a replica's link to its primary: that is NodeState.PrimaryLink.
	BusLink BusLinkState
	Slots   []SlotRange
	// Migrating maps slot -> destination node ID; Importing maps slot -> source node ID. Only
	// the observing node's own line ("myself") carries these.
	Migrating map[int]string
	Importing map[int]string
}

// BusLinkState is the link-state field of a CLUSTER NODES line.
type BusLinkState string

const (
	BusConnected    BusLinkState = "connected"
	BusDisconnected BusLinkState = "disconnected"
)

// The flags of a CLUSTER NODES line the predicates below read. Nothing outside this file
// spells them: callers ask the predicates.
const (
	flagMyself    = "myself"
	flagPrimary   = "master"
	flagReplica   = "slave"
	flagFail      = "fail"
	flagPFail     = "fail?"
	flagHandshake = "handshake"
	flagNoAddr    = "noaddr"
)

// hasFlag reports whether the node carries flag f.
func (n *ClusterNode) hasFlag(f string) bool {
	return slices.Contains(n.Flags, f)
}

// Myself reports whether this line describes the observing node itself.
func (n *ClusterNode) Myself() bool { return n.hasFlag(flagMyself) }

// IsPrimary reports whether the line says primary ("master").
func (n *ClusterNode) IsPrimary() bool { return n.hasFlag(flagPrimary) }

// IsReplica reports whether the line says replica ("slave").
func (n *ClusterNode) IsReplica() bool { return n.hasFlag(flagReplica) }

// Failed reports the fail flag: a majority of the primaries agreed that the node failed.
func (n *ClusterNode) Failed() bool { return n.hasFlag(flagFail) }

// Failing reports fail or pfail ("fail?", the observer alone suspects it) flags.
func (n *ClusterNode) Failing() bool { return n.Failed() || n.hasFlag(flagPFail) }

// InHandshake reports the handshake flag: the observer is still waiting for the node's first
// PONG.
func (n *ClusterNode) InHandshake() bool { return n.hasFlag(flagHandshake) }

// NoAddr reports the noaddr flag: the observer knows no address for the node.
func (n *ClusterNode) NoAddr() bool { return n.hasFlag(flagNoAddr) }

// Connected reports whether the observer's cluster-bus link to the node is up.
func (n *ClusterNode) Connected() bool { return n.BusLink == BusConnected }

// UnhealthyFlags are the flags of the line that mark the member unhealthy in the observer's
// view (fail, fail?, handshake, noaddr), in that order.
func (n *ClusterNode) UnhealthyFlags() []string {
	var out []string
	for _, f := range []string{flagFail, flagPFail, flagHandshake, flagNoAddr} {
		if n.hasFlag(f) {
			out = append(out, f)
		}
	}
	return out
}

// Addr is the announced "ip:port" ("" when the IP is unknown).
func (n *ClusterNode) Addr() string {
	if n.IP == "" {
		return ""
	}
	return net.JoinHostPort(n.IP, strconv.Itoa(n.Port))
}

// ParseClusterNodes parses the full CLUSTER NODES reply. It is the only place that knows the
// line format; everything else works on the structs.
func ParseClusterNodes(text string) ([]ClusterNode, error) {
	var out []ClusterNode
	for lineNo, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		n, err := parseClusterNodeLine(line)
		if err != nil {
			return nil, fmt.Errorf("CLUSTER NODES line %d: %w", lineNo+1, err)
		}
		out = append(out, n)
	}
	return out, nil
}

func parseClusterNodeLine(line string) (ClusterNode, error) {
	f := strings.Fields(line)
	if len(f) < 8 {
		return ClusterNode{}, fmt.Errorf("want at least 8 fields, got %d", len(f))
	}
	n := ClusterNode{ID: f[0], BusLink: BusLinkState(f[7])}
	addr := f[1]
	if i := strings.IndexByte(addr, ','); i >= 0 {
		extra := strings.Split(addr[i+1:], ",")
		addr = addr[:i]
		if len(extra) > 0 && !strings.Contains(extra[0], "=") {
			n.Hostname = extra[0]
		}
	}
	hostPort, bus, ok := strings.Cut(addr, "@")
	if ok {
		bp, err := strconv.Atoi(bus)
		if err != nil {
			return ClusterNode{}, fmt.Errorf("bad bus port in %q", f[1])
		}
		n.BusPort = bp
	}
	colon := strings.LastIndexByte(hostPort, ':')
	if colon < 0 {
		return ClusterNode{}, fmt.Errorf("bad address %q", f[1])
	}
	n.IP = strings.Trim(hostPort[:colon], "[]")
	port, err := strconv.Atoi(hostPort[colon+1:])
	if err != nil {
		return ClusterNode{}, fmt.Errorf("bad port in %q", f[1])
	}
	n.Port = port
	if n.BusPort == 0 && port != 0 {
		n.BusPort = port + 10000
	}
	if f[2] != "noflags" {
		n.Flags = strings.Split(f[2], ",")
	}
	if f[3] != "-" {
		n.PrimaryID = f[3]
	}
	if n.PingSent, err = strconv.ParseInt(f[4], 10, 64); err != nil {
		return ClusterNode{}, fmt.Errorf("bad ping-sent %q", f[4])
	}
	if n.PongRecv, err = strconv.ParseInt(f[5], 10, 64); err != nil {
		return ClusterNode{}, fmt.Errorf("bad pong-recv %q", f[5])
	}
	if n.ConfigEpoch, err = strconv.ParseUint(f[6], 10, 64); err != nil {
		return ClusterNode{}, fmt.Errorf("bad config-epoch %q", f[6])
	}
	for _, s := range f[8:] {
		if strings.HasPrefix(s, "[") {
			if err := n.parseOpenSlot(s); err != nil {
				return ClusterNode{}, err
			}
			continue
		}
		a, b, isRange := strings.Cut(s, "-")
		start, err := strconv.Atoi(a)
		if err != nil || start < 0 || start >= SlotCount {
			return ClusterNode{}, fmt.Errorf("bad slot %q", s)
		}
		end := start
		if isRange {
			if end, err = strconv.Atoi(b); err != nil || end < start || end >= SlotCount {
				return ClusterNode{}, fmt.Errorf("bad slot range %q", s)
			}
		}
		n.Slots = append(n.Slots, SlotRange{start, end})
	}
	return n, nil
}

// parseOpenSlot records an open-slot field of CLUSTER NODES: "[slot->-dstID]" (migrating) or
// "[slot-<-srcID]" (importing).
func (n *ClusterNode) parseOpenSlot(field string) error {
	inner := strings.Trim(field, "[]")
	for _, o := range []struct {
		sep, what string
		into      *map[int]string
	}{
		{"->-", "migrating", &n.Migrating},
		{"-<-", "importing", &n.Importing},
	} {
		slot, peer, ok := strings.Cut(inner, o.sep)
		if !ok {
			continue
		}
		v, err := strconv.Atoi(slot)
		if err != nil {
			return fmt.Errorf("bad %s slot %q", o.what, field)
		}
		if *o.into == nil {
			*o.into = map[int]string{}
		}
		(*o.into)[v] = peer
		return nil
	}
	return fmt.Errorf("bad slot state %q", field)
}
