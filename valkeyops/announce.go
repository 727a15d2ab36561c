package valkeyops

import (
	"context"
	"strconv"

	"github.com/gomomento/valkey-operator/valkeyops/model"
)

// The settings that tell clients, and only clients, another address for a server than the
// one the cluster bus and replication use: the server keeps announcing its pod IP to its
// peers (cluster-announce-ip), while CLUSTER SHARDS, CLUSTER SLOTS and redirects name these.
// Valkey 8.0 has the IPv4 one; 9.0 added the client ports.
const (
	announceClientIPv4    = "cluster-announce-client-ipv4"
	announceClientPort    = "cluster-announce-client-port"
	announceClientTLSPort = "cluster-announce-client-tls-port"
)

// ClientAnnounce reads the client address node announces (the zero ClientAddress when it
// announces none). A release without cluster-announce-client-ipv4 is model.ErrUnsupported;
// one without the client port reads as port 0.
func (a *Admin) ClientAnnounce(ctx context.Context, node model.Node) (model.ClientAddress, error) {
	msg, err := a.cmd(ctx, node, "announce-read", "CONFIG", "GET", announceClientIPv4, announceClientPort)
	if err != nil {
		return model.ClientAddress{}, err
	}
	kv, err := msg.AsStrMap()
	if err != nil {
		return model.ClientAddress{}, model.NewOpError(node.Name, "announce-read", err)
	}
	ip, ok := kv[announceClientIPv4]
	if !ok {
		return model.ClientAddress{}, model.NewOpError(node.Name, "announce-read", model.ErrUnsupported)
	}
	out := model.ClientAddress{IP: ip}
	if p, ok := kv[announceClientPort]; ok {
		if out.Port, err = strconv.Atoi(p); err != nil {
			return model.ClientAddress{}, model.NewOpError(node.Name, "announce-read", err)
		}
	}
	return out, nil
}

// SetClientAnnounce sets the client address node announces, live, in one CONFIG SET (so a
// client never sees the new IP with the old port). ports says whether to set the client
// ports too (plain and TLS, one of which the server serves): only a 9.0+ server has them, and
// only an address with a port of its own, or one replacing such an address, needs them; 0
// returns them to the server's own port. The settings are not in the node's config file: the
// address is known only once its Service has one, after the file is written. A server that
// restarts starts without it and is set again.
func (a *Admin) SetClientAnnounce(ctx context.Context, node model.Node, addr model.ClientAddress, ports bool) error {
	args := []string{"CONFIG", "SET", announceClientIPv4, addr.IP}
	if ports {
		p := strconv.Itoa(addr.Port)
		args = append(args, announceClientPort, p, announceClientTLSPort, p)
	}
	_, err := a.cmd(ctx, node, "announce-set", args...)
	return err
}
