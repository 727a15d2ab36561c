//go:build integration

package integration

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valkey-io/valkey-go"

	"github.com/gomomento/valkey-operator/integration/harness"
	"github.com/gomomento/valkey-operator/valkeyops"
	"github.com/gomomento/valkey-operator/valkeyops/model"
)

// TestReplicationUserRunsOnlyReplication: on real servers (8.0 and 9.1), replicas log in to
// their primaries as the replication user, with a password that is not the operator's, and
// replicate (every replica's link is up and it holds the primary's writes). Whoever holds
// that password can run nothing but replication: no data, no configuration (so no reading
// of masterauth), no ACL, no cluster change. On 9.1, where the spec grants it CLUSTER
// SYNCSLOTS and the write commands an atomic migration's target runs as this user, atomic
// slot migrations of slots holding keys succeed with it: no move falls back to MIGRATE, and
// every key is read back. There it may write keys (SET) but still not read them (GET, KEYS),
// flush, configure or reshape anything.
func TestReplicationUserRunsOnlyReplication(t *testing.T) {
	for _, img := range rotationImages {
		t.Run(img.name, func(t *testing.T) {
			t.Parallel()
			atomic := img.image == harness.Image9()
			spec := aclSpec()
			spec.ReplicationSyncsSlots = atomic
			// One attempt per move: a refused atomic migration would show as a failed entry
			// instead of succeeding on a retry.
			f := newFixture(t, harness.Config{Image: img.image, ACL: spec}, 2, 2, valkeyops.Options{AtomicRetries: 1})
			ctx := ctxT(t, 3*time.Minute)
			require.NoError(t, f.admin.Bootstrap(ctx, f.nodes, 2))
			snap := waitHealthy(t, f, f.nodes, 2, 1, 30*time.Second)

			// A write reaches the replica of its shard: WAIT, on the connection that wrote,
			// counts the replica's acknowledgement.
			data := dataClient(t, f.nodes)
			var acked int64
			require.NoError(t, data.Dedicated(func(c valkey.DedicatedClient) error {
				if err := c.Do(ctx, c.B().Set().Key("{a}k").Value("v").Build()).Error(); err != nil {
					return err
				}
				var err error
				acked, err = c.Do(ctx, c.B().Wait().Numreplicas(1).Timeout(5000).Build()).AsInt64()
				return err
			}))
			assert.EqualValues(t, 1, acked, "the replica acknowledged the write")
			replPassword := model.ReplicationPassword(operatorPassword)
			assert.NotEqual(t, operatorPassword, replPassword)
			for _, p := range snap.Primaries() {
				for _, r := range snap.ReplicasOf(p.ID) {
					assert.True(t, r.LinkedToPrimary(), "%s replicates %s", r.Name, p.Name)
					user, err := operatorDo(t, r.Node, operatorPassword, "CONFIG", "GET", "masteruser").AsStrMap()
					require.NoError(t, err)
					assert.Equal(t, model.ReplicationUser, user["masteruser"], "%s logs in as the replication user", r.Name)
				}
			}

			node := snap.Primaries()[0].Node
			repl := loginClient(t, node, model.ReplicationUser, replPassword)
			do := func(args ...string) error {
				return repl.Do(ctx, repl.B().Arbitrary(args...).Build()).Error()
			}
			require.NoError(t, do("PING"), "the replication user logs in")
			forbidden := [][]string{
				{"GET", "{a}k"},
				{"KEYS", "*"},
				{"FLUSHALL"},
				{"CONFIG", "GET", "masterauth"},
				{"CONFIG", "SET", "port", "7000"},
				{"ACL", "SETUSER", model.OperatorUser, "off"},
				{"ACL", "LIST"},
				{"CLUSTER", "RESET"},
				{"CLUSTER", "FORGET", snap.Primaries()[1].ID},
				{"CLUSTER", "FAILOVER"},
				{"CLUSTER", "SETSLOT", "0", "STABLE"},
				{"REPLICAOF", "127.0.0.1", "1"},
				{"SHUTDOWN", "NOSAVE"},
				{"MIGRATE", "127.0.0.1", "1", "k", "0", "1"},
				{"INFO"},
				{"CLIENT", "LIST"},
			}
			if atomic {
				forbidden = append(forbidden, []string{"CLUSTER", "MIGRATESLOTS", "SLOTSRANGE", "0", "0", "NODE", snap.Primaries()[1].ID},
					[]string{"FLUSHDB"}, []string{"SCAN", "0"}, []string{"RESTORE", "{a}r", "0", "x"})
				// What an atomic migration's target runs as this user: writes (on the
				// primary that owns the key's slot, or the answer is MOVED).
				slot, err := data.Do(ctx, data.B().ClusterKeyslot().Key("{a}k").Build()).AsInt64()
				require.NoError(t, err)
				var owner *model.NodeState
				for _, p := range snap.Primaries() {
					for _, r := range p.Slots {
						if int(slot) >= r.Start && int(slot) <= r.End {
							owner = p
						}
					}
				}
				require.NotNil(t, owner, "slot %d has an owner", slot)
				ownerRepl := loginClient(t, owner.Node, model.ReplicationUser, replPassword)
				assert.NoError(t, ownerRepl.Do(ctx, ownerRepl.B().Arbitrary("SET", "{a}k", "v").Build()).Error(), "writes keys on 9.1")
			} else {
				forbidden = append(forbidden, []string{"SET", "{a}k", "x"})
			}
			for _, cmd := range forbidden {
				err := do(cmd...)
				if assert.Error(t, err, "%v", cmd) {
					assert.True(t, strings.HasPrefix(err.Error(), "NOPERM"), "%v: %v", cmd, err)
				}
			}
			if !atomic {
				return
			}

			// Move slots holding keys between the two shards; each move is an atomic migration
			// whose source logs in to the target as the replication user, and whose target
			// runs the keys' writes as that user.
			fill(t, data, "r:", 20_000)
			from := snap.Primaries()[0]
			held, err := operatorDo(t, from.Node, operatorPassword, "DBSIZE").AsInt64()
			require.NoError(t, err)
			require.Positive(t, held, "the drained primary holds keys")
			moved, err := f.admin.Rebalance(ctx, f.nodes, []string{from.Name})
			require.NoError(t, err, "drain %s", from.Name)
			assert.Equal(t, model.CountSlots(from.Slots), moved.Slots, "every slot of the drained primary moved")
			assert.Equal(t, moved.Slots, moved.AtomicSlots, "every slot moved by atomic migration")
			assert.Zero(t, moved.MigrateSlots, "no slot fell back to MIGRATE")
			assert.EqualValues(t, held, moved.Keys, "the drained primary's keys moved")
			verify(t, data, "r:", seq(20_000))
			entries, err := operatorDo(t, from.Node, operatorPassword, "CLUSTER", "GETSLOTMIGRATIONS").ToArray()
			require.NoError(t, err)
			require.NotEmpty(t, entries, "the moves ran as atomic migrations")
			for _, e := range entries {
				m, err := e.AsStrMap()
				require.NoError(t, err)
				assert.Equal(t, "success", m["state"], "migration %s %s: %s", m["operation"], m["slot_ranges"], m["message"])
			}
			after, err := f.admin.Observe(ctx, f.nodes)
			require.NoError(t, err)
			assert.Empty(t, after.ByName(from.Name).Slots, "drained")
		})
	}
}

// loginClient is a single connection to n as user.
func loginClient(t *testing.T, n model.Node, user, password string) valkey.Client {
	t.Helper()
	c, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{n.Addr}, Username: user, Password: password,
		ForceSingleClient: true, DisableCache: true, DisableRetry: true})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}
