package render

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/gomomento/valkey-operator/reconciler/resolve"
	"github.com/gomomento/valkey-operator/reconciler/views"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// Fixed paths inside the Valkey container.
const (
	ACLDir  = "/etc/valkey/acl"
	TLSDir  = "/etc/valkey/tls"
	AuthDir = "/etc/valkey/auth"
	ConfDir = "/etc/valkey/conf"
	// ConfFile is valkey-server's config file (its first argument): the node's own
	// ConfigMap, holding the user's settings and an include of the replication login.
	ConfFile = ConfDir + "/" + ConfFileKey
	// ReplicationConfFile holds the replication login, so secrets stay off the command line.
	ReplicationConfFile = AuthDir + "/" + AuthReplicationConfKey
	DataDir             = "/data"
	ACLFile             = ACLDir + "/" + ACLFileKey
	ValkeyUID           = 999
)

// HandOverSeconds is how long a deleted pod keeps serving before SIGTERM (its preStop). The
// operator hands a primary's slots over within a second of the deletion; the rest of the
// window is for clients. After the failover the old primary answers MOVED, and a client
// routes there until its next map refresh; a refresh can stall on addresses that no longer
// answer for a whole dial timeout (valkey-go's 5 s) plus its refresh delay (up to 1 s). While
// the old server still answers, such a client is redirected and its writes succeed; once it
// is gone they hang until their timeout. With 5 s a client stalled that way paused writes for
// a second in two of five CI runs of the drain test; 10 s covers the stall with margin.
const HandOverSeconds = 10

// The server container's readiness probe: every ReadinessPeriodSeconds, unready after
// ReadinessFailureThreshold failures in a row (see Pod).
const (
	ReadinessPeriodSeconds    = 1
	ReadinessFailureThreshold = 15
)

// NodeTimeoutMillis is every server's cluster-node-timeout.
const NodeTimeoutMillis = 3000

// ContainerName is the name of the Valkey server's container, a pod's first (the exporter
// sidecar, when on, is its second).
const ContainerName = "valkey"

// NodeSpec builds the spec a new ValkeyNode is created with: the resolved settings, the
// cluster's live placement (zoneSpread falling back to the operator default) and TLS Secret.
func NodeSpec(cluster views.Cluster, shard int, res resolve.Resolved, defaultZoneSpread string) views.NodeSpec {
	p := cluster.Placement()
	if p.ZoneSpread == "" {
		p.ZoneSpread = defaultZoneSpread
	}
	p.Zones = sortedUnique(p.Zones)
	s := views.NodeSpec{
		Cluster:      cluster.Name(),
		Shard:        shard,
		Image:        res.Image,
		Version:      res.Version,
		Valkey:       maps.Clone(res.Valkey),
		Resources:    res.Resources,
		Placement:    p,
		TLSSecretRef: cluster.TLSSecretRef(),
		Exporter:     res.Exporter,
	}
	if res.Persistence.Durable() {
		s.Persistence = res.Persistence
	}
	s.SpecHash = SpecHash(s)
	return s
}

// SpecHash hashes every field whose change requires replacing a node: image, Valkey settings,
// resources, zones, nodeSelector and the exporter sidecar (a pod's containers are fixed).
// zoneSpread and the TLS Secret name are deliberately left out: a zoneSpread change replaces
// nothing and certificates are reloaded live. The exporter is hashed only when on, and the
// persistence mode and StorageClass only when the mode is not None, so nodes made before
// either existed keep their hash and are not replaced by an operator upgrade. A volume's size
// is not hashed: a larger one is an expansion in place, not a new node.
func SpecHash(s views.NodeSpec) string {
	type volume struct {
		Mode             string `json:"mode"`
		StorageClassName string `json:"storageClassName"`
	}
	var persistence *volume
	if s.Persistence.Durable() {
		persistence = &volume{s.Persistence.Mode, s.Persistence.StorageClassName}
	}
	b, _ := json.Marshal(struct {
		Image        string            `json:"image"`
		Version      string            `json:"version"`
		Valkey       map[string]string `json:"valkey"`
		Resources    views.Resources   `json:"resources"`
		Zones        []string          `json:"zones"`
		NodeSelector map[string]string `json:"nodeSelector"`
		Exporter     bool              `json:"exporter,omitempty"`
		Persistence  *volume           `json:"persistence,omitempty"`
	}{s.Image, s.Version, s.Valkey, s.Resources, sortedUnique(s.Placement.Zones), s.Placement.NodeSelector, s.Exporter, persistence})
	sum := sha256.Sum256(b) // encoding/json sorts map keys, so this is canonical
	return hex.EncodeToString(sum[:8])
}

func sortedUnique(l []string) []string {
	if len(l) == 0 {
		return nil
	}
	out := slices.Clone(l)
	sort.Strings(out)
	return slices.Compact(out)
}

// Args renders valkey-server's command line: the node's config file, then the directives
// the operator owns. No user value is ever an argument: valkey-server reads every later
// `--name` as a new directive, so a value split into argv could smuggle one in (say
// `noeviction --port 6379`). The user's settings live in the config file (ConfigFile), one
// directive per line, where a value can only ever be that directive's arguments. Arguments
// override the file, so an operator-owned directive wins even if the file names it.
func Args(s views.NodeSpec) []string {
	args := []string{
		ConfFile, // must come first: valkey-server reads a config file only there
		"--cluster-enabled", "yes",
		"--cluster-config-file", DataDir + "/nodes.conf",
		"--cluster-announce-ip", "$(POD_IP)",
		// Failure detection: a lost primary is flagged after this long and its replica
		// elected about a second later, so writes resume within about 4 s (the default 15 s
		// would stall a shard for 16 s or more). Low enough for that, high enough that a busy
		// two-core host does not flag healthy nodes.
		"--cluster-node-timeout", strconv.Itoa(NodeTimeoutMillis),
		// The operator places replicas; Valkey must not move them between shards on its own.
		"--cluster-allow-replica-migration", "no",
		"--dir", DataDir,
		"--aclfile", ACLFile,
	}
	if s.TLSSecretRef != "" {
		args = append(args,
			"--port", "0",
			"--tls-port", "6379",
			"--tls-cluster", "yes",
			"--tls-replication", "yes",
			"--tls-cert-file", TLSDir+"/tls.crt",
			"--tls-key-file", TLSDir+"/tls.key",
			"--tls-ca-cert-file", TLSDir+"/ca.crt",
			// Applications authenticate with passwords; client certificates are accepted and
			// verified when presented but not demanded of them.
			"--tls-auth-clients", "optional",
		)
	} else {
		args = append(args, "--port", "6379")
	}
	return args
}

// ConfigFile renders the node's valkey.conf: an include of the replication login, then the
// user's settings and the persistence directives (PersistenceDirectives) in key order, one
// directive per line. A value's words become the
// directive's arguments, each quoted (so `save: "900 1"` is `save "900" "1"`, as on a
// command line) and escaped, so no value can end its line or start another directive; the
// CRD rejects control characters, and quoting keeps `#` or quotes literal.
func ConfigFile(s views.NodeSpec) string {
	var b strings.Builder
	b.WriteString("# Rendered by valkey-operator from the node's resolved ValkeyConfig.\n")
	b.WriteString("include " + ReplicationConfFile + "\n")
	settings := serverSettings(s)
	for _, k := range slices.Sorted(maps.Keys(settings)) {
		b.WriteString(k)
		words := strings.Fields(settings[k])
		if len(words) == 0 {
			words = []string{""}
		}
		for _, w := range words {
			b.WriteString(" " + quoteConfigWord(w))
		}
		b.WriteString("\n")
	}
	return b.String()
}

// serverSettings are the directives of the node's valkey.conf after its include: the
// persistence mode's and the user's.
func serverSettings(s views.NodeSpec) map[string]string {
	settings := PersistenceDirectives(s.Persistence)
	maps.Copy(settings, s.Valkey) // with mode None the user's own win; otherwise the schema keeps them apart
	return settings
}

// rdbSchedule is when a server with RDB snapshots writes one: Valkey's own default schedule
// (after an hour with one change, five minutes with 100, a minute with 10,000).
const rdbSchedule = "3600 1 300 100 60 10000"

// PersistenceDirectives are the valkey.conf directives of a persistence mode. With mode None
// (or none set) a server writes nothing to disk: its data lives in memory and an emptyDir, and
// a snapshot there would only fork the server to write a file no restart reads; spec.valkey
// may still turn either on. AOF appends every write and fsyncs once a second, so at most the
// last second of acknowledged writes is lost with the server's node.
func PersistenceDirectives(p views.Persistence) map[string]string {
	switch p.Mode {
	case views.PersistenceRDB:
		return map[string]string{"save": rdbSchedule, "appendonly": "no"}
	case views.PersistenceAOF:
		return map[string]string{"save": "", "appendonly": "yes", "appendfsync": "everysec"}
	case views.PersistenceRDBAndAOF:
		return map[string]string{"save": rdbSchedule, "appendonly": "yes", "appendfsync": "everysec"}
	}
	return map[string]string{"save": "", "appendonly": "no"}
}

// NodeConfigMap renders the ConfigMap holding node's valkey.conf (ConfigFile).
func NodeConfigMap(node, namespace string, s views.NodeSpec) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: NodeConfigMapName(node), Namespace: namespace, Labels: Labels(s.Cluster)},
		Data:       map[string]string{ConfFileKey: ConfigFile(s)},
	}
}

// quoteConfigWord quotes w the way valkey-server's config parser (sdssplitargs) reads a
// double-quoted word back: backslash and quote escaped, anything unprintable as \xHH.
func quoteConfigWord(w string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(w); i++ {
		switch c := w[i]; {
		case c == '\\' || c == '"':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c == 0x7f:
			fmt.Fprintf(&b, "\\x%02x", c)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// Pod renders the Pod of the ValkeyNode name from its fixed spec. annotations are the
// cluster's podAnnotations at the time the pod is created.
func Pod(name, namespace string, s views.NodeSpec, annotations map[string]string) *corev1.Pod {
	labels := NodeLabels(s.Cluster, s.Shard)
	labels[LabelNode] = name
	shardSelector := &metav1.LabelSelector{MatchLabels: map[string]string{LabelCluster: s.Cluster, LabelShard: labels[LabelShard]}}

	env := []corev1.EnvVar{
		{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
		{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
		{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
	}
	mounts := []corev1.VolumeMount{
		{Name: "conf", MountPath: ConfDir, ReadOnly: true},
		{Name: "acl", MountPath: ACLDir, ReadOnly: true},
		{Name: "auth", MountPath: AuthDir, ReadOnly: true},
		{Name: dataVolume, MountPath: DataDir},
	}
	volumes := []corev1.Volume{
		{Name: "conf", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: NodeConfigMapName(name)}, DefaultMode: ptr.To[int32](0o444)}}},
		{Name: "acl", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: ACLConfigMapName(s.Cluster)}, DefaultMode: ptr.To[int32](0o444)}}},
		// Only the replication fragment: the application password stays out of the pod.
		{Name: "auth", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: AuthSecretName(s.Cluster), DefaultMode: ptr.To[int32](0o440),
			Items: []corev1.KeyToPath{{Key: AuthReplicationConfKey, Path: AuthReplicationConfKey}}}}},
		{Name: dataVolume, VolumeSource: dataVolumeSource(name, s)},
	}
	if s.TLSSecretRef != "" {
		mounts = append(mounts, corev1.VolumeMount{Name: "tls", MountPath: TLSDir, ReadOnly: true})
		volumes = append(volumes, corev1.Volume{Name: "tls", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: s.TLSSecretRef, DefaultMode: ptr.To[int32](0o440)}}})
	}

	var res corev1.ResourceRequirements
	if list := resourceList(s.Resources); len(list) > 0 {
		res = corev1.ResourceRequirements{Requests: list, Limits: list.DeepCopy()}
	}

	probePort := intstr.FromInt32(ClientPort)
	container := corev1.Container{
		Name:    ContainerName,
		Image:   s.Image,
		Command: []string{"valkey-server"},
		Args:    Args(s),
		Env:     env,
		Ports: []corev1.ContainerPort{
			{Name: "client", ContainerPort: ClientPort, Protocol: corev1.ProtocolTCP},
			{Name: "bus", ContainerPort: BusPort, Protocol: corev1.ProtocolTCP},
		},
		Resources:    res,
		VolumeMounts: mounts,
		// A server that refuses its configuration prints why and exits: that output becomes
		// the pod's termination message, from which the operator names the setting.
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		// Ready is what the operator waits for before it forms, grows or rolls the cluster.
		// A kubelet probes a new container as soon as it sees it running, and again only a
		// period later if the server was not listening yet: with 5 s that lost race cost a
		// new node up to 5 s; with 1 s (a kubelet's minimum) at most 1 s. The failure
		// threshold keeps a serving pod's time to unready at 15 s, as before. The probe is a
		// TCP connect, which the kernel completes without the server's event loop, so one
		// per second costs the server nothing.
		ReadinessProbe: &corev1.Probe{
			ProbeHandler:     corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: probePort}},
			PeriodSeconds:    ReadinessPeriodSeconds,
			FailureThreshold: ReadinessFailureThreshold,
		},
		// A deleted pod keeps serving for HandOverSeconds before it gets SIGTERM: long enough
		// for the operator, woken by the deletion, to fail a primary over to an in-sync
		// replica gracefully, so a planned deletion loses nothing and barely pauses writes.
		Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: HandOverSeconds}}},
		SecurityContext: &corev1.SecurityContext{
			RunAsNonRoot:             ptr.To(true),
			RunAsUser:                ptr.To[int64](ValkeyUID),
			RunAsGroup:               ptr.To[int64](ValkeyUID),
			AllowPrivilegeEscalation: ptr.To(false),
			ReadOnlyRootFilesystem:   ptr.To(true),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
	}

	// The cluster autoscaler may evict the pod like `kubectl drain` does, through the
	// shard's budget; a user's own value for the key wins.
	podAnnotations := map[string]string{SafeToEvictAnnotation: "true"}
	maps.Copy(podAnnotations, annotations)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: namespace, Labels: labels, Annotations: podAnnotations,
		},
		Spec: corev1.PodSpec{
			// Ready only once the server is an in-sync member (the operator sets the
			// condition), so the shard's budget counts copies of its data.
			ReadinessGates:               []corev1.PodReadinessGate{{ConditionType: InSyncCondition}},
			Hostname:                     name,
			Subdomain:                    ServiceName(s.Cluster),
			Containers:                   []corev1.Container{container},
			Volumes:                      volumes,
			NodeSelector:                 maps.Clone(s.Placement.NodeSelector),
			AutomountServiceAccountToken: ptr.To(false),
			EnableServiceLinks:           ptr.To(false),
			// A server that stops is never restarted by the kubelet. Without persistence its
			// data is gone with the process, but its cluster identity (nodes.conf in the pod's
			// emptyDir) is not: it would come back empty yet still owning its slots, and its
			// replicas would copy the empty dataset. With persistence a restart could race
			// its replica's promotion and serve older data. A stopped pod fails instead, and
			// the operator decides what comes back in its place.
			RestartPolicy: corev1.RestartPolicyNever,
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:   ptr.To(true),
				RunAsUser:      ptr.To[int64](ValkeyUID),
				RunAsGroup:     ptr.To[int64](ValkeyUID),
				FSGroup:        ptr.To[int64](ValkeyUID),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Affinity:                  affinity(s.Placement.Zones),
			TopologySpreadConstraints: spread(s, shardSelector),
		},
	}
	if s.Exporter {
		addExporter(pod, s)
	}
	if s.Restore != nil {
		addRestoreFetch(pod, s)
	}
	return pod
}

func resourceList(r views.Resources) corev1.ResourceList {
	list := corev1.ResourceList{}
	if q, err := resource.ParseQuantity(r.CPU); err == nil && r.CPU != "" {
		list[corev1.ResourceCPU] = q
	}
	if q, err := resource.ParseQuantity(r.Memory); err == nil && r.Memory != "" {
		list[corev1.ResourceMemory] = q
	}
	return list
}

func affinity(zones []string) *corev1.Affinity {
	if len(zones) == 0 {
		return nil
	}
	return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{
				{Key: corev1.LabelTopologyZone, Operator: corev1.NodeSelectorOpIn, Values: sortedUnique(zones)},
			}}},
		},
	}}
}

// spread places each shard's members in different zones (hard or soft per zoneSpread) and on
// different hosts (always soft); in required mode the whole cluster also spreads softly.
func spread(s views.NodeSpec, shardSelector *metav1.LabelSelector) []corev1.TopologySpreadConstraint {
	zoneMode := corev1.ScheduleAnyway
	if s.Placement.ZoneSpread == views.ZoneSpreadRequired {
		zoneMode = corev1.DoNotSchedule
	}
	out := []corev1.TopologySpreadConstraint{
		{MaxSkew: 1, TopologyKey: corev1.LabelTopologyZone, WhenUnsatisfiable: zoneMode, LabelSelector: shardSelector.DeepCopy()},
	}
	if zoneMode == corev1.DoNotSchedule {
		out = append(out, corev1.TopologySpreadConstraint{
			MaxSkew: 1, TopologyKey: corev1.LabelTopologyZone, WhenUnsatisfiable: corev1.ScheduleAnyway,
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{LabelCluster: s.Cluster}},
		})
	}
	out = append(out, corev1.TopologySpreadConstraint{
		MaxSkew: 1, TopologyKey: corev1.LabelHostname, WhenUnsatisfiable: corev1.ScheduleAnyway, LabelSelector: shardSelector.DeepCopy(),
	})
	return out
}
