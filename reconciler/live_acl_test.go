//go:build envtest

package reconciler_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/gomomento/valkey-operator/reconciler/views"
	"github.com/gomomento/valkey-operator/valkeyops/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TestLiveCredentials drives the live ACL and auth Secret rotation through the real manager
// on a real API server, with fake servers that boot from the mounted files and refuse a login
// their operator user does not accept: an ACL edit reaches every server; a changed
// operator-password and then a deleted auth Secret are rotated onto every server, replicas'
// masterauth and the backup user's derived password included, without a single refused login; the record of the accepted password
// follows; a deleted record is put back from what the operator knows.
func TestLiveCredentials(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	ctx := context.Background()
	key := createCluster(t, ns, "c", menu(t, ns, nil), clusterOpts{shards: 2, replicas: 1})
	waitState(t, key, views.StateActive)
	nodes := listNodes(t, key)
	require.Len(t, nodes, 4)

	// serversHold waits until every server holds what check accepts.
	serversHold := func(what string, check func(*fakeAuthServer) error) {
		t.Helper()
		var last error
		ok := pollUntil(waitFor, func() bool {
			for _, n := range nodes {
				s := fake.creds.held(key, n.Name())
				if s == nil {
					last = fmt.Errorf("%s not read yet", n.Name())
					return false
				}
				if last = check(s); last != nil {
					last = fmt.Errorf("%s: %w", n.Name(), last)
					return false
				}
			}
			return true
		})
		require.True(t, ok, "%s: %v", what, last)
	}
	hashesAre := func(s *fakeAuthServer, user string, pws ...string) error {
		var want []string
		for _, pw := range pws {
			want = append(want, model.HashPassword(pw))
		}
		if got := s.users[user].Hashes; !assert.ObjectsAreEqual(want, got) {
			return fmt.Errorf("user %s accepts %d password(s), not the %d wanted", user, len(got), len(want))
		}
		return nil
	}
	secret := func(name string) map[string][]byte {
		s := &corev1.Secret{}
		getObj(t, s, ns, name)
		return s.Data
	}
	// rotated waits until every server, the login and the record are on the auth Secret's
	// current passwords, and only on them.
	rotated := func(what string) map[string][]byte {
		t.Helper()
		var auth map[string][]byte
		serversHold(what, func(s *fakeAuthServer) error {
			auth = secret("c-auth")
			op, app := string(auth["operator-password"]), string(auth["password"])
			if err := hashesAre(s, model.OperatorUser, op); err != nil {
				return err
			}
			if err := hashesAre(s, model.ReplicationUser, model.ReplicationPassword(op)); err != nil {
				return err
			}
			if err := hashesAre(s, model.BackupUser, model.BackupPassword(op)); err != nil {
				return err
			}
			if err := hashesAre(s, "default", app); err != nil {
				return err
			}
			if s.masterUser != model.ReplicationUser || s.masterAuthHash != model.HashPassword(model.ReplicationPassword(op)) {
				return fmt.Errorf("the replication login is not the one derived from the operator password")
			}
			return nil
		})
		require.True(t, pollUntil(waitFor, func() bool {
			return string(secret("c-auth-applied")["operator-password"]) == string(auth["operator-password"]) &&
				fake.lastCredentials(key).Password == string(auth["operator-password"])
		}), "%s: the record and the login follow", what)
		assert.Equal(t, "masteruser replication\nmasterauth "+model.ReplicationPassword(string(auth["operator-password"]))+"\n", string(secret("c-auth")["replication.conf"]),
			"%s: new pods start with the new replication login", what)
		assert.Zero(t, fake.creds.refusedCount(key), "%s: no server ever refused the operator's login", what)
		return auth
	}
	first := rotated("the cluster as created")

	// An ACL user added to the spec reaches every running server, and so does an edit of the
	// ValkeyRole it names.
	role := views.Role{U: views.NewRoleObject()}
	role.U.SetName("reader-" + ns)
	role.SetCategories([]views.Rule{{Name: "read", Allow: true}})
	require.NoError(t, k8s.Create(ctx, role.U))
	editCluster(t, key, func(c views.Cluster) {
		c.SetACL([]views.ACLUser{{Username: "app", PasswordHashes: []string{hashHex("app-pw")},
			Permissions: []views.ACLPermission{{RoleRef: role.Name(), Keys: []views.KeyPermission{{Pattern: "app:*", Access: "read"}}}}}})
	})
	commandsAre := func(want string) func(*fakeAuthServer) error {
		return func(s *fakeAuthServer) error {
			if err := hashesAre(s, "app", "app-pw"); err != nil {
				return err
			}
			if got := s.users["app"].Selectors; len(got) != 1 || got[0].Commands != want || got[0].Keys != "%R~app:*" {
				return fmt.Errorf("app's permissions are %+v", got)
			}
			return nil
		}
	}
	serversHold("the new ACL user", commandsAre("-@all +@read"))
	waitEvent(t, key, corev1.EventTypeNormal, "ACLApplied", "users changed: app")
	require.True(t, pollUntil(waitFor, func() bool {
		getObj(t, role.U, "", role.Name())
		role.SetCommands([]views.Rule{{Name: "flushall", Allow: false}})
		return k8s.Update(ctx, role.U) == nil
	}), "ValkeyRole edited")
	serversHold("the edited role", commandsAre("-@all +@read -flushall"))

	// The operator password changed in the auth Secret.
	require.NoError(t, updateSecret(ctx, types.NamespacedName{Namespace: ns, Name: "c-auth"}, func(s *corev1.Secret) {
		s.Data["operator-password"] = []byte("a-new-operator-password")
	}))
	second := rotated("operator-password edited")
	assert.Equal(t, "a-new-operator-password", string(second["operator-password"]))
	assert.Equal(t, first["password"], second["password"], "the application password is untouched")
	waitEvent(t, key, corev1.EventTypeNormal, "CredentialRotated", "logs in with it")
	waitEvent(t, key, corev1.EventTypeNormal, "CredentialRotated", "previous operator and replication passwords")

	// The auth Secret deleted: everything regenerated, then rotated live.
	require.NoError(t, k8s.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "c-auth"}}))
	require.True(t, pollUntil(waitFor, func() bool {
		s := &corev1.Secret{}
		return k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: "c-auth"}, s) == nil &&
			string(s.Data["operator-password"]) != string(second["operator-password"])
	}), "the auth Secret is recreated with new passwords")
	third := rotated("auth Secret deleted")
	assert.NotEqual(t, second["password"], third["password"], "a new application password")
	serversHold("the ACL user survives", func(s *fakeAuthServer) error { return hashesAre(s, "app", "app-pw") })
	waitEvent(t, key, corev1.EventTypeWarning, "AuthSecretUnavailable", "was missing")

	// The record deleted: put back with the password every server accepts.
	require.NoError(t, k8s.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "c-auth-applied"}}))
	require.True(t, pollUntil(waitFor, func() bool {
		s := &corev1.Secret{}
		return k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: "c-auth-applied"}, s) == nil &&
			string(s.Data["operator-password"]) == string(third["operator-password"])
	}), "the record is recreated")
	assert.Equal(t, views.StateActive, getCluster(t, key).Status().State)
	assert.Zero(t, fake.creds.refusedCount(key), "no server ever refused the operator's login")
}

func updateSecret(ctx context.Context, key types.NamespacedName, mutate func(*corev1.Secret)) error {
	for {
		s := &corev1.Secret{}
		if err := k8s.Get(ctx, key, s); err != nil {
			return err
		}
		mutate(s)
		err := k8s.Update(ctx, s)
		if err == nil || !apierrors.IsConflict(err) {
			return err
		}
	}
}
