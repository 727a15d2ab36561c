package reconciler

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	"github.com/gomomento/valkey-operator/valkeyops/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TestPlanAnnounces: a server is read only when there is a wish for it and the memory does
// not know it; it is set when known or read to announce another address, with the ports
// when either address has one; no wish, an address already held, a server not read, or a
// release without the setting plans nothing.
func TestPlanAnnounces(t *testing.T) {
	lb := model.ClientAddress{IP: "203.0.113.7"}
	np := model.ClientAddress{IP: "198.51.100.2", Port: 31000}
	for _, tc := range []struct {
		name   string
		member liveMember[model.ClientAddress]
		read   bool
		set    *announced
	}{
		{"new server, read empty", liveMember[model.ClientAddress]{want: lb, wanted: true, readOK: true}, true, &announced{addr: lb}},
		{"new server, not read yet", liveMember[model.ClientAddress]{want: lb, wanted: true}, true, nil},
		{"new server, read holding its address (operator restarted)", liveMember[model.ClientAddress]{want: lb, wanted: true, read: held[model.ClientAddress]{value: lb}, readOK: true}, true, nil},
		{"NodePort: the port is set", liveMember[model.ClientAddress]{want: np, wanted: true, readOK: true}, true, &announced{addr: np, ports: true}},
		{"known, holding its address (idle)", liveMember[model.ClientAddress]{want: lb, wanted: true, held: held[model.ClientAddress]{value: lb}, known: true}, false, nil},
		{"known, NodePort to LoadBalancer: the port is cleared", liveMember[model.ClientAddress]{want: lb, wanted: true, held: held[model.ClientAddress]{value: np}, known: true}, false, &announced{addr: lb, ports: true}},
		{"clearing a known address", liveMember[model.ClientAddress]{wanted: true, held: held[model.ClientAddress]{value: lb}, known: true}, false, &announced{}},
		{"clearing, known clear", liveMember[model.ClientAddress]{wanted: true, held: held[model.ClientAddress]{}, known: true}, false, nil},
		{"release without the setting", liveMember[model.ClientAddress]{want: lb, wanted: true, read: held[model.ClientAddress]{unsupported: true}, readOK: true}, true, nil},
		{"no wish (no address yet, feature off)", liveMember[model.ClientAddress]{}, false, nil},
		{"no wish, known", liveMember[model.ClientAddress]{held: held[model.ClientAddress]{value: lb}, known: true}, false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := tc.member
			m.name = "n0"
			if tc.read {
				assert.Equal(t, []string{"n0"}, liveToRead([]liveMember[model.ClientAddress]{m}))
			} else {
				assert.Empty(t, liveToRead([]liveMember[model.ClientAddress]{m}))
			}
			sets := planLive([]liveMember[model.ClientAddress]{m})
			if tc.set == nil {
				assert.Empty(t, sets)
				return
			}
			require.Len(t, sets, 1)
			assert.Equal(t, "n0", sets[0].name)
			assert.Equal(t, tc.set.addr, sets[0].value)
			assert.Equal(t, tc.set.ports, announcePorts(sets[0]), "ports")
		})
	}
}

// announced is one set TestPlanAnnounces expects: the address, and whether the ports go too.
type announced struct {
	addr  model.ClientAddress
	ports bool
}

// announceServers stands in for the servers' client address, counting reads and sets.
type announceServers struct {
	Reads
	// mu guards the rest: the concern reads and sets its servers in parallel.
	mu          sync.Mutex
	held        map[string]model.ClientAddress
	reads, sets int
	refuse      bool
}

func (a *announceServers) ClientAnnounce(_ context.Context, n model.Node) (model.ClientAddress, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.reads++
	return a.held[n.Name], nil
}

func (a *announceServers) SetClientAnnounce(_ context.Context, n model.Node, addr model.ClientAddress, _ bool) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.sets++
	if a.refuse {
		return errors.New("refused")
	}
	a.held[n.Name] = addr
	return nil
}

// TestAnnounceConcern runs the concern's passes over one 3-node cluster: nothing is read or
// set before the Services have addresses; then each server is read and set once; an idle
// pass sends nothing; a restarted operator reads each once and sets none; a failed set is
// retried; turning the feature off clears each server, after which the Services may go.
func TestAnnounceConcern(t *testing.T) {
	srv := &announceServers{held: map[string]model.ClientAddress{}}
	r := &Reconciler{}
	key := types.NamespacedName{Namespace: "ns", Name: "c"}
	external := map[string]model.ClientAddress{}
	clear := false
	var last *pass
	pass := func() (reads, sets int) {
		p := &pass{key: key, log: logr.Discard(), pods: map[string]*corev1.Pod{}, external: external, externalClear: clear,
			valkey: &Servers{Reads: srv, Announces: srv}, seen: &observation{}}
		snap := &model.Snapshot{}
		for _, name := range []string{"n0", "n1", "n2"} {
			n := model.Node{Name: name, Addr: name + ":6379"}
			p.members = append(p.members, n)
			p.pods[name] = readyPod(name)
			snap.Nodes = append(snap.Nodes, model.NodeState{Node: n, Reachable: true})
		}
		r0, s0 := srv.reads, srv.sets
		if want := announcesNeed(r, p); len(want.announces) > 0 {
			p.seen.announces = readReached(context.Background(), p.members, want.announces, snap, srv.ClientAnnounce)
		}
		require.Nil(t, r.setAnnounces(context.Background(), p), "the concern never ends a pass")
		last = p
		return srv.reads - r0, srv.sets - s0
	}
	check := func(step string, reads, sets int, want map[string]model.ClientAddress) {
		t.Helper()
		gotReads, gotSets := pass()
		assert.Equal(t, reads, gotReads, "%s: reads", step)
		assert.Equal(t, sets, gotSets, "%s: sets", step)
		assert.Equal(t, want, srv.held, "%s: what each server announces", step)
	}
	check("no address yet", 0, 0, map[string]model.ClientAddress{})

	addrs := map[string]model.ClientAddress{"n0": {IP: "203.0.113.1"}, "n1": {IP: "203.0.113.2"}, "n2": {IP: "203.0.113.3"}}
	for k, v := range addrs {
		external[k] = v
	}
	check("addresses assigned", 3, 3, addrs)
	check("idle", 0, 0, addrs)
	r.memory.forget(key)
	check("operator restarted", 3, 0, addrs)

	external["n1"] = model.ClientAddress{IP: "203.0.113.9"}
	srv.refuse = true
	reads, sets := pass()
	assert.Equal(t, 0, reads, "a known server is not read")
	assert.Equal(t, 1, sets, "a changed address is set")
	srv.refuse = false
	addrs["n1"] = external["n1"]
	check("after a failed set", 1, 1, addrs)

	clear = true
	for k := range external {
		delete(external, k)
	}
	assert.False(t, r.announcesCleared(last), "servers still announce")
	check("feature off", 0, 3, map[string]model.ClientAddress{"n0": {}, "n1": {}, "n2": {}})
	assert.True(t, r.announcesCleared(last), "every server is known clear: the Services may go")
	clear = false
	check("off, idle", 0, 0, map[string]model.ClientAddress{"n0": {}, "n1": {}, "n2": {}})
}

// readyPod is a running pod whose server is ready.
func readyPod(name string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name)},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.1",
			ContainerStatuses: []corev1.ContainerStatus{{Name: "valkey", Ready: true}}}}
}
