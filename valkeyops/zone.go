package valkeyops

import (
	"context"

	"github.com/gomomento/valkey-operator/valkeyops/model"
)

// availabilityZone is the server setting zone-aware clients read (HELLO's availability_zone
// from Valkey 8.1 on) to prefer the replicas of their own zone. Valkey 8.0 already accepts it
// with CONFIG SET and CONFIG GET, though its HELLO does not report it.
const availabilityZone = "availability-zone"

// AvailabilityZone reads node's availability-zone setting ("" when unset). A release without
// the setting answers CONFIG GET with nothing: that is model.ErrUnsupported.
func (a *Admin) AvailabilityZone(ctx context.Context, node model.Node) (string, error) {
	msg, err := a.cmd(ctx, node, "zone-read", "CONFIG", "GET", availabilityZone)
	if err != nil {
		return "", err
	}
	kv, err := msg.AsStrMap()
	if err != nil {
		return "", model.NewOpError(node.Name, "zone-read", err)
	}
	zone, ok := kv[availabilityZone]
	if !ok {
		return "", model.NewOpError(node.Name, "zone-read", model.ErrUnsupported)
	}
	return zone, nil
}

// SetAvailabilityZone sets node's availability-zone live. The setting is not in the node's
// config file, which is written before its pod is scheduled and so before its zone is known;
// a server that restarts starts without it and is set again.
func (a *Admin) SetAvailabilityZone(ctx context.Context, node model.Node, zone string) error {
	_, err := a.cmd(ctx, node, "zone-set", "CONFIG", "SET", availabilityZone, zone)
	return err
}
