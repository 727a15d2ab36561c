//go:build envtest

package reconciler_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/gomomento/valkey-operator/crds"
	"github.com/gomomento/valkey-operator/internal/testcerts"
	"github.com/gomomento/valkey-operator/reconciler"
	"github.com/gomomento/valkey-operator/reconciler/render"
	"github.com/gomomento/valkey-operator/reconciler/views"
	"github.com/gomomento/valkey-operator/valkeyops/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestCreatingToActive walks a new cluster through the bootstrap of docs/status.md: Creating
// with the targetSpec snapshot while pods are not running yet, then Active with targetSpec
// cleared and every ValkeyNode Active with pod IP, node ID and role.
func TestCreatingToActive(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	kubelet.pause(ns, true)
	cfgName := menu(t, ns, map[string]string{"maxmemory-policy": "noeviction"})
	key := createCluster(t, ns, "c1", cfgName, clusterOpts{shards: 3, replicas: 1})

	st := waitState(t, key, views.StateCreating)
	require.NotNil(t, st.Target)
	assert.Equal(t, views.TargetSpec{Shards: 3, ReplicasPerShard: 1}, *st.Target)
	assert.Empty(t, st.Message)

	// Nodes are created and Joining; pods wait for the kubelet; nothing touches Valkey yet.
	require.True(t, pollUntil(waitFor, func() bool { return len(listNodes(t, key)) == 6 && len(listPods(t, key)) == 6 }))
	for _, n := range listNodes(t, key) {
		assert.Equal(t, views.LifecycleJoining, n.Status().Lifecycle)
	}
	assert.Equal(t, 0, fake.bootstrapCount(key), "no bootstrap before pods run")
	assert.Equal(t, views.StateCreating, getCluster(t, key).Status().State)

	kubelet.pause(ns, false)
	st = waitState(t, key, views.StateActive)
	assert.Nil(t, st.Target, "targetSpec cleared at Active")
	assert.Empty(t, st.Message)
	assert.GreaterOrEqual(t, fake.bootstrapCount(key), 1)

	cluster := getCluster(t, key)
	nodes := listNodes(t, key)
	require.Len(t, nodes, 6)
	perShard := map[int]int{}
	roles := map[string]int{}
	for _, n := range nodes {
		s := n.Status()
		assert.Equal(t, views.LifecycleActive, s.Lifecycle, n.Name())
		assert.NotEmpty(t, s.PodIP)
		assert.Equal(t, "id-"+n.Name(), s.NodeID)
		roles[s.Role]++
		perShard[n.Shard()]++
		assert.Regexp(t, `^c1-[0-9a-f]{5}$`, n.Name())
		assert.True(t, metav1.IsControlledBy(n.U, cluster.U), "node owned by the cluster")
		spec := n.Spec()
		assert.Equal(t, "valkey/valkey:9.0.0", spec.Image)
		assert.Equal(t, "9.0.0", spec.Version)
		assert.Equal(t, map[string]string{"maxmemory-policy": "noeviction"}, spec.Valkey)
		assert.NotEmpty(t, spec.SpecHash)
		assert.Equal(t, "bestEffort", spec.Placement.ZoneSpread, "operator default")
		assert.Equal(t, fmt.Sprint(spec.Shard), n.U.GetLabels()[render.LabelShard])
	}
	assert.Equal(t, map[int]int{0: 2, 1: 2, 2: 2}, perShard)
	assert.Equal(t, map[string]int{"primary": 3, "replica": 3}, roles)
	for _, p := range listPods(t, key) {
		require.Len(t, p.OwnerReferences, 1)
		assert.Equal(t, crds.KindNode, p.OwnerReferences[0].Kind, "pods are owned by their ValkeyNode")
	}

	// Owned objects.
	svc := &corev1.Service{}
	getObj(t, svc, ns, "c1")
	assert.Equal(t, corev1.ClusterIPNone, svc.Spec.ClusterIP)
	assert.True(t, svc.Spec.PublishNotReadyAddresses)
	assert.Len(t, svc.Spec.Ports, 2)
	sec := &corev1.Secret{}
	getObj(t, sec, ns, "c1-auth")
	assert.Len(t, sec.Data["password"], 64)
	assert.Len(t, sec.Data["operator-password"], 64)
	assert.NotEqual(t, sec.Data["password"], sec.Data["operator-password"])
	assert.Equal(t, "masteruser replication\nmasterauth "+model.ReplicationPassword(string(sec.Data["operator-password"]))+"\n", string(sec.Data["replication.conf"]))
	assert.Equal(t, render.ExporterPasswords(string(sec.Data["operator-password"])), sec.Data["exporter-passwords.json"])
	cm := &corev1.ConfigMap{}
	getObj(t, cm, ns, "c1-acl")
	// The exact file: the five users, each password only as its hash; the applications'
	// default user administers nothing, the replication user only replicates (no CLUSTER
	// SYNCSLOTS: the image is Valkey 8.0), the exporter user only reads statistics, the backup
	// user only streams a snapshot.
	assert.Equal(t, "user default on #"+hashHex(string(sec.Data["password"]))+" ~* resetchannels &* +@all -@admin -@dangerous +info\n"+
		"user operator on #"+hashHex(string(sec.Data["operator-password"]))+" ~* resetchannels &* +@all\n"+
		"user replication on #"+hashHex(model.ReplicationPassword(string(sec.Data["operator-password"])))+" resetchannels -@all +psync +sync +replconf +ping\n"+
		"user exporter on #"+hashHex(model.ExporterPassword(string(sec.Data["operator-password"])))+" resetchannels -@all +info +cluster|info +latency|latest +latency|histogram +slowlog|len +client|setname\n"+
		"user backup on #"+hashHex(model.BackupPassword(string(sec.Data["operator-password"])))+" resetchannels -@all +replconf +sync\n",
		cm.Data["users.acl"])
	for _, o := range []client.Object{svc, sec, cm} {
		assert.True(t, metav1.IsControlledBy(o, cluster.U), "%s owned by the cluster", o.GetName())
		assert.Equal(t, "valkey-operator", o.GetLabels()["app.kubernetes.io/managed-by"])
		assert.Equal(t, "c1", o.GetLabels()["valkey.gomomento.com/cluster"])
	}

	cred := fake.lastCredentials(key)
	assert.Equal(t, "operator", cred.Username)
	assert.Equal(t, string(sec.Data["operator-password"]), cred.Password)
	assert.False(t, cred.TLS(), "a cluster without spec.tls is dialled in plaintext")

	waitEvent(t, key, corev1.EventTypeNormal, "NodeCreated", "shard 2")
	waitEvent(t, key, corev1.EventTypeNormal, "ClusterFormed", "3 shards")
	waitEvent(t, key, corev1.EventTypeNormal, "StateChanged", "Creating -> Active")
}

// TestSnapshotDefersTopologyEdits: shards/replicas edits made while Creating do not change
// the snapshot or the nodes being bootstrapped; the snapshot is cleared at Active, and the
// edit applies from then on.
func TestSnapshotDefersTopologyEdits(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	cfgName := menu(t, ns, nil)
	key := types.NamespacedName{Namespace: ns, Name: "snap"}
	fake.block(key, true)
	createCluster(t, ns, "snap", cfgName, clusterOpts{shards: 1, replicas: 0})
	waitStatus(t, key, "snapshot", func(s views.Status) bool {
		return s.State == views.StateCreating && s.Target != nil
	})
	require.True(t, pollUntil(waitFor, func() bool { return fake.bootstrapCount(key) > 0 }), "bootstrap ran")

	editCluster(t, key, func(c views.Cluster) {
		c.SetShards(3)
		c.SetReplicasPerShard(2)
	})
	// Let several reconciles pass (each bumps the counter) and check nothing moved.
	before := passes.of(key)
	require.True(t, pollUntil(waitFor, func() bool { return passes.of(key) > before+5 }))
	st := getCluster(t, key).Status()
	assert.Equal(t, views.StateCreating, st.State)
	assert.Equal(t, views.TargetSpec{Shards: 1, ReplicasPerShard: 0}, *st.Target)
	assert.Len(t, listNodes(t, key), 1, "bootstrap topology comes from the snapshot")

	fake.block(key, false)
	st = waitState(t, key, views.StateActive)
	assert.Nil(t, st.Target)
	// Once Active the deferred edit takes effect: the live spec (3x2) is reconciled, while the
	// cluster keeps reporting Active.
	require.True(t, pollUntil(waitFor, func() bool { return len(listNodes(t, key)) == 9 }), "new nodes for the live spec")
	assert.Equal(t, views.StateActive, getCluster(t, key).Status().State)
}

// TestMissingReferencesBlockThenUnblock: a missing ValkeyConfig, a missing base, a baseRef
// cycle and a missing ValkeyImage each keep the cluster Creating with a Warning Event; an
// external fix (no spec edit) unblocks it.
func TestMissingReferencesBlockThenUnblock(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		setup  func(t *testing.T, p string) (configRef string)
		reason string // substring of the Warning Event
		fix    func(t *testing.T, p string)
	}{
		{
			name: "missing config",
			setup: func(t *testing.T, p string) string {
				createImage(t, p+"-img", "valkey/valkey", "8.0.1", "8.0.1")
				return p + "-cfg"
			},
			reason: `ValkeyConfig "%s-cfg" not found`,
			fix:    func(t *testing.T, p string) { createConfig(t, p+"-cfg", p+"-img", "", nil) },
		},
		{
			name: "missing base",
			setup: func(t *testing.T, p string) string {
				createImage(t, p+"-img", "valkey/valkey", "8.0.1", "8.0.1")
				createConfig(t, p+"-cfg", "", p+"-base", nil)
				return p + "-cfg"
			},
			reason: `ValkeyConfig "%s-base" not found (baseRef of ValkeyConfig "%[1]s-cfg")`,
			fix:    func(t *testing.T, p string) { createConfig(t, p+"-base", p+"-img", "", nil) },
		},
		{
			name: "cycle",
			setup: func(t *testing.T, p string) string {
				createImage(t, p+"-img", "valkey/valkey", "8.0.1", "8.0.1")
				createConfig(t, p+"-a", "", p+"-b", nil)
				createConfig(t, p+"-b", p+"-img", p+"-a", nil)
				return p + "-a"
			},
			reason: `baseRef cycle: %s-a -> %[1]s-b -> %[1]s-a`,
			fix: func(t *testing.T, p string) {
				u := views.NewConfigObject()
				require.NoError(t, k8s.Get(context.Background(), types.NamespacedName{Name: p + "-b"}, u))
				views.Config{U: u}.SetBaseRef("")
				require.NoError(t, k8s.Update(context.Background(), u))
			},
		},
		{
			name:   "missing image",
			setup:  func(t *testing.T, p string) string { createConfig(t, p+"-cfg", p+"-img", "", nil); return p + "-cfg" },
			reason: `ValkeyImage "%s-img" not found`,
			fix:    func(t *testing.T, p string) { createImage(t, p+"-img", "valkey/valkey", "8.0.1", "8.0.1") },
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ns := newNamespace(t)
			key := createCluster(t, ns, "c", tc.setup(t, ns), clusterOpts{shards: 1, replicas: 1})
			waitEvent(t, key, corev1.EventTypeWarning, "ConfigUnresolved", fmt.Sprintf(tc.reason, ns))
			st := getCluster(t, key).Status()
			assert.Equal(t, views.StateCreating, st.State)
			assert.Empty(t, st.Message, "message is only for Invalid")
			assert.Empty(t, listNodes(t, key), "no nodes without a resolved config")

			tc.fix(t, ns)
			waitState(t, key, views.StateActive)
			assert.Equal(t, "valkey/valkey:8.0.1", listNodes(t, key)[0].Spec().Image)
		})
	}
}

// TestRestoreRefusedBeforeAnyNode: a cluster created with spec.restoreFrom whose backup
// cannot be read (no such ValkeyBackup; a location whose credentials Secret is missing) waits
// in Creating with a RestoreRefused Warning naming its source and why, and never forms empty
// (no node, no pod). The restores that succeed, and a fetch refused by its checksum, are
// e2e's (TestRestoreFromBackup): they need real servers and a real object store.
func TestRestoreRefusedBeforeAnyNode(t *testing.T) {
	t.Parallel()
	storage := views.BackupStorage{Endpoint: "http://objects.example:8333", Bucket: "backups",
		CredentialsSecret: views.SecretRef{Name: "s3"}}
	tests := []struct {
		name   string
		source views.RestoreSource
		names  string
	}{
		{"a ValkeyBackup", views.RestoreSource{Backup: "nightly-20261201000000"}, `ValkeyBackup "nightly-20261201000000": it does not exist`},
		{"a location", views.RestoreSource{Storage: storage, Path: "prod/cache/nightly"}, `the backup at "prod/cache/nightly": Secret "s3" not found`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ns := newNamespace(t)
			src := tc.source
			key := createCluster(t, ns, "c", menu(t, ns, nil), clusterOpts{shards: 1, replicas: 1, restoreFrom: &src})
			waitEvent(t, key, corev1.EventTypeWarning, reconciler.ReasonRestoreRefused, tc.names)
			st := getCluster(t, key).Status()
			assert.Equal(t, views.StateCreating, st.State)
			assert.Empty(t, listNodes(t, key), "no node is made for an empty cluster")
		})
	}
}

// TestRenderedPod checks the pods as the API server stores them, for both zoneSpread modes.
func TestRenderedPod(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		placement  views.Placement
		tls        bool
		wantSpread []corev1.UnsatisfiableConstraintAction
	}{
		{name: "bestEffort default", placement: views.Placement{Zones: []string{"z-a", "z-b"}, NodeSelector: map[string]string{"pool": "valkey"}},
			wantSpread: []corev1.UnsatisfiableConstraintAction{corev1.ScheduleAnyway, corev1.ScheduleAnyway}},
		{name: "required with TLS", placement: views.Placement{Zones: []string{"z-a", "z-b", "z-c"}, ZoneSpread: "required"}, tls: true,
			wantSpread: []corev1.UnsatisfiableConstraintAction{corev1.DoNotSchedule, corev1.ScheduleAnyway, corev1.ScheduleAnyway}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ns := newNamespace(t)
			o := clusterOpts{shards: 1, replicas: 1, placement: tc.placement,
				annotations: map[string]string{"example.com/team": "payments"}}
			if tc.tls {
				good := testcerts.New(t, testcerts.Options{DNSNames: testcerts.ForCluster("c", ns)})
				require.NoError(t, k8s.Create(context.Background(), &corev1.Secret{
					ObjectMeta: metav1.ObjectMeta{Name: "tls", Namespace: ns}, Data: good.Data()}))
				o.tlsSecret = "tls"
			}
			key := createCluster(t, ns, "c", menu(t, ns, map[string]string{"maxmemory": "100mb"}), o)
			waitState(t, key, views.StateActive)
			pods := listPods(t, key)
			require.Len(t, pods, 2)
			for _, pod := range pods {
				assert.Equal(t, map[string]string{"example.com/team": "payments", render.SafeToEvictAnnotation: "true"}, pod.Annotations)
				assert.Equal(t, pod.Name, pod.Spec.Hostname)
				assert.Equal(t, "c", pod.Spec.Subdomain)
				assert.Equal(t, tc.placement.NodeSelector, pod.Spec.NodeSelector)
				psc := pod.Spec.SecurityContext
				assert.True(t, *psc.RunAsNonRoot)
				assert.EqualValues(t, 999, *psc.RunAsUser)
				assert.Equal(t, corev1.SeccompProfileTypeRuntimeDefault, psc.SeccompProfile.Type)
				ctr := pod.Spec.Containers[0]
				assert.Equal(t, "valkey", ctr.Name)
				assert.Equal(t, []string{"valkey-server"}, ctr.Command)
				assert.False(t, *ctr.SecurityContext.AllowPrivilegeEscalation)
				assert.Equal(t, []corev1.Capability{"ALL"}, ctr.SecurityContext.Capabilities.Drop)
				assert.Equal(t, "100m", ctr.Resources.Limits.Cpu().String())
				assert.Equal(t, "256Mi", ctr.Resources.Requests.Memory().String())
				assert.EqualValues(t, 6379, ctr.ReadinessProbe.TCPSocket.Port.IntValue())
				assert.Subset(t, ctr.Args, []string{"/etc/valkey/conf/valkey.conf", "--cluster-announce-ip", "$(POD_IP)", "--aclfile"})
				assert.NotContains(t, ctr.Args, "--maxmemory", "user settings stay off the command line")
				// The settings are in the node's own ConfigMap, which goes with its ValkeyNode.
				cm := &corev1.ConfigMap{}
				require.NoError(t, k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: pod.Name + "-config"}, cm))
				assert.Contains(t, cm.Data["valkey.conf"], `maxmemory "100mb"`+"\n")
				require.Len(t, cm.OwnerReferences, 1)
				assert.Equal(t, crds.KindNode, cm.OwnerReferences[0].Kind)
				assert.Equal(t, pod.Name, cm.OwnerReferences[0].Name)
				expr := pod.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchExpressions[0]
				assert.Equal(t, "topology.kubernetes.io/zone", expr.Key)
				assert.ElementsMatch(t, tc.placement.Zones, expr.Values)
				var got []corev1.UnsatisfiableConstraintAction
				for _, c := range pod.Spec.TopologySpreadConstraints {
					got = append(got, c.WhenUnsatisfiable)
				}
				assert.Equal(t, tc.wantSpread, got)
				if tc.tls {
					assert.Subset(t, ctr.Args, []string{"--tls-port", "--tls-cluster", "--tls-replication", "/etc/valkey/tls/tls.crt"})
					assert.Contains(t, strings.Join(ctr.Args, " "), "--port 0")
					found := false
					for _, v := range pod.Spec.Volumes {
						if v.Secret != nil && v.Secret.SecretName == "tls" {
							found = true
						}
					}
					assert.True(t, found, "TLS Secret mounted")
				} else {
					assert.Contains(t, strings.Join(ctr.Args, " "), "--port 6379")
					assert.NotContains(t, ctr.Args, "--tls-port")
				}
			}
		})
	}
}

// TestACLConfigMapFollowsRoles: the ACL ConfigMap is rendered from spec.acl and the
// ValkeyRoles it names; a missing role is warned about and left out (fewer rights, never
// more), and creating it re-renders the file.
func TestACLConfigMapFollowsRoles(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	role := "reader-" + ns
	key := createCluster(t, ns, "c", menu(t, ns, nil), clusterOpts{shards: 1, replicas: 0,
		acl: []views.ACLUser{{Username: "app", PasswordHashes: []string{hashHex("app-pw")},
			Permissions: []views.ACLPermission{{RoleRef: role, Keys: []views.KeyPermission{{Pattern: "app:*", Access: "read"}}}}}}})
	waitEvent(t, key, corev1.EventTypeWarning, "RoleMissing", role)
	cm := &corev1.ConfigMap{}
	require.True(t, pollUntil(waitFor, func() bool { return exists(ns, "c-acl", cm) }))
	appLine := func(cm *corev1.ConfigMap) string {
		lines := strings.Split(strings.TrimSpace(cm.Data["users.acl"]), "\n")
		return lines[len(lines)-1]
	}
	assert.Equal(t, "user app on #"+hashHex("app-pw")+" resetchannels -@all", appLine(cm), "no rights from a missing role")

	r := views.Role{U: views.NewRoleObject()}
	r.U.SetName(role)
	r.SetCategories([]views.Rule{{Name: "read", Allow: true}})
	r.SetCommands([]views.Rule{{Name: "keys", Allow: false}})
	require.NoError(t, k8s.Create(context.Background(), r.U))
	good := "user app on #" + hashHex("app-pw") + " %R~app:* resetchannels -@all +@read -keys"
	require.True(t, pollUntil(waitFor, func() bool {
		return exists(ns, "c-acl", cm) && appLine(cm) == good
	}), "ACL re-rendered after the role appeared: %q", cm.Data["users.acl"])

	// A command the cluster's Valkey does not know would stop every server that reads the
	// file at start-up: the edit is refused with a Warning and the last good file stays.
	require.NoError(t, k8s.Get(context.Background(), client.ObjectKeyFromObject(r.U), r.U))
	r.SetCommands([]views.Rule{{Name: "keys", Allow: false}, {Name: "nosuchcmd", Allow: true}})
	require.NoError(t, k8s.Update(context.Background(), r.U))
	msg := waitEvent(t, key, corev1.EventTypeWarning, "ACLRejected", "+nosuchcmd: no such command")
	assert.Contains(t, msg, "the nodes keep the last valid ACL")
	require.True(t, exists(ns, "c-acl", cm))
	assert.Equal(t, good, appLine(cm), "the last good file stays")
}
