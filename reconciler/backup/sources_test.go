package backup

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gomomento/valkey-operator/reconciler/views"
	"github.com/gomomento/valkey-operator/valkeyops/model"
)

// TestChooseSources: each shard is snapshotted from its most caught-up in-sync replica, and
// from its primary only when no replica qualifies; a failed stream is retried from the next
// in-sync replica, then the primary, never from a replica that is not in sync; a backup that
// would miss slots is refused.
func TestChooseSources(t *testing.T) {
	members := []member{
		{"p0", 0, "10.0.0.1"}, {"r0a", 0, "10.0.0.2"}, {"r0b", 0, "10.0.0.3"},
		{"p1", 1, "10.0.0.4"}, {"r1", 1, "10.0.0.5"},
	}
	lower := []model.SlotRange{{Start: 0, End: 8191}}
	upper := []model.SlotRange{{Start: 8192, End: 16383}}
	primary := func(name, id string, slots []model.SlotRange) model.NodeState {
		return model.NodeState{Node: model.Node{Name: name}, Reachable: true, ID: id, Role: model.RolePrimary, Slots: slots}
	}
	replica := func(name, of string, offset int64, mutate ...func(*model.NodeState)) model.NodeState {
		s := model.NodeState{Node: model.Node{Name: name}, Reachable: true, ID: name + "-id", Role: model.RoleReplica, PrimaryID: of,
			PrimaryLink: model.PrimaryLinkUp, ReplOffset: offset}
		for _, m := range mutate {
			m(&s)
		}
		return s
	}
	syncing := func(s *model.NodeState) { s.SyncInProgress = true }
	down := func(s *model.NodeState) { s.PrimaryLink = model.PrimaryLinkDown }
	loading := func(s *model.NodeState) { s.Loading = true }

	tests := []struct {
		name    string
		nodes   []model.NodeState
		want    map[int][]string // shard -> candidates, in the order they are tried
		primary map[int]bool
		err     string
	}{
		{
			name:  "the most caught-up in-sync replica",
			nodes: []model.NodeState{primary("p0", "a", lower), replica("r0a", "a", 90), replica("r0b", "a", 100), primary("p1", "b", upper), replica("r1", "b", 5)},
			want:  map[int][]string{0: {"r0b", "r0a", "p0"}, 1: {"r1", "p1"}},
		},
		{
			name:  "replicas still syncing, linked down or loading do not qualify",
			nodes: []model.NodeState{primary("p0", "a", lower), replica("r0a", "a", 90, syncing), replica("r0b", "a", 100, down), primary("p1", "b", upper), replica("r1", "b", 5, loading)},
			want:  map[int][]string{0: {"p0"}, 1: {"p1"}}, primary: map[int]bool{0: true, 1: true},
		},
		{
			name:  "a replica of another primary is not this shard's",
			nodes: []model.NodeState{primary("p0", "a", lower), replica("r0a", "b", 90), primary("p1", "b", upper)},
			want:  map[int][]string{0: {"p0"}, 1: {"r0a", "p1"}}, primary: map[int]bool{0: true},
		},
		{
			name:  "equally caught up: by name; one syncing replica skipped",
			nodes: []model.NodeState{primary("p0", "a", lower), replica("r0b", "a", 100), replica("r0a", "a", 100), primary("p1", "b", upper), replica("r1", "b", 5, syncing)},
			want:  map[int][]string{0: {"r0a", "r0b", "p0"}, 1: {"p1"}}, primary: map[int]bool{1: true},
		},
		{
			name:  "slots no reachable primary owns",
			nodes: []model.NodeState{primary("p0", "a", lower), {Node: model.Node{Name: "p1"}, Reachable: false}},
			err:   "own 8192 of 16384 slots",
		},
		{
			name:  "two primaries of one shard with slots",
			nodes: []model.NodeState{primary("p0", "a", lower), primary("r0a", "c", upper)},
			err:   "shard 0 has two primaries",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := chooseSources(members, &model.Snapshot{Nodes: tc.nodes})
			if tc.err != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.err)
				return
			}
			require.NoError(t, err)
			sources := map[int][]string{}
			for i, s := range got {
				assert.Equal(t, i, s.Index, "in shard order")
				for _, m := range s.Candidates {
					sources[s.Index] = append(sources[s.Index], m.Name)
				}
				assert.Equal(t, s.Candidates[0], s.Source())
				assert.Equal(t, tc.primary[s.Index], s.FromPrimary, "shard %d from its primary", s.Index)
			}
			assert.Equal(t, tc.want, sources)
			assert.Equal(t, []string{"0-8191"}, rangeStrings(got[0].Slots))
		})
	}
}

func TestManifestRoundTripAndRefusals(t *testing.T) {
	m := Manifest{FormatVersion: ManifestFormat, Cluster: "c", Namespace: "ns", Backup: "b", Shards: []views.BackupShard{
		{Index: 0, Object: "ns/c/b/shard-0.rdb", SHA256: "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", Bytes: 10, Slots: []string{"0-16383"}},
	}}
	body, err := m.Encode()
	require.NoError(t, err)
	back, err := DecodeManifest(body)
	require.NoError(t, err)
	assert.Equal(t, m, back)
	for name, edit := range map[string]func(*Manifest){
		"another format":     func(m *Manifest) { m.FormatVersion = 2 },
		"no shard":           func(m *Manifest) { m.Shards = nil },
		"no checksum":        func(m *Manifest) { m.Shards[0].SHA256 = "" },
		"shards misnumbered": func(m *Manifest) { m.Shards[0].Index = 1 },
	} {
		t.Run(name, func(t *testing.T) {
			bad := m
			bad.Shards = append([]views.BackupShard(nil), m.Shards...)
			edit(&bad)
			body, err := bad.Encode()
			require.NoError(t, err)
			_, err = DecodeManifest(body)
			assert.Error(t, err)
		})
	}
}
