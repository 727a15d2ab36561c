//go:build integration

package integration

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valkey-io/valkey-go"

	"github.com/gomomento/valkey-operator/integration/harness"
	"github.com/gomomento/valkey-operator/valkeyops"
	"github.com/gomomento/valkey-operator/valkeyops/model"
)

// TestClientAnnounce: on Valkey 8.0 and 9.1, what the operator sets live for external access
// (Admin.SetClientAnnounce: cluster-announce-client-ipv4, and on 9.1 the client ports) makes
// CLUSTER SHARDS on every server and a MOVED redirect name the client address, while each
// replica still replicates from its primary's container IP and the cluster stays healthy over
// the bus; Admin.ClientAnnounce reads it back; the zero address restores the container
// addresses. Observe still reports every server's view at the container addresses (what the
// operator plans with).
func TestClientAnnounce(t *testing.T) {
	for _, tc := range []struct {
		image string
		ports bool // the release has cluster-announce-client-port (a NodePort's own port)
	}{{harness.Image(), false}, {harness.Image9(), true}} {
		t.Run(tc.image, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, harness.Config{Image: tc.image}, 2, 2, valkeyops.Options{})
			ctx := ctxT(t, 2*time.Minute)
			require.NoError(t, f.admin.Bootstrap(ctx, f.nodes, 2))
			snap := waitHealthy(t, f, f.nodes, 2, 1, 30*time.Second)

			want := map[string]string{}      // node ID -> the host:port clients are to be given
			container := map[string]string{} // node ID -> its container address
			byName := map[string]model.ClientAddress{}
			for i, n := range f.nodes {
				a := model.ClientAddress{IP: fmt.Sprintf("192.0.2.%d", 10+i)}
				if tc.ports {
					a.Port = 31000 + i
				}
				require.NoError(t, f.admin.SetClientAnnounce(ctx, n, a, tc.ports))
				got, err := f.admin.ClientAnnounce(ctx, n)
				require.NoError(t, err)
				assert.Equal(t, a, got, "read back")
				id := snap.ByName(n.Name).ID
				want[id], container[id], byName[n.Name] = a.String(), n.Addr, a
			}
			for _, n := range f.nodes {
				var last map[string]string
				ok := assert.Eventually(t, func() bool {
					last = shardEndpoints(ctx, t, n)
					return assert.ObjectsAreEqual(want, last)
				}, 20*time.Second, 100*time.Millisecond, "CLUSTER SHARDS on %s names every server's client address", n.Name)
				if !ok {
					t.Logf("CLUSTER SHARDS on %s: %v, want %v", n.Name, last, want)
				}
			}

			// The operator's own observation still places every server at its container address.
			told := make([]model.Node, len(f.nodes)) // as the operator passes them: with what each announces
			for i, n := range f.nodes {
				told[i] = n
				told[i].ClientAddr = byName[n.Name].String()
			}
			obs, err := f.admin.Observe(ctx, told)
			require.NoError(t, err)
			for _, st := range obs.Nodes {
				require.True(t, st.Reachable, st.Name)
				for _, p := range st.View {
					assert.Equal(t, container[p.ID], p.Addr(), "%s's view of %s, as Observe reports it", st.Name, p.ID)
				}
			}

			// A key of the other shard: the redirect names the client address of its primary.
			primaries := snap.Primaries()
			require.Len(t, primaries, 2)
			from, to := primaries[0], primaries[1]
			c := operatorClient(t, from.Node)
			key := keyServedBy(ctx, t, c, to.Slots)
			err = c.Do(ctx, c.B().Get().Key(key).Build()).Error()
			verr, ok := valkey.IsValkeyErr(err)
			require.True(t, ok, "a MOVED error: %v", err)
			addr, moved := verr.IsMoved()
			require.True(t, moved, "a MOVED error: %v", err)
			assert.Equal(t, byName[to.Name].String(), addr, "the redirect names the client address")

			// Replication and the bus stay on the container addresses.
			for _, st := range snap.Nodes {
				if st.Role != model.RoleReplica {
					continue
				}
				rc := operatorClient(t, st.Node)
				info, err := rc.Do(ctx, rc.B().Info().Section("replication").Build()).ToString()
				require.NoError(t, err)
				host, _, err := net.SplitHostPort(container[st.PrimaryID])
				require.NoError(t, err)
				assert.Contains(t, info, "master_host:"+host+"\r", "%s replicates from its primary's container IP", st.Name)
				assert.Contains(t, info, "master_link_status:up", st.Name)
			}
			waitHealthy(t, f, f.nodes, 2, 1, 10*time.Second)

			for _, n := range f.nodes {
				require.NoError(t, f.admin.SetClientAnnounce(ctx, n, model.ClientAddress{}, tc.ports))
			}
			assert.Eventually(t, func() bool {
				return assert.ObjectsAreEqual(container, shardEndpoints(ctx, t, f.nodes[0]))
			}, 20*time.Second, 100*time.Millisecond, "cleared: CLUSTER SHARDS names the container addresses again")
		})
	}
}

// operatorClient is a single-connection client of node n as the operator's user.
func operatorClient(t *testing.T, n model.Node) valkey.Client {
	t.Helper()
	c, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{n.Addr}, Username: model.OperatorUser, Password: operatorPassword,
		ForceSingleClient: true, DisableCache: true, DisableRetry: true})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

// shardEndpoints is CLUSTER SHARDS on n: each node's ip:port, by node ID.
func shardEndpoints(ctx context.Context, t *testing.T, n model.Node) map[string]string {
	t.Helper()
	c := operatorClient(t, n)
	shards, err := c.Do(ctx, c.B().Arbitrary("CLUSTER", "SHARDS").Build()).ToArray()
	require.NoError(t, err)
	out := map[string]string{}
	for _, s := range shards {
		m, err := s.AsMap()
		require.NoError(t, err)
		list := m["nodes"]
		nodes, err := list.ToArray()
		require.NoError(t, err)
		for _, nd := range nodes {
			fields, err := nd.AsMap()
			require.NoError(t, err)
			idMsg, ipMsg, portMsg := fields["id"], fields["ip"], fields["port"]
			id, _ := idMsg.ToString()
			ip, _ := ipMsg.ToString()
			port, _ := portMsg.AsInt64()
			out[id] = net.JoinHostPort(ip, strconv.FormatInt(port, 10))
		}
	}
	return out
}

// keyServedBy finds a key whose slot lies in slots (CLUSTER KEYSLOT, asked of c).
func keyServedBy(ctx context.Context, t *testing.T, c valkey.Client, slots []model.SlotRange) string {
	t.Helper()
	for i := 0; i < 1000; i++ {
		key := "k" + strconv.Itoa(i)
		slot, err := c.Do(ctx, c.B().ClusterKeyslot().Key(key).Build()).AsInt64()
		require.NoError(t, err)
		for _, r := range slots {
			if int(slot) >= r.Start && int(slot) <= r.End {
				return key
			}
		}
	}
	require.FailNow(t, "no key found in "+fmt.Sprint(slots))
	return ""
}
