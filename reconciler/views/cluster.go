package views

import (
	"github.com/gomomento/valkey-operator/crds"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Cluster is the typed view of a ValkeyCluster.
type Cluster struct{ U *unstructured.Unstructured }

// NewClusterObject returns an empty ValkeyCluster object with its GVK set.
func NewClusterObject() *unstructured.Unstructured { return object(crds.KindCluster) }

// NewClusterListObject returns an empty ValkeyClusterList with its GVK set.
func NewClusterListObject() *unstructured.UnstructuredList { return list(crds.KindCluster) }

// clusterSpec is a ValkeyCluster's spec as crds/valkeyclusters.yaml defines it.
type clusterSpec struct {
	ConfigRef string `json:"configRef,omitempty"`
	Shards    int    `json:"shards,omitempty"`
	// ReplicasPerShard is a pointer because 0 is a valid count while absent means the schema
	// default, 1.
	ReplicasPerShard *int              `json:"replicasPerShard,omitempty"`
	TLS              *tlsSpec          `json:"tls,omitempty"`
	ACL              []ACLUser         `json:"acl,omitempty"`
	Placement        Placement         `json:"placement,omitzero"`
	PodAnnotations   map[string]string `json:"podAnnotations,omitempty"`
	ExternalAccess   *ExternalAccess   `json:"externalAccess,omitempty"`
	DefaultUser      string            `json:"defaultUser,omitempty"`
	Backup           *BackupSchedule   `json:"backup,omitempty"`
	RestoreFrom      *RestoreSource    `json:"restoreFrom,omitempty"`
}

func (c Cluster) spec() clusterSpec               { return decode[clusterSpec](c.U, specKey) }
func (c Cluster) editSpec(set func(*clusterSpec)) { update(c.U, specKey, set) }

func (c Cluster) Name() string      { return c.U.GetName() }
func (c Cluster) Namespace() string { return c.U.GetNamespace() }
func (c Cluster) ConfigRef() string { return c.spec().ConfigRef }

// spec.defaultUser values.
const (
	DefaultUserAuto     = "Auto"
	DefaultUserEnabled  = "Enabled"
	DefaultUserDisabled = "Disabled"
)

// DefaultUserOn reports whether the default user may log in: spec.defaultUser Enabled, or
// Auto (the schema default, also when absent) and spec.acl defines no users.
func (c Cluster) DefaultUserOn() bool {
	s := c.spec()
	switch s.DefaultUser {
	case DefaultUserEnabled:
		return true
	case DefaultUserDisabled:
		return false
	}
	return len(s.ACL) == 0
}

// Shards is the live spec.shards value.
func (c Cluster) Shards() int { return c.spec().Shards }

// ReplicasPerShard is the live spec.replicasPerShard, 1 when absent (the schema default).
func (c Cluster) ReplicasPerShard() int {
	if n := c.spec().ReplicasPerShard; n != nil {
		return *n
	}
	return 1
}

// TLSSecretRef is the name of the TLS Secret, "" when TLS is off.
func (c Cluster) TLSSecretRef() string { return c.spec().TLS.secretRef() }

// TLSEnabled reports whether spec.tls is present at all.
func (c Cluster) TLSEnabled() bool { return c.spec().TLS != nil }

func (c Cluster) Placement() Placement { return c.spec().Placement }

func (c Cluster) PodAnnotations() map[string]string { return c.spec().PodAnnotations }

// ExternalAccess is spec.externalAccess, nil when clients reach the cluster only from the
// pod network.
func (c Cluster) ExternalAccess() *ExternalAccess { return c.spec().ExternalAccess }

// spec.externalAccess.type values.
const (
	ExternalLoadBalancer = "LoadBalancer"
	ExternalNodePort     = "NodePort"
)

// ExternalAccess is spec.externalAccess: a Service per node of Type, carrying
// ServiceAnnotations and (for a LoadBalancer) LoadBalancerSourceRanges.
type ExternalAccess struct {
	Type                     string            `json:"type,omitempty"`
	ServiceAnnotations       map[string]string `json:"serviceAnnotations,omitempty"`
	LoadBalancerSourceRanges []string          `json:"loadBalancerSourceRanges,omitempty"`
}

// Backup is spec.backup, nil when the cluster has no backup schedule.
func (c Cluster) Backup() *BackupSchedule { return c.spec().Backup }

// RestoreFrom is spec.restoreFrom, nil when the cluster starts empty. The schema fixes it at
// creation, so a reader may cache what it decided from it.
func (c Cluster) RestoreFrom() *RestoreSource { return c.spec().RestoreFrom }

// DefaultBackupKeep is spec.backup.keep's schema default.
const DefaultBackupKeep = 7

// BackupSchedule is spec.backup: when to back the cluster up, where to, and how many
// completed scheduled backups to retain.
type BackupSchedule struct {
	// Schedule is the cron string as written (five fields or an @ descriptor, UTC); the
	// schema checks its shape, the cron parser its meaning.
	Schedule string        `json:"schedule,omitempty"`
	Storage  BackupStorage `json:"storage,omitzero"`
	// Keep is a pointer because absent means the schema default (KeepOrDefault), which an
	// object built without the API server's defaulting does not carry.
	Keep    *int `json:"keep,omitempty"`
	Suspend bool `json:"suspend,omitempty"`
}

// KeepOrDefault is spec.backup.keep, DefaultBackupKeep when absent.
func (b BackupSchedule) KeepOrDefault() int {
	if b.Keep != nil {
		return *b.Keep
	}
	return DefaultBackupKeep
}

// RestoreSource is spec.restoreFrom: exactly one of Backup (a ValkeyBackup in the
// cluster's namespace) or Storage plus Path (a backup written elsewhere, found through the
// manifest at {prefix}/{path}/manifest.json); the schema refuses anything else.
type RestoreSource struct {
	Backup  string        `json:"backup,omitempty"`
	Storage BackupStorage `json:"storage,omitzero"`
	Path    string        `json:"path,omitempty"`
}

// FromBackup reports whether the source is a ValkeyBackup by name rather than a location.
func (r RestoreSource) FromBackup() bool { return r.Backup != "" }

// BackupStorage is an S3-compatible location: spec.backup.storage and
// spec.restoreFrom.storage of a ValkeyCluster, and spec.storage of a ValkeyBackup (one
// schema, kept identical across the CRDs by crds/definitions_test.go).
type BackupStorage struct {
	Endpoint string `json:"endpoint,omitempty"`
	Bucket   string `json:"bucket,omitempty"`
	Prefix   string `json:"prefix,omitempty"`
	Region   string `json:"region,omitempty"`
	// CredentialsSecret names the Secret with keys accessKey and secretKey.
	CredentialsSecret SecretRef `json:"credentialsSecretRef,omitzero"`
	// CASecret names the Secret with key ca.crt; empty when the endpoint's certificate is
	// signed by a public authority (or the endpoint is http://).
	CASecret SecretRef `json:"caSecretRef,omitzero"`
}

// SecretRef names a Secret in the referring object's namespace.
type SecretRef struct {
	Name string `json:"name,omitempty"`
}

// Spec setters, used by tests and tools that build clusters. Each rewrites the spec with
// one field changed; an empty value removes the field.

func (c Cluster) SetConfigRef(s string) { c.editSpec(func(w *clusterSpec) { w.ConfigRef = s }) }
func (c Cluster) SetShards(n int)       { c.editSpec(func(w *clusterSpec) { w.Shards = n }) }

// SetReplicasPerShard stores n, 0 included (only an absent field means the default).
func (c Cluster) SetReplicasPerShard(n int) {
	c.editSpec(func(w *clusterSpec) { w.ReplicasPerShard = &n })
}

func (c Cluster) SetPlacement(p Placement) { c.editSpec(func(w *clusterSpec) { w.Placement = p }) }

func (c Cluster) SetPodAnnotations(m map[string]string) {
	c.editSpec(func(w *clusterSpec) { w.PodAnnotations = m })
}

// SetExternalAccess stores spec.externalAccess (nil removes it).
func (c Cluster) SetExternalAccess(e *ExternalAccess) {
	c.editSpec(func(w *clusterSpec) { w.ExternalAccess = e })
}

// SetBackup stores spec.backup (nil removes it).
func (c Cluster) SetBackup(b *BackupSchedule) { c.editSpec(func(w *clusterSpec) { w.Backup = b }) }

// SetRestoreFrom stores spec.restoreFrom (nil removes it). Only a new object may get one:
// the schema refuses adding, changing or removing it afterwards.
func (c Cluster) SetRestoreFrom(r *RestoreSource) {
	c.editSpec(func(w *clusterSpec) { w.RestoreFrom = r })
}

// SetTLSSecretRef turns TLS on with the given Secret ("" removes spec.tls).
func (c Cluster) SetTLSSecretRef(s string) { c.editSpec(func(w *clusterSpec) { w.TLS = tlsFor(s) }) }
