//go:build envtest

package reconciler_test

import (
	"context"
	"sync"

	"github.com/gomomento/valkey-operator/valkeyops/model"
	"k8s.io/apimachinery/pkg/types"
)

// fakeAnnounceState is every cluster's servers' client address, by cluster and node name: a
// read is a call on the wire, a set a write, as on real servers.
type fakeAnnounceState struct {
	wire  *fakeWire
	mu    sync.Mutex
	addrs map[types.NamespacedName]map[string]model.ClientAddress
}

func newFakeAnnounceState(w *fakeWire) *fakeAnnounceState {
	return &fakeAnnounceState{wire: w, addrs: map[types.NamespacedName]map[string]model.ClientAddress{}}
}

// fakeAnnounces is one cluster's servers as the client-address concern reaches them.
type fakeAnnounces struct {
	f   *fakeAnnounceState
	key types.NamespacedName
}

func (f *fakeAnnounceState) cluster(key types.NamespacedName) *fakeAnnounces {
	return &fakeAnnounces{f: f, key: key}
}

// get is what node of cluster key announces now.
func (f *fakeAnnounceState) get(key types.NamespacedName, node string) model.ClientAddress {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.addrs[key][node]
}

func (a *fakeAnnounces) ClientAnnounce(_ context.Context, node model.Node) (model.ClientAddress, error) {
	a.f.wire.call(a.key)
	a.f.mu.Lock()
	defer a.f.mu.Unlock()
	return a.f.addrs[a.key][node.Name], nil
}

func (a *fakeAnnounces) SetClientAnnounce(_ context.Context, node model.Node, addr model.ClientAddress, ports bool) error {
	a.f.wire.write(a.key)
	a.f.mu.Lock()
	defer a.f.mu.Unlock()
	if a.f.addrs[a.key] == nil {
		a.f.addrs[a.key] = map[string]model.ClientAddress{}
	}
	if !ports {
		addr.Port = a.f.addrs[a.key][node.Name].Port
	}
	a.f.addrs[a.key][node.Name] = addr
	return nil
}
