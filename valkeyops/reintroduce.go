package valkeyops

import (
	"context"
	"fmt"

	"github.com/gomomento/valkey-operator/valkeyops/model"
)

// Reintroduce MEETs every pair of nodes that do not know each other at their current
// addresses, and waits until each knows every other there. Servers restarted on their volumes
// at new IPs keep their peers' old addresses in nodes.conf: one that moved alone is found
// again when it dials its peers, but when every server moved nobody reaches anybody. It
// touches no slot, epoch or role. It refuses (ErrUnsafe) a node still loading its data (it
// would refuse the MEET) and a node that knows no other node: a server that lost its
// nodes.conf but not its data claims the slots of its keys as a one-node cluster of its own,
// and meeting it would merge that claim into the cluster.
func (a *Admin) Reintroduce(ctx context.Context, nodes []model.Node) error {
	snap, err := a.Observe(ctx, nodes)
	if err != nil {
		return err
	}
	if err := requireReachable(snap); err != nil {
		return err
	}
	for _, st := range snap.Nodes {
		switch {
		case st.Loading:
			return model.NewOpError(st.Name, "reintroduce", fmt.Errorf("%w: still loading its data", model.ErrUnsafe))
		case st.KnownNodes <= 1 && len(nodes) > 1:
			return model.NewOpError(st.Name, "reintroduce", fmt.Errorf("%w: knows no other node (a cluster of its own)", model.ErrUnsafe))
		}
	}
	return a.meetAt(ctx, snap, dialAddr, true)
}
