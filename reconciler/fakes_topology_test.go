//go:build envtest

package reconciler_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/gomomento/valkey-operator/valkeyops"
	"github.com/gomomento/valkey-operator/valkeyops/model"
	"k8s.io/apimachinery/pkg/types"
)

// The fake servers' topology, the Topology and Failovers ports and the snapshot half of Reads:
// Bootstrap forms a cluster, Observe reports the CLUSTER NODES view a formed cluster's
// servers would give (parsed by model.ParseClusterNodes), and the reconciler judges it with
// model.Health as it does real snapshots. A test may block a cluster's servers, which then
// report no slots and refuse Settle as unreachable servers do.

// fakeTopologyState is every cluster's topology as the fake servers have it.
type fakeTopologyState struct {
	wire       *fakeWire
	mu         sync.Mutex
	blocked    map[types.NamespacedName]bool
	formed     map[types.NamespacedName]bool
	bootstraps map[types.NamespacedName]int
}

func newFakeTopologyState(w *fakeWire) *fakeTopologyState {
	return &fakeTopologyState{
		wire: w, blocked: map[types.NamespacedName]bool{}, formed: map[types.NamespacedName]bool{},
		bootstraps: map[types.NamespacedName]int{},
	}
}

// cluster is the topology port of one cluster's servers.
func (s *fakeTopologyState) cluster(key types.NamespacedName) *fakeTopology {
	return &fakeTopology{s: s, key: key}
}

func (s *fakeTopologyState) block(key types.NamespacedName, on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.blocked[key] = on
}

func (s *fakeTopologyState) bootstrapCount(key types.NamespacedName) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bootstraps[key]
}

// fakeTopology is one cluster's servers as the Topology and Failovers ports reach them.
type fakeTopology struct {
	s   *fakeTopologyState
	key types.NamespacedName
}

func (t *fakeTopology) Bootstrap(_ context.Context, nodes []model.Node, shards int) error {
	t.s.wire.write(t.key)
	t.s.mu.Lock()
	defer t.s.mu.Unlock()
	t.s.bootstraps[t.key]++
	t.s.formed[t.key] = true
	return nil
}

// BootstrapSlots is Bootstrap: the suite's fake keeps no slots.
func (t *fakeTopology) BootstrapSlots(ctx context.Context, nodes []model.Node, shards int, _ [][]model.SlotRange) error {
	return t.Bootstrap(ctx, nodes, shards)
}

// The day-2 calls are served by the day-2 fakes of TestActivePhase (fakes_day2_test.go), not
// here: the suite's clusters converge and never need them, so any call is a write the tests
// can see (and fail on).
func (t *fakeTopology) write() error {
	t.s.wire.write(t.key)
	return fmt.Errorf("fake: a day-2 call in the suite (TestActivePhase's day-2 fakes serve those)")
}

// Settle succeeds on a formed cluster that is not blocked, as CONFIG SET on reachable
// servers does; the fake keeps no settings.
func (t *fakeTopology) Settle(context.Context, []model.Node) error {
	t.s.wire.write(t.key)
	t.s.mu.Lock()
	defer t.s.mu.Unlock()
	if t.s.blocked[t.key] {
		return fmt.Errorf("%w: fake: servers blocked", model.ErrUnreachable)
	}
	return nil
}

func (t *fakeTopology) Replicate(context.Context, []model.Node, string, int) error {
	return t.write()
}
func (t *fakeTopology) Rebalance(context.Context, []model.Node, []string) (valkeyops.MoveStats, error) {
	return valkeyops.MoveStats{}, t.write()
}
func (t *fakeTopology) RemoveNode(context.Context, []model.Node, string) error { return t.write() }
func (t *fakeTopology) Failover(context.Context, []model.Node, string) error   { return t.write() }
func (t *fakeTopology) Takeover(context.Context, []model.Node, string) error   { return t.write() }
func (t *fakeTopology) ForceFailover(context.Context, []model.Node, string) error {
	return t.write()
}
func (t *fakeTopology) AssignSlots(context.Context, []model.Node, string, []model.SlotRange) error {
	return t.write()
}
func (t *fakeTopology) Forget(context.Context, []model.Node, []string) error { return t.write() }

// Observe renders the CLUSTER NODES text every server of a formed cluster would report
// (shard i's first node by name is its primary and owns the i-th even slot range) and parses
// it with valkeyops. A cluster not bootstrapped, or blocked by a test, reports
// cluster_state fail with no slots assigned.
func (t *fakeTopology) Observe(_ context.Context, nodes []model.Node) (*model.Snapshot, error) {
	t.s.wire.call(t.key)
	t.s.mu.Lock()
	healthy := t.s.formed[t.key] && !t.s.blocked[t.key]
	t.s.mu.Unlock()
	byShard := map[int][]model.Node{}
	for _, n := range nodes {
		byShard[n.Shard] = append(byShard[n.Shard], n)
	}
	ranges := model.EvenRanges(len(byShard))
	type line struct{ id, role, primary, slots string }
	lines := map[string]line{}
	for shard, members := range byShard {
		sort.Slice(members, func(i, j int) bool { return members[i].Name < members[j].Name })
		primaryID := "id-" + members[0].Name
		for i, n := range members {
			l := line{id: "id-" + n.Name, role: "master", primary: "-"}
			if i > 0 {
				l.role, l.primary = "slave", primaryID
			} else if healthy && shard < len(ranges) {
				l.slots = ranges[shard].String()
			}
			lines[n.Name] = l
		}
	}
	snap := &model.Snapshot{}
	for _, n := range nodes {
		var text strings.Builder
		for _, m := range nodes {
			l := lines[m.Name]
			flags := l.role
			if m.Name == n.Name {
				flags = "myself," + flags
			}
			fmt.Fprintf(&text, "%s %s@16379 %s %s 0 0 1 connected %s\n", l.id, m.Addr, flags, l.primary, l.slots)
		}
		view, err := model.ParseClusterNodes(text.String())
		if err != nil {
			return nil, err
		}
		st := model.NodeState{Node: n, Reachable: true, ID: lines[n.Name].id, View: view,
			Role: model.RolePrimary, PrimaryLink: model.PrimaryLinkUp, ClusterState: "fail", KnownNodes: len(nodes)}
		if l := lines[n.Name]; l.role == "slave" {
			st.Role, st.PrimaryID = model.RoleReplica, l.primary
		}
		if healthy {
			st.ClusterState, st.SlotsAssigned = "ok", model.SlotCount
			st.Slots = st.Self().Slots
		}
		snap.Nodes = append(snap.Nodes, st)
	}
	return snap, nil
}
