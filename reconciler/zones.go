package reconciler

import (
	"context"

	"github.com/gomomento/valkey-operator/valkeyops/model"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Availability zones (docs/day2.md, placement): each server's availability-zone setting is its
// Kubernetes node's topology.kubernetes.io/zone label, so zone-aware clients (HELLO's
// availability_zone) can read from a replica in their own zone. A server's config file is
// written before its pod is scheduled, so the zone is not known then: it is set live once the
// pod is bound and its server answers, as a live setting (livesetting.go). A node without the
// label leaves the setting as the server started, unset, and costs nothing.

// ZoneWrites is the port of the zones concern.
type ZoneWrites interface {
	// SetAvailabilityZone sets node's availability-zone setting live.
	SetAvailabilityZone(ctx context.Context, node model.Node, zone string) error
}

// zoneSetting is the availability-zone setting: wished for each member whose pod is bound to a
// node with a zone label.
var zoneSetting = liveSetting[string]{
	what:   "availability zones",
	memory: func(c *clusterMemory) *map[types.UID]held[string] { return &c.zones },
	wish: func(p *pass, _ string, pod *corev1.Pod) (string, bool) {
		zone := p.zones[pod.Spec.NodeName]
		return zone, zone != ""
	},
	seen: func(o *observation) map[string]setting[string] { return o.zones },
	set: func(ctx context.Context, p *pass, node model.Node, s liveSet[string]) error {
		return p.valkey.Zones.SetAvailabilityZone(ctx, node, s.value)
	},
	done: func(_ *Reconciler, p *pass, s liveSet[string]) {
		p.log.V(1).Info("availability zone set", "node", s.name, "zone", s.value)
	},
}

// zonesNeed: the settings of the members the memory does not know, when their node has a zone.
func zonesNeed(r *Reconciler, p *pass) reading {
	return reading{zones: zoneSetting.toRead(r, p)}
}

// setZones sets each planned server's zone. It never ends the pass.
func (r *Reconciler) setZones(ctx context.Context, p *pass) *outcome {
	zoneSetting.apply(ctx, r, p)
	return nil
}

// nodeZone is a Kubernetes node's zone label ("" without one).
func nodeZone(node *corev1.Node) string { return node.Labels[corev1.LabelTopologyZone] }
