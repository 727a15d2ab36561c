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

// TestPlanZones: a server is read only when its node has a zone and the memory does not know
// it; it is set when known or read to hold another zone; a node without a zone, a server
// holding its zone, one that could not be read, or one whose release has no such setting
// plans nothing.
func TestPlanZones(t *testing.T) {
	for _, tc := range []struct {
		name   string
		member liveMember[string]
		read   bool
		set    string // "" = no set
	}{
		{"new server, read empty", liveMember[string]{want: "a", wanted: true, readOK: true}, true, "a"},
		{"new server, not read yet", liveMember[string]{want: "a", wanted: true}, true, ""},
		{"new server, read holding its zone (operator restarted)", liveMember[string]{want: "a", wanted: true, read: held[string]{value: "a"}, readOK: true}, true, ""},
		{"new server, read holding another zone", liveMember[string]{want: "a", wanted: true, read: held[string]{value: "b"}, readOK: true}, true, "a"},
		{"new server, read without the setting", liveMember[string]{want: "a", wanted: true, read: held[string]{unsupported: true}, readOK: true}, true, ""},
		{"known, holding its zone (idle)", liveMember[string]{want: "a", wanted: true, held: held[string]{value: "a"}, known: true}, false, ""},
		{"known, node's zone changed", liveMember[string]{want: "b", wanted: true, held: held[string]{value: "a"}, known: true}, false, "b"},
		{"known, without the setting", liveMember[string]{want: "b", wanted: true, held: held[string]{unsupported: true}, known: true}, false, ""},
		{"node without a zone", liveMember[string]{}, false, ""},
		{"node without a zone, known", liveMember[string]{held: held[string]{value: "a"}, known: true}, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := tc.member
			m.name = "n1"
			if tc.read {
				assert.Equal(t, []string{"n1"}, liveToRead([]liveMember[string]{m}))
			} else {
				assert.Empty(t, liveToRead([]liveMember[string]{m}))
			}
			if tc.set != "" {
				sets := planLive([]liveMember[string]{m})
				require.Len(t, sets, 1)
				assert.Equal(t, "n1", sets[0].name)
				assert.Equal(t, tc.set, sets[0].value)
			} else {
				assert.Empty(t, planLive([]liveMember[string]{m}))
			}
		})
	}
}

// zoneServers stands in for the servers' availability-zone setting, counting reads and sets;
// the other reads are not the concern's (nil: a call would fail the test).
type zoneServers struct {
	Reads
	// mu guards the rest: the concern reads and sets its servers in parallel.
	mu          sync.Mutex
	held        map[string]string
	old         map[string]bool // releases without the setting
	reads, sets int
	refuse      bool
}

func (z *zoneServers) AvailabilityZone(_ context.Context, n model.Node) (string, error) {
	z.mu.Lock()
	defer z.mu.Unlock()
	z.reads++
	if z.old[n.Name] {
		return "", model.ErrUnsupported
	}
	return z.held[n.Name], nil
}

func (z *zoneServers) SetAvailabilityZone(_ context.Context, n model.Node, zone string) error {
	z.mu.Lock()
	defer z.mu.Unlock()
	z.sets++
	if z.refuse {
		return errors.New("refused")
	}
	z.held[n.Name] = zone
	return nil
}

// TestZonesConcern runs the concern's passes over one 3-node cluster: the first reads and
// sets each server; an idle pass sends nothing; a restarted operator reads each server once
// and sets none; a replaced pod is read and set; a node whose zone changed is set without a
// read; a failed set is tried again on the next pass; a release without the setting is read
// once and left alone.
func TestZonesConcern(t *testing.T) {
	srv := &zoneServers{held: map[string]string{}, old: map[string]bool{}}
	r := &Reconciler{}
	key := types.NamespacedName{Namespace: "ns", Name: "c"}
	nodeOf := map[string]string{"n0": "k0", "n1": "k1", "n2": "k2"}
	zones := map[string]string{"k0": "zone-a", "k1": "zone-b", "k2": "zone-c"}
	uids := map[string]types.UID{"n0": "u0", "n1": "u1", "n2": "u2"}
	pass := func() (reads, sets int) {
		p := &pass{key: key, log: logr.Discard(), pods: map[string]*corev1.Pod{}, zones: zones,
			valkey: &Servers{Reads: srv, Zones: srv}, seen: &observation{}}
		snap := &model.Snapshot{}
		for _, name := range []string{"n0", "n1", "n2"} {
			n := model.Node{Name: name, Addr: name + ":6379"}
			p.members = append(p.members, n)
			p.pods[name] = &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, UID: uids[name]}, Spec: corev1.PodSpec{NodeName: nodeOf[name]}}
			snap.Nodes = append(snap.Nodes, model.NodeState{Node: n, Reachable: true})
		}
		r0, s0 := srv.reads, srv.sets
		if want := zonesNeed(r, p); len(want.zones) > 0 {
			p.seen.zones = readReached(context.Background(), p.members, want.zones, snap, srv.AvailabilityZone)
		}
		require.Nil(t, r.setZones(context.Background(), p), "the concern never ends a pass")
		return srv.reads - r0, srv.sets - s0
	}
	check := func(step string, reads, sets int) {
		t.Helper()
		gotReads, gotSets := pass()
		assert.Equal(t, reads, gotReads, "%s: reads", step)
		assert.Equal(t, sets, gotSets, "%s: sets", step)
		assert.Equal(t, map[string]string{"n0": "zone-a", "n1": "zone-b", "n2": "zone-c"}, srv.held, "%s: each server holds its node's zone", step)
	}

	check("first pass", 3, 3)
	check("idle", 0, 0)
	r.memory.forget(key)
	check("operator restarted", 3, 0)

	uids["n1"] = "u1-replaced"
	srv.held["n1"] = ""
	check("pod replaced", 1, 1)

	zones["k2"] = "zone-d"
	srv.refuse = true
	reads, sets := pass()
	assert.Equal(t, 0, reads, "a known server is not read")
	assert.Equal(t, 1, sets, "a changed zone is set")
	srv.refuse = false
	zones["k2"] = "zone-c"
	srv.held["n2"] = "zone-d" // as if the failed set had landed
	check("after a failed set", 1, 1)
	check("idle again", 0, 0)

	uids["n0"], srv.old["n0"] = "u0-old-release", true
	reads, sets = pass()
	assert.Equal(t, 1, reads, "the new server is read")
	assert.Zero(t, sets, "a release without the setting is not set")
	reads, sets = pass()
	assert.Zero(t, reads+sets, "nor read again")

	delete(zones, "k1")
	uids["n1"] = "u1-unlabelled"
	reads, sets = pass()
	assert.Zero(t, reads+sets, "a node without a zone costs nothing")
}
