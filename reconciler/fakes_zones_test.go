//go:build envtest

package reconciler_test

import (
	"context"
	"sync"

	"github.com/gomomento/valkey-operator/valkeyops/model"
	"k8s.io/apimachinery/pkg/types"
)

// fakeZoneState is every cluster's servers' availability-zone setting, by cluster and node
// name: a read is a call on the wire, a set a write, as on real servers.
type fakeZoneState struct {
	wire  *fakeWire
	mu    sync.Mutex
	zones map[types.NamespacedName]map[string]string
}

func newFakeZoneState(w *fakeWire) *fakeZoneState {
	return &fakeZoneState{wire: w, zones: map[types.NamespacedName]map[string]string{}}
}

// fakeZones is one cluster's servers as the zones concern reaches them.
type fakeZones struct {
	f   *fakeZoneState
	key types.NamespacedName
}

func (f *fakeZoneState) cluster(key types.NamespacedName) *fakeZones {
	return &fakeZones{f: f, key: key}
}

func (z *fakeZones) AvailabilityZone(_ context.Context, node model.Node) (string, error) {
	z.f.wire.call(z.key)
	z.f.mu.Lock()
	defer z.f.mu.Unlock()
	return z.f.zones[z.key][node.Name], nil
}

func (z *fakeZones) SetAvailabilityZone(_ context.Context, node model.Node, zone string) error {
	z.f.wire.write(z.key)
	z.f.mu.Lock()
	defer z.f.mu.Unlock()
	if z.f.zones[z.key] == nil {
		z.f.zones[z.key] = map[string]string{}
	}
	z.f.zones[z.key][node.Name] = zone
	return nil
}
