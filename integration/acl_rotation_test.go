//go:build integration

package integration

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valkey-io/valkey-go"

	"github.com/gomomento/valkey-operator/integration/harness"
	"github.com/gomomento/valkey-operator/internal/loadgen"
	"github.com/gomomento/valkey-operator/valkeyops"
	"github.com/gomomento/valkey-operator/valkeyops/model"
)

var rotationImages = []struct{ name, image string }{{"valkey8", harness.Image()}, {"valkey9", harness.Image9()}}

// TestReadAuthAgreesWithSpec: what ReadAuth reads back from real servers compares equal to
// the spec they were given (file or live), so a converged cluster is never re-applied, and a
// live edit shows up as drift naming the user until ApplyACL removes it.
func TestReadAuthAgreesWithSpec(t *testing.T) {
	rich := []model.ACLUser{{
		Name:           "app",
		PasswordHashes: []string{model.HashPassword("app-1"), model.HashPassword("app-2")},
		Permissions: []model.ACLPermission{
			{
				Categories: []model.ACLRule{{Name: "read", Allow: true}, {Name: "write", Allow: true}, {Name: "dangerous", Allow: false}},
				Commands:   []model.ACLRule{{Name: "flushall", Allow: false}, {Name: "cluster|slots", Allow: true}},
				Keys:       []model.KeyPattern{{Pattern: "app:*", Access: "readwrite"}, {Pattern: "ro:*", Access: "read"}},
				Channels:   []string{"news.*"},
			},
			{Commands: []model.ACLRule{{Name: "set", Allow: true}}, Keys: []model.KeyPattern{{Pattern: "tmp:*", Access: "write"}}},
		},
	}, {Name: "nobody", PasswordHashes: []string{model.HashPassword("x")}}}
	for _, img := range rotationImages {
		t.Run(img.name, func(t *testing.T) {
			t.Parallel()
			spec := aclSpec(rich...)
			spec.OperatorExtraHashes = []string{model.HashPassword("next-operator-secret")}
			spec.ReplicationExtraHashes = []string{model.HashPassword(model.ReplicationPassword("next-operator-secret"))}
			// On 9.1 the replication user's atomic-migration rights (write commands, ~*) as
			// the operator grants them: the server must report them as rendered, or every
			// pass would see drift.
			spec.ReplicationSyncsSlots = img.image == harness.Image9()
			f := newFixture(t, harness.Config{Image: img.image, ACL: spec}, 1, 2, valkeyops.Options{})
			ctx := ctxT(t, 2*time.Minute)
			require.NoError(t, f.admin.Bootstrap(ctx, f.nodes, 1))
			waitHealthy(t, f, f.nodes, 1, 1, 30*time.Second)

			held := readAuth(t, f.admin, f.nodes)
			for _, st := range held {
				assert.Empty(t, model.ACLDrift(spec, st.Users), "%s holds the file it started with", st.Node.Name)
				assert.Equal(t, model.ReplicationUser, st.MasterUser, "%s", st.Node.Name)
				assert.Equal(t, model.HashPassword(model.ReplicationPassword(operatorPassword)), st.MasterAuthHash, "%s: masterauth as Bootstrap set it", st.Node.Name)
			}

			edited := aclSpec(rich[0])
			edited.ReplicationSyncsSlots = spec.ReplicationSyncsSlots
			edited.Users[0].PasswordHashes = edited.Users[0].PasswordHashes[1:]
			for _, st := range held {
				assert.Equal(t, []string{"user app: password hashes differ", "user nobody: not in the spec", "user operator: password hashes differ", "user replication: password hashes differ"},
					model.ACLDrift(edited, st.Users), "%s", st.Node.Name)
			}
			require.NoError(t, f.admin.ApplyACL(ctx, f.nodes, edited))
			for _, st := range readAuth(t, f.admin, f.nodes) {
				assert.Empty(t, model.ACLDrift(edited, st.Users), "%s holds the live edit", st.Node.Name)
			}
		})
	}
}

// TestCredentialRotationLive rotates the operator's password the way the operator does while
// a writer runs: the new password is added (both accepted, and both replication passwords
// derived from them), the replication login moves to the new one, then the old ones are
// removed. The old password is then refused everywhere, and a replica
// whose link to its primary breaks re-authenticates with the new one. A negative control
// proves the check: with a masterauth nobody accepts, the link stays down and the primary's
// ACL LOG records the refusal. The application password is replaced too: connections already
// authenticated keep writing, new logins need the new password. No acknowledged write is lost.
func TestCredentialRotationLive(t *testing.T) {
	const newOperator, newDefault = "operator-secret-2", "default-secret-2"
	for _, img := range rotationImages {
		t.Run(img.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, harness.Config{Image: img.image}, 1, 2, valkeyops.Options{})
			ctx := ctxT(t, 3*time.Minute)
			require.NoError(t, f.admin.Bootstrap(ctx, f.nodes, 1))
			snap := waitHealthy(t, f, f.nodes, 1, 1, 30*time.Second)
			primary := snap.Primaries()[0]
			replica := snap.ReplicasOf(primary.ID)[0]

			c := dataClient(t, f.nodes)
			w := loadgen.Start(c, loadgen.Options{Prefix: "rot:", Pace: time.Millisecond, Timeout: 5 * time.Second})
			require.Eventually(t, func() bool { return w.Acked() > 100 }, 30*time.Second, 10*time.Millisecond, "writer running")

			// 1. Both operator passwords accepted everywhere.
			both := aclSpec()
			both.OperatorExtraHashes = []string{model.HashPassword(newOperator)}
			both.ReplicationExtraHashes = []string{model.HashPassword(model.ReplicationPassword(newOperator))}
			require.NoError(t, f.admin.ApplyACL(ctx, f.nodes, both))
			next := newAdmin(t, newOperator)
			for _, a := range []*valkeyops.Admin{f.admin, next} {
				for _, st := range readAuth(t, a, f.nodes) {
					assert.Empty(t, model.ACLDrift(both, st.Users))
				}
			}

			// 2. The replication login follows the new login.
			require.NoError(t, next.SyncReplicationAuth(ctx, f.nodes))
			for _, st := range readAuth(t, next, f.nodes) {
				assert.Equal(t, model.ReplicationUser, st.MasterUser, "%s", st.Node.Name)
				assert.Equal(t, model.HashPassword(model.ReplicationPassword(newOperator)), st.MasterAuthHash, "%s", st.Node.Name)
			}

			// 3. The old password goes; the application password is replaced at once.
			after := aclSpec()
			after.OperatorPassword, after.DefaultPassword = newOperator, newDefault
			require.NoError(t, next.ApplyACL(ctx, f.nodes, after))
			for _, n := range f.nodes {
				assertRefused(t, n, model.OperatorUser, operatorPassword)
				assertRefused(t, n, model.ReplicationUser, model.ReplicationPassword(operatorPassword))
				assertRefused(t, n, "default", defaultPassword)
				assertAccepted(t, n, model.OperatorUser, newOperator)
				assertAccepted(t, n, "default", newDefault)
			}
			for _, st := range readAuth(t, next, f.nodes) {
				assert.Empty(t, model.ACLDrift(after, st.Users), "%s", st.Node.Name)
			}
			acked := w.Acked()
			require.Eventually(t, func() bool { return w.Acked() > acked+100 }, 30*time.Second, 10*time.Millisecond,
				"connections authenticated with the old application password keep writing")

			// The replica re-authenticates with the new password when its link breaks.
			breakLink(t, primary.Node, replica.Node, newOperator)
			waitLinked(t, next, f.nodes, replica.Name)
			assert.Zero(t, authFailures(t, primary.Node, newOperator), "the primary refused no replication login")

			// Negative control: a replication login nobody accepts keeps the link down.
			setMasterAuth(t, replica.Node, newOperator, model.ReplicationPassword(operatorPassword))
			breakLink(t, primary.Node, replica.Node, newOperator)
			require.Eventually(t, func() bool { return authFailures(t, primary.Node, newOperator) > 0 }, 30*time.Second, 50*time.Millisecond,
				"the primary refuses the replica's old password")
			s, err := next.Observe(ctx, f.nodes)
			require.NoError(t, err)
			assert.False(t, s.ByName(replica.Name).LinkedToPrimary(), "the replica cannot sync with a refused password")
			require.NoError(t, next.SyncReplicationAuth(ctx, []model.Node{replica.Node}))
			waitLinked(t, next, f.nodes, replica.Name)

			res := w.Stop()
			lost, first := loadgen.Missing(ctx, dataClient(t, f.nodes, func(o *valkey.ClientOption) { o.Password = newDefault }), "rot:", res.Acked)
			t.Logf("%s: writes acknowledged=%d rejected=%d lost=%d longest-pause=%s", img.name, len(res.Acked), res.Failed, lost, res.MaxPause.Round(time.Millisecond))
			assert.Zero(t, lost, "acknowledged writes lost; first: %v", first)
		})
	}
}

func newAdmin(t *testing.T, password string) *valkeyops.Admin {
	t.Helper()
	a, err := valkeyops.NewAdmin(valkeyops.Options{Credentials: valkeyops.Credentials{Username: model.OperatorUser, Password: password}})
	require.NoError(t, err)
	t.Cleanup(a.Close)
	return a
}

// readAuth reads every node and requires each to have been read.
func readAuth(t *testing.T, a *valkeyops.Admin, nodes []model.Node) []model.AuthState {
	t.Helper()
	held, err := a.ReadAuth(ctxT(t, 30*time.Second), nodes)
	require.NoError(t, err)
	require.Len(t, held, len(nodes))
	for _, st := range held {
		require.NoError(t, st.Err, "reading %s", st.Node.Name)
	}
	return held
}

// login opens a fresh connection to n as user and pings.
func login(n model.Node, user, password string) error {
	c, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{n.Addr}, Username: user, Password: password,
		ForceSingleClient: true, DisableCache: true, DisableRetry: true})
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return c.Do(ctx, c.B().Ping().Build()).Error()
}

func assertRefused(t *testing.T, n model.Node, user, password string) {
	t.Helper()
	err := login(n, user, password)
	if assert.Error(t, err, "%s refuses the old password of %s", n.Name, user) {
		assert.Contains(t, err.Error(), "WRONGPASS", "%s: refused as a wrong password", n.Name)
	}
}

func assertAccepted(t *testing.T, n model.Node, user, password string) {
	t.Helper()
	assert.NoError(t, login(n, user, password), "%s accepts the new password of %s", n.Name, user)
}

// operatorDo runs one command on n as the operator's user.
func operatorDo(t *testing.T, n model.Node, password string, args ...string) valkey.ValkeyResult {
	t.Helper()
	c, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{n.Addr}, Username: model.OperatorUser, Password: password,
		ForceSingleClient: true, DisableCache: true})
	require.NoError(t, err)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return c.Do(ctx, c.B().Arbitrary(args...).Build())
}

// breakLink drops the replica's connection to its primary, so it reconnects and
// authenticates anew. The primary's ACL LOG is cleared first: refusals logged afterwards are
// this reconnection's.
func breakLink(t *testing.T, primary, replica model.Node, password string) {
	t.Helper()
	require.NoError(t, operatorDo(t, primary, password, "ACL", "LOG", "RESET").Error())
	require.NoError(t, operatorDo(t, replica, password, "CLIENT", "KILL", "TYPE", "master").Error())
}

// authFailures counts the refused logins as the replication user in n's ACL LOG.
func authFailures(t *testing.T, n model.Node, password string) int {
	t.Helper()
	entries, err := operatorDo(t, n, password, "ACL", "LOG").ToArray()
	require.NoError(t, err)
	count := 0
	for _, e := range entries {
		m, err := e.AsMap()
		require.NoError(t, err)
		reason, user := m["reason"], m["username"]
		r, _ := reason.ToString()
		u, _ := user.ToString()
		if r == "auth" && u == model.ReplicationUser {
			count++
		}
	}
	return count
}

func setMasterAuth(t *testing.T, n model.Node, login, masterauth string) {
	t.Helper()
	require.NoError(t, operatorDo(t, n, login, "CONFIG", "SET", "masterauth", masterauth).Error())
}

// waitLinked waits until replica reports its link to the primary up.
func waitLinked(t *testing.T, a *valkeyops.Admin, nodes []model.Node, replica string) {
	t.Helper()
	require.Eventually(t, func() bool {
		s, err := a.Observe(context.Background(), nodes)
		return err == nil && s.ByName(replica).LinkedToPrimary()
	}, 30*time.Second, 50*time.Millisecond, "%s linked to its primary", replica)
}
