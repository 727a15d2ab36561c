//go:build envtest

package reconciler_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gomomento/valkey-operator/internal/testcerts"
	"github.com/gomomento/valkey-operator/reconciler/render"
	"github.com/gomomento/valkey-operator/reconciler/views"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestBadInputIsNamedAndDisturbsNothing is the bad-input suite of the security review (issue
// #11) on a real API server: one case for each finding a user's input can reach. Each case
// shows the clear error the user sees — the API server's refusal with the CRD's message, or a
// Warning Event naming the problem — and, at the end, that a cluster already running on the
// same menu was not disturbed: not one of its objects was written, no Valkey write was sent
// to it, and it is still Active.
//
// Finding 2's second half, a setting valkey-server itself refuses at start-up, needs a real
// server: e2e's TestRefusedSettingIsNamedThenFixed shows its Warning Event.
func TestBadInputIsNamedAndDisturbsNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := newNamespace(t)
	cfg := menu(t, ns, map[string]string{"maxmemory-policy": "allkeys-lru"})
	role := views.Role{U: views.NewRoleObject()}
	role.U.SetName("app-" + ns)
	role.SetCategories([]views.Rule{{Name: "read", Allow: true}})
	require.NoError(t, k8s.Create(ctx, role.U))
	app := views.ACLUser{Username: "app", PasswordHashes: []string{hashHex("app-pw")},
		Permissions: []views.ACLPermission{{RoleRef: role.Name(), Keys: []views.KeyPermission{{Pattern: "app:*", Access: "read"}}}}}
	running := createCluster(t, ns, "running", cfg, clusterOpts{shards: 2, replicas: 1, acl: []views.ACLUser{app}})
	waitState(t, running, views.StateActive)
	waitEvent(t, running, corev1.EventTypeNormal, "StateChanged", "Creating -> Active")
	waitPodsInSync(t, running)
	before := ownedBy(t, running)
	writes := fake.writeCount(running)

	editConfig := func(valkey map[string]string) error {
		c := views.Config{U: views.NewConfigObject()}
		getObj(t, c.U, "", cfg)
		c.SetValkey(valkey)
		return k8s.Update(ctx, c.U)
	}
	editRunning := func(mutate func(views.Cluster)) error {
		c := getCluster(t, running)
		mutate(c)
		return k8s.Update(ctx, c.U)
	}
	newCluster := func(name string) error {
		c := views.Cluster{U: views.NewClusterObject()}
		c.U.SetName(name)
		c.U.SetNamespace(ns)
		c.SetConfigRef(cfg)
		c.SetShards(1)
		return k8s.Create(ctx, c.U)
	}
	refused := []struct {
		finding, input string
		do             func() error
		message        string
	}{
		{"2 config injection", `a value carrying a second directive on a new line`,
			func() error { return editConfig(map[string]string{"maxmemory-policy": "noeviction\nport 6379"}) },
			"spec.valkey values cannot contain control characters"},
		{"2 config injection", "loadmodule",
			func() error { return editConfig(map[string]string{"loadmodule": "/tmp/evil.so"}) },
			"spec.valkey cannot set directives the operator manages"},
		{"2 config injection", "enable-debug-command",
			func() error { return editConfig(map[string]string{"enable-debug-command": "yes"}) },
			"spec.valkey cannot set directives the operator manages"},
		{"2 config injection", "rename-command",
			func() error { return editConfig(map[string]string{"rename-command": "CONFIG x"}) },
			"spec.valkey cannot set directives the operator manages"},
		{"2 config injection", "tls-auth-clients",
			func() error { return editConfig(map[string]string{"tls-auth-clients": "no"}) },
			"spec.valkey cannot set directives the operator manages"},
		{"2 config injection", "dir",
			func() error { return editConfig(map[string]string{"dir": "/etc"}) },
			"spec.valkey cannot set directives the operator manages"},
		{"3 ACL input", "a key pattern with a newline",
			func() error {
				return editRunning(func(c views.Cluster) {
					bad := app
					bad.Permissions = []views.ACLPermission{{RoleRef: role.Name(), Keys: []views.KeyPermission{{Pattern: "app:*\nuser x on nopass +@all", Access: "read"}}}}
					c.SetACL([]views.ACLUser{bad})
				})
			},
			"key patterns cannot contain spaces, control characters, parentheses or quotes"},
		{"3 ACL input", "an unknown ACL category in a ValkeyRole",
			func() error {
				r := views.Role{U: views.NewRoleObject()}
				getObj(t, r.U, "", role.Name())
				r.SetCategories([]views.Rule{{Name: "nosuchcategory", Allow: true}})
				return k8s.Update(ctx, r.U)
			},
			"category names are Valkey's ACL categories, without '@'"},
		{"3 ACL input", "a reserved user name",
			func() error {
				return editRunning(func(c views.Cluster) {
					bad := app
					bad.Username = "replication"
					c.SetACL([]views.ACLUser{bad})
				})
			},
			"acl usernames 'default', 'operator', 'replication' and 'exporter' are reserved for the operator"},
		{"4 names", "a cluster name with a dot", func() error { return newCluster("my.cluster") },
			"ValkeyCluster names start with a lowercase letter"},
		{"4 names", "a cluster name too long for a pod hostname", func() error { return newCluster(strings.Repeat("c", 58)) },
			"ValkeyCluster names are at most 57 characters"},
		{"4 names", "a nodeSelector key that is no label key",
			func() error {
				return editRunning(func(c views.Cluster) {
					c.SetPlacement(views.Placement{NodeSelector: map[string]string{"bad key!": "x"}})
				})
			},
			"spec.placement.nodeSelector keys must be Kubernetes label keys"},
		{"4 names", "a pod annotation key that is no annotation key",
			func() error {
				return editRunning(func(c views.Cluster) { c.SetPodAnnotations(map[string]string{"bad key!": "x"}) })
			},
			"spec.podAnnotations keys must be Kubernetes annotation keys"},
	}
	for _, tt := range refused {
		t.Run("finding "+tt.finding+": "+tt.input, func(t *testing.T) {
			err := tt.do()
			require.Error(t, err, "the API server refuses it")
			assert.Contains(t, err.Error(), tt.message)
		})
	}

	// What no schema can see is named in a Warning Event.
	t.Run("finding 3 ACL input: a command this Valkey release does not know, in a ValkeyRole", func(t *testing.T) {
		acl := &corev1.ConfigMap{}
		getObj(t, acl, ns, render.ACLConfigMapName(running.Name))
		r := views.Role{U: views.NewRoleObject()}
		getObj(t, r.U, "", role.Name())
		r.SetCommands([]views.Rule{{Name: "nosuchcmd", Allow: true}})
		require.NoError(t, k8s.Update(ctx, r.U), "the schema cannot know the release's commands")
		waitEvent(t, running, corev1.EventTypeWarning, "ACLRejected", "+nosuchcmd: no such command")
		// The last good file stays (checked with every other object of running below).
	})
	t.Run("finding 5 foreign objects: a Secret of the new cluster's name exists", func(t *testing.T) {
		foreign := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "other-auth", Namespace: ns}, Data: map[string][]byte{"password": []byte("theirs")}}
		require.NoError(t, k8s.Create(ctx, foreign))
		other := createCluster(t, ns, "other", cfg, clusterOpts{shards: 1})
		waitEvent(t, other, corev1.EventTypeWarning, "ObjectConflict", `Secret "other-auth" exists but was not created by this ValkeyCluster`)
		got := &corev1.Secret{}
		getObj(t, got, ns, "other-auth")
		assert.Equal(t, foreign.ResourceVersion, got.ResourceVersion, "the foreign Secret is untouched")
		assert.Empty(t, listNodes(t, other), "the cluster does not progress")
	})
	t.Run("finding 9 expired certificates: a new cluster with an expired certificate", func(t *testing.T) {
		expired := testcerts.New(t, testcerts.Options{DNSNames: testcerts.ForCluster("expired", ns),
			NotBefore: time.Now().Add(-72 * time.Hour), NotAfter: time.Now().Add(-time.Hour)})
		require.NoError(t, k8s.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "expired-tls", Namespace: ns}, Data: expired.Data()}))
		key := createCluster(t, ns, "expired", cfg, clusterOpts{shards: 1, tlsSecret: "expired-tls"})
		waitEvent(t, key, corev1.EventTypeWarning, "CertificateExpired", `TLS Secret "expired-tls" certificate expired`)
		// Real servers refuse an expired peer on the cluster bus: it cannot form, and says why.
		waitEvent(t, key, corev1.EventTypeWarning, "BootstrapFailed", `bootstrap waits: the TLS certificate of Secret "expired-tls" expired at`)
		assert.Equal(t, views.StateCreating, getCluster(t, key).Status().State, "not Invalid, not formed")
	})

	// More passes of running ran with every bad input in place: nothing of it changed.
	reconciles := passes.of(running)
	require.True(t, pollUntil(waitFor, func() bool { return passes.of(running) > reconciles+2 }), "running was reconciled again")
	assert.Equal(t, before, ownedBy(t, running), "no object of the running cluster was written")
	assert.Equal(t, writes, fake.writeCount(running), "no Valkey write reached the running cluster")
	assert.Equal(t, views.StateActive, getCluster(t, running).Status().State)
}

// ownedBy maps kind/name to resourceVersion for the cluster and everything labelled as its.
func ownedBy(t *testing.T, key types.NamespacedName) map[string]string {
	t.Helper()
	out := snapshot(t, k8s, map[string]client.ObjectList{
		"ValkeyNode": views.NewNodeListObject(), "Pod": &corev1.PodList{}, "Service": &corev1.ServiceList{},
		"Secret": &corev1.SecretList{}, "ConfigMap": &corev1.ConfigMapList{},
	}, client.InNamespace(key.Namespace), client.MatchingLabels{render.LabelCluster: key.Name})
	out["ValkeyCluster/"+key.Name] = getCluster(t, key).U.GetResourceVersion()
	require.Greater(t, len(out), 8, "the running cluster's objects are found")
	return out
}
