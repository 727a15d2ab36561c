package views

import (
	"github.com/gomomento/valkey-operator/crds"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// ValkeyBackup phases.
const (
	BackupPending   = "Pending"
	BackupRunning   = "Running"
	BackupCompleted = "Completed"
	BackupFailed    = "Failed"
)

// Backup is the typed view of a ValkeyBackup.
type Backup struct{ U *unstructured.Unstructured }

// NewBackupObject returns an empty ValkeyBackup object with its GVK set.
func NewBackupObject() *unstructured.Unstructured { return object(crds.KindBackup) }

// NewBackupListObject returns an empty ValkeyBackupList with its GVK set.
func NewBackupListObject() *unstructured.UnstructuredList { return list(crds.KindBackup) }

// BackupSpec is a ValkeyBackup's spec, fixed at creation by the schema.
type BackupSpec struct {
	Cluster string        `json:"cluster,omitempty"`
	Storage BackupStorage `json:"storage,omitzero"`
}

func (b Backup) Spec() BackupSpec { return decode[BackupSpec](b.U, specKey) }

// SetSpec writes the whole spec (tests and tools that build backups).
func (b Backup) SetSpec(s BackupSpec) { encode(b.U, specKey, &s) }

// BackupStatus is a ValkeyBackup's status; the operator owns every field of it. Times are
// RFC 3339 strings, as the schema stores them.
type BackupStatus struct {
	Phase       string `json:"phase,omitempty"`
	StartedAt   string `json:"startedAt,omitempty"`
	CompletedAt string `json:"completedAt,omitempty"`
	Message     string `json:"message,omitempty"`
	// Path is where the backup's objects are, under the storage prefix:
	// {namespace}/{cluster}/{name}.
	Path   string        `json:"path,omitempty"`
	Bytes  int64         `json:"bytes,omitempty"`
	Shards []BackupShard `json:"shards,omitempty"`
}

// BackupShard is one shard's snapshot in a ValkeyBackup's status (and in its manifest).
type BackupShard struct {
	Index         int      `json:"index"`
	Object        string   `json:"object,omitempty"`
	Bytes         int64    `json:"bytes,omitempty"`
	SHA256        string   `json:"sha256,omitempty"`
	Keys          int64    `json:"keys,omitempty"`
	Slots         []string `json:"slots,omitempty"`
	RDBVersion    int      `json:"rdbVersion,omitempty"`
	ValkeyVersion string   `json:"valkeyVersion,omitempty"`
	Node          string   `json:"node,omitempty"`
}

func (b Backup) Status() BackupStatus { return decode[BackupStatus](b.U, statusKey) }

// SetStatus writes the whole status.
func (b Backup) SetStatus(s BackupStatus) { encode(b.U, statusKey, &s) }
