package render_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/gomomento/valkey-operator/reconciler/render"
	"github.com/gomomento/valkey-operator/reconciler/resolve"
	"github.com/gomomento/valkey-operator/reconciler/views"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

func cluster(p views.Placement, tlsSecret string) views.Cluster {
	c := views.Cluster{U: views.NewClusterObject()}
	c.U.SetName("c1")
	c.U.SetNamespace("ns1")
	c.SetPlacement(p)
	c.SetTLSSecretRef(tlsSecret)
	return c
}

var resolved = resolve.Resolved{Image: "valkey/valkey:9.0.0", Version: "9.0.0",
	Valkey:    map[string]string{"maxmemory": "1gb", "save": "900 1"},
	Resources: views.Resources{CPU: "500m", Memory: "1Gi"}}

func TestNodeSpecHash(t *testing.T) {
	a := render.NodeSpec(cluster(views.Placement{Zones: []string{"b", "a"}}, ""), 0, resolved, "bestEffort")
	b := render.NodeSpec(cluster(views.Placement{Zones: []string{"a", "b"}, ZoneSpread: "required"}, "tls"), 1, resolved, "bestEffort")
	assert.Equal(t, "bestEffort", a.Placement.ZoneSpread, "operator default applies")
	assert.Equal(t, "required", b.Placement.ZoneSpread)
	assert.Equal(t, a.SpecHash, b.SpecHash, "zoneSpread, TLS secret and shard do not force replacement")
	r2 := resolved
	r2.Image = "valkey/valkey:9.0.1"
	c := render.NodeSpec(cluster(views.Placement{}, ""), 0, r2, "bestEffort")
	assert.NotEqual(t, a.SpecHash, c.SpecHash)
}

func TestPod(t *testing.T) {
	tests := []struct {
		name       string
		placement  views.Placement
		tls        string
		wantSpread []corev1.UnsatisfiableConstraintAction // zone, [cluster-wide zone], hostname
	}{
		{name: "bestEffort", placement: views.Placement{Zones: []string{"z1", "z2"}, NodeSelector: map[string]string{"pool": "valkey"}},
			wantSpread: []corev1.UnsatisfiableConstraintAction{corev1.ScheduleAnyway, corev1.ScheduleAnyway}},
		{name: "required with TLS", placement: views.Placement{Zones: []string{"z1"}, ZoneSpread: "required"}, tls: "c1-tls",
			wantSpread: []corev1.UnsatisfiableConstraintAction{corev1.DoNotSchedule, corev1.ScheduleAnyway, corev1.ScheduleAnyway}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			spec := render.NodeSpec(cluster(tc.placement, tc.tls), 2, resolved, "bestEffort")
			pod := render.Pod("c1-abcde", "ns1", spec, map[string]string{"team": "x"})
			require.Len(t, pod.Spec.Containers, 1)
			ctr := pod.Spec.Containers[0]

			assert.Equal(t, map[string]string{"app.kubernetes.io/managed-by": "valkey-operator", "valkey.gomomento.com/cluster": "c1", "valkey.gomomento.com/shard": "2",
				"valkey.gomomento.com/node": "c1-abcde"}, pod.Labels, "the node label is what its external Service selects")
			assert.Equal(t, map[string]string{"team": "x", "cluster-autoscaler.kubernetes.io/safe-to-evict": "true"}, pod.Annotations)
			assert.Equal(t, []corev1.PodReadinessGate{{ConditionType: "valkey.gomomento.com/in-sync"}}, pod.Spec.ReadinessGates, "Ready only when in sync")
			assert.Equal(t, "c1-abcde", pod.Spec.Hostname)
			assert.Equal(t, "c1", pod.Spec.Subdomain)
			assert.Equal(t, "valkey/valkey:9.0.0", ctr.Image)
			assert.Equal(t, tc.placement.NodeSelector, pod.Spec.NodeSelector)
			sc := ctr.SecurityContext
			assert.True(t, *sc.RunAsNonRoot)
			assert.EqualValues(t, 999, *sc.RunAsUser)
			assert.False(t, *sc.AllowPrivilegeEscalation)
			assert.Equal(t, []corev1.Capability{"ALL"}, sc.Capabilities.Drop)
			assert.Equal(t, corev1.SeccompProfileTypeRuntimeDefault, sc.SeccompProfile.Type)
			assert.Equal(t, "500m", ctr.Resources.Requests.Cpu().String())
			assert.Equal(t, ctr.Resources.Requests, ctr.Resources.Limits)
			assert.EqualValues(t, 6379, ctr.ReadinessProbe.TCPSocket.Port.IntValue())
			assert.EqualValues(t, 1, ctr.ReadinessProbe.PeriodSeconds, "a lost race with the server's start costs at most a second")
			assert.EqualValues(t, 15, ctr.ReadinessProbe.PeriodSeconds*ctr.ReadinessProbe.FailureThreshold, "seconds until a serving pod is unready")

			nodeTerms := pod.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
			assert.Equal(t, "topology.kubernetes.io/zone", nodeTerms[0].MatchExpressions[0].Key)
			var got []corev1.UnsatisfiableConstraintAction
			for _, c := range pod.Spec.TopologySpreadConstraints {
				assert.EqualValues(t, 1, c.MaxSkew)
				got = append(got, c.WhenUnsatisfiable)
			}
			assert.Equal(t, tc.wantSpread, got)
			assert.Equal(t, "kubernetes.io/hostname", pod.Spec.TopologySpreadConstraints[len(got)-1].TopologyKey)

			args := ctr.Args
			assert.Subset(t, args, []string{"--cluster-announce-ip", "$(POD_IP)", "--aclfile", "/etc/valkey/acl/users.acl"})
			for _, a := range args {
				assert.NotContains(t, []string{"--maxmemory", "1gb", "--save", "900"}, a, "a user setting is on the command line")
			}
			if tc.tls != "" {
				assert.Subset(t, args, []string{"--tls-port", "--port", "0", "--tls-cluster", "--tls-replication", "/etc/valkey/tls/tls.crt", "/etc/valkey/tls/ca.crt"})
				assert.Len(t, pod.Spec.Volumes, 5)
			} else {
				assert.NotContains(t, args, "--tls-port")
				assert.Len(t, pod.Spec.Volumes, 4)
			}

			// valkey-server's config file (its first argument) is the node's own ConfigMap; it
			// includes the replication login from the auth Secret, so no password travels in
			// args or env.
			assert.Equal(t, "/etc/valkey/conf/valkey.conf", args[0])
			conf := volume(t, pod, "conf").ConfigMap
			require.NotNil(t, conf)
			assert.Equal(t, "c1-abcde-config", conf.Name)
			assert.Contains(t, ctr.VolumeMounts, corev1.VolumeMount{Name: "conf", MountPath: "/etc/valkey/conf", ReadOnly: true})
			assert.NotContains(t, args, "--masterauth")
			for _, e := range ctr.Env {
				assert.Nil(t, e.ValueFrom.SecretKeyRef, "env %s reads a Secret", e.Name)
			}
			auth := volume(t, pod, "auth").Secret
			require.NotNil(t, auth)
			assert.Equal(t, "c1-auth", auth.SecretName)
			assert.Equal(t, []corev1.KeyToPath{{Key: "replication.conf", Path: "replication.conf"}}, auth.Items, "only the replication fragment is mounted")
		})
	}
}

// volume returns the pod's volume called name.
func volume(t *testing.T, pod *corev1.Pod, name string) corev1.Volume {
	t.Helper()
	for _, v := range pod.Spec.Volumes {
		if v.Name == name {
			return v
		}
	}
	t.Fatalf("pod has no volume %q", name)
	return corev1.Volume{}
}

// TestConfigFile: every user value reaches valkey-server only as the arguments of its own
// directive line, quoted, so none can start another directive.
func TestConfigFile(t *testing.T) {
	for _, tc := range []struct {
		name   string
		valkey map[string]string
		want   string
	}{
		// Without a persistence mode nothing is written to disk unless the user asks for it.
		{"no settings", nil, `appendonly "no"` + "\n" + `save ""` + "\n"},
		{"one word", map[string]string{"maxmemory": "1gb"}, `appendonly "no"` + "\n" + `maxmemory "1gb"` + "\n" + `save ""` + "\n"},
		{"words are arguments, keys sorted", map[string]string{"save": "900 1  300 10", "appendonly": "yes"},
			`appendonly "yes"` + "\n" + `save "900" "1" "300" "10"` + "\n"},
		{"empty value", map[string]string{"save": ""}, `appendonly "no"` + "\n" + `save ""` + "\n"},
		{"an injected directive stays an argument", map[string]string{"maxmemory-policy": "noeviction --port 6379"},
			`appendonly "no"` + "\n" + `maxmemory-policy "noeviction" "--port" "6379"` + "\n" + `save ""` + "\n"},
		{"quotes, backslashes and # are literal", map[string]string{"x": `a"b\c #d`},
			`appendonly "no"` + "\n" + `save ""` + "\n" + `x "a\"b\\c" "#d"` + "\n"},
		{"control characters cannot end the line", map[string]string{"x": "a\rb\x00c\x7f"},
			`appendonly "no"` + "\n" + `save ""` + "\n" + `x "a" "b\x00c\x7f"` + "\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := render.ConfigFile(views.NodeSpec{Valkey: tc.valkey})
			head := "# Rendered by valkey-operator from the node's resolved ValkeyConfig.\ninclude /etc/valkey/auth/replication.conf\n"
			require.True(t, strings.HasPrefix(got, head), got)
			assert.Equal(t, tc.want, strings.TrimPrefix(got, head))
		})
	}
}

// TestShardBudget: one budget per shard, over that shard's pods only, that keeps every
// replica's worth of in-sync pods (so never the last in-sync copy goes) and never lets a
// shard without replicas be evicted at all; pods not in sync may always go.
func TestShardBudget(t *testing.T) {
	tests := []struct {
		replicas int
		want     int
	}{
		{replicas: 0, want: 1},
		{replicas: 1, want: 1},
		{replicas: 2, want: 2},
		{replicas: 5, want: 5},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%d replicas", tc.replicas), func(t *testing.T) {
			b := render.ShardBudget("c1", "ns1", 3, tc.replicas)
			require.NotNil(t, b.Name)
			assert.Equal(t, "c1-shard-3", *b.Name)
			assert.Equal(t, "ns1", *b.Namespace)
			assert.Equal(t, map[string]string{"app.kubernetes.io/managed-by": "valkey-operator", "valkey.gomomento.com/cluster": "c1", "valkey.gomomento.com/shard": "3"}, b.Labels)
			require.NotNil(t, b.Spec)
			assert.Equal(t, map[string]string{"valkey.gomomento.com/cluster": "c1", "valkey.gomomento.com/shard": "3"}, b.Spec.Selector.MatchLabels,
				"the shard's pods, whatever else they carry")
			assert.Equal(t, intstr.FromInt32(int32(tc.want)), *b.Spec.MinAvailable, "an integer: pods of a controller without a scale subresource")
			assert.Nil(t, b.Spec.MaxUnavailable)
			assert.Equal(t, policyv1.AlwaysAllow, *b.Spec.UnhealthyPodEvictionPolicy, "a pod not in sync holds no copy the shard relies on")
		})
	}
}

func TestBudgetShard(t *testing.T) {
	for name, want := range map[string]int{"c1-shard-0": 0, "c1-shard-12": 12, "c1-shard-": -1, "c1-shard-01": -1, "c1-shard--1": -1, "c2-shard-1": -1, "c1-shard-1x": -1} {
		got, ok := render.BudgetShard("c1", name)
		if want < 0 {
			assert.False(t, ok, name)
			continue
		}
		assert.True(t, ok, name)
		assert.Equal(t, want, got, name)
		assert.Equal(t, name, render.BudgetName("c1", got), "round trip")
	}
}

// TestPersistenceDirectives: each persistence mode's valkey.conf lines, beside the user's
// other settings.
func TestPersistenceDirectives(t *testing.T) {
	for _, tc := range []struct {
		mode string
		want string
	}{
		{"", `appendonly "no"` + "\n" + `maxmemory "1gb"` + "\n" + `save ""` + "\n"},
		{views.PersistenceNone, `appendonly "no"` + "\n" + `maxmemory "1gb"` + "\n" + `save ""` + "\n"},
		{views.PersistenceRDB, `appendonly "no"` + "\n" + `maxmemory "1gb"` + "\n" + `save "3600" "1" "300" "100" "60" "10000"` + "\n"},
		{views.PersistenceAOF, `appendfsync "everysec"` + "\n" + `appendonly "yes"` + "\n" + `maxmemory "1gb"` + "\n" + `save ""` + "\n"},
		{views.PersistenceRDBAndAOF, `appendfsync "everysec"` + "\n" + `appendonly "yes"` + "\n" + `maxmemory "1gb"` + "\n" + `save "3600" "1" "300" "100" "60" "10000"` + "\n"},
	} {
		t.Run("mode "+tc.mode, func(t *testing.T) {
			got := render.ConfigFile(views.NodeSpec{Valkey: map[string]string{"maxmemory": "1gb"}, Persistence: views.Persistence{Mode: tc.mode, Size: "1Gi"}})
			_, body, ok := strings.Cut(got, ".conf\n")
			require.True(t, ok, got)
			assert.Equal(t, tc.want, body)
		})
	}
}

// TestPersistenceSpecHash: a node keeps its hash when persistence stays None (nodes made
// before persistence existed are not replaced by an upgrade); the mode and the StorageClass
// replace nodes; the size does not (volumes grow in place).
func TestPersistenceSpecHash(t *testing.T) {
	base := views.NodeSpec{Image: "valkey/valkey:8.0.1", Version: "8.0.1"}
	with := func(p views.Persistence) string { s := base; s.Persistence = p; return render.SpecHash(s) }
	none := render.SpecHash(base)
	assert.Equal(t, none, with(views.Persistence{Mode: views.PersistenceNone}), "None is no persistence")
	aof := with(views.Persistence{Mode: views.PersistenceAOF, Size: "1Gi"})
	assert.NotEqual(t, none, aof)
	assert.NotEqual(t, aof, with(views.Persistence{Mode: views.PersistenceRDB, Size: "1Gi"}), "a mode change replaces nodes")
	assert.NotEqual(t, aof, with(views.Persistence{Mode: views.PersistenceAOF, Size: "1Gi", StorageClassName: "fast"}), "a StorageClass change replaces nodes")
	assert.Equal(t, aof, with(views.Persistence{Mode: views.PersistenceAOF, Size: "5Gi"}), "a size change does not")
	assert.Equal(t, aof, with(views.Persistence{Mode: views.PersistenceAOF, Size: "1Gi", Reclaim: views.ReclaimRetain}), "nor a reclaim change")
}

// TestDataClaim: a durable node's claim is its own (named after it, labelled with its node
// and reclaim, annotated with its UID), of the resolved size and class, and never names a
// volume or a data source; its pod mounts it as the data volume, where a node without
// persistence keeps an emptyDir.
func TestDataClaim(t *testing.T) {
	s := views.NodeSpec{Cluster: "c", Shard: 1, Image: "valkey/valkey:8.0.1", Version: "8.0.1",
		Persistence: views.Persistence{Mode: views.PersistenceAOF, Size: "2Gi", StorageClassName: "fast", Reclaim: views.ReclaimRetain}}
	c, err := render.DataClaim("c-abcde", "ns", types.UID("uid-1"), s)
	require.NoError(t, err)
	assert.Equal(t, "c-abcde-data", c.Name)
	assert.Equal(t, "ns", c.Namespace)
	assert.Equal(t, map[string]string{
		render.LabelManagedBy: render.ManagedBy, render.LabelCluster: "c", render.LabelShard: "1",
		render.LabelNode: "c-abcde", render.LabelReclaim: views.ReclaimRetain,
	}, c.Labels)
	assert.Equal(t, "uid-1", c.Annotations[render.AnnotationNodeUID])
	assert.Equal(t, []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, c.Spec.AccessModes)
	assert.Equal(t, "2Gi", ptr.To(c.Spec.Resources.Requests[corev1.ResourceStorage]).String())
	assert.Equal(t, "fast", ptr.Deref(c.Spec.StorageClassName, ""))
	assert.Empty(t, c.Spec.VolumeName)
	assert.Nil(t, c.Spec.DataSource)
	assert.Nil(t, c.Spec.DataSourceRef)

	s.Persistence.StorageClassName = ""
	c, err = render.DataClaim("c-abcde", "ns", types.UID("uid-1"), s)
	require.NoError(t, err)
	assert.Nil(t, c.Spec.StorageClassName, "no class named: the cluster's default applies")

	s.Persistence.Size = "lots"
	_, err = render.DataClaim("c-abcde", "ns", types.UID("uid-1"), s)
	assert.Error(t, err, "a size that is no quantity")

	owner := metav1.OwnerReference{Name: "c-abcde", UID: "uid-1", Controller: ptr.To(true)}
	assert.Equal(t, []metav1.OwnerReference{owner}, render.ClaimOwners(views.ReclaimDelete, owner))
	assert.Empty(t, render.ClaimOwners(views.ReclaimRetain, owner))

	data := func(s views.NodeSpec) corev1.VolumeSource {
		for _, v := range render.Pod("c-abcde", "ns", s, nil).Spec.Volumes {
			if v.Name == "data" {
				return v.VolumeSource
			}
		}
		t.Fatal("no data volume")
		return corev1.VolumeSource{}
	}
	s.Persistence = views.Persistence{Mode: views.PersistenceAOF, Size: "1Gi"}
	assert.Equal(t, &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "c-abcde-data"}, data(s).PersistentVolumeClaim)
	assert.Nil(t, data(s).EmptyDir)
	s.Persistence = views.Persistence{Mode: views.PersistenceNone}
	assert.NotNil(t, data(s).EmptyDir, "without persistence the data goes with the pod")
	assert.Nil(t, data(s).PersistentVolumeClaim)
}

// TestExternalService: a node's external Service selects only its pod, serves the client
// port alone (the bus stays on the pod network), carries the user's annotations, and source
// ranges only for a LoadBalancer.
func TestExternalService(t *testing.T) {
	ranges := []string{"203.0.113.0/24"}
	annotations := map[string]string{"service.beta.kubernetes.io/aws-load-balancer-internal": "true"}
	for _, tc := range []struct {
		name       string
		access     views.ExternalAccess
		wantRanges []string
	}{
		{"LoadBalancer", views.ExternalAccess{Type: views.ExternalLoadBalancer, ServiceAnnotations: annotations, LoadBalancerSourceRanges: ranges}, ranges},
		{"NodePort", views.ExternalAccess{Type: views.ExternalNodePort, ServiceAnnotations: annotations, LoadBalancerSourceRanges: ranges}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			svc := render.ExternalService("c1", "c1-abcde", "ns1", tc.access)
			require.NotNil(t, svc.Spec)
			assert.Equal(t, "c1-abcde", *svc.Name)
			assert.Equal(t, "ns1", *svc.Namespace)
			assert.Equal(t, map[string]string{"app.kubernetes.io/managed-by": "valkey-operator", "valkey.gomomento.com/cluster": "c1",
				"valkey.gomomento.com/node": "c1-abcde"}, svc.Labels)
			assert.Equal(t, annotations, svc.Annotations)
			assert.Equal(t, corev1.ServiceType(tc.access.Type), *svc.Spec.Type)
			assert.Equal(t, map[string]string{"valkey.gomomento.com/cluster": "c1", "valkey.gomomento.com/node": "c1-abcde"}, svc.Spec.Selector)
			require.Len(t, svc.Spec.Ports, 1)
			assert.Equal(t, int32(6379), *svc.Spec.Ports[0].Port)
			assert.Equal(t, int32(6379), svc.Spec.Ports[0].TargetPort.IntVal)
			assert.Nil(t, svc.Spec.Ports[0].NodePort, "the API server picks the node port")
			assert.Equal(t, tc.wantRanges, svc.Spec.LoadBalancerSourceRanges)
		})
	}
}
