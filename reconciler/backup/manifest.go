package backup

import (
	"encoding/json"
	"fmt"

	"github.com/gomomento/valkey-operator/reconciler/views"
)

// ManifestFormat is the version of the manifest this operator writes and reads. A reader
// refuses another: a field added without changing a meaning keeps the version.
const ManifestFormat = 1

// ManifestName is the manifest's object name beside the shards' objects. It is written last:
// a backup without it is not complete and is never restored from.
const ManifestName = "manifest.json"

// Manifest is the documented description of a completed backup (docs/backup.md), enough to
// restore it without the ValkeyBackup object: from another namespace or Kubernetes cluster.
type Manifest struct {
	FormatVersion int                 `json:"formatVersion"`
	Cluster       string              `json:"cluster"`
	Namespace     string              `json:"namespace"`
	Backup        string              `json:"backup"`
	CreatedAt     string              `json:"createdAt"`
	StartedAt     string              `json:"startedAt"`
	CompletedAt   string              `json:"completedAt"`
	Shards        []views.BackupShard `json:"shards"`
}

// Encode is the manifest's JSON, indented for people who read a bucket.
func (m Manifest) Encode() ([]byte, error) { return json.MarshalIndent(m, "", "  ") }

// DecodeManifest reads a manifest, refusing a format this operator does not know and one that
// names no shard or a shard without its object or checksum.
func DecodeManifest(b []byte) (Manifest, error) {
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return Manifest{}, fmt.Errorf("manifest is not JSON: %w", err)
	}
	if m.FormatVersion != ManifestFormat {
		return Manifest{}, fmt.Errorf("manifest format %d is not one this operator reads (%d)", m.FormatVersion, ManifestFormat)
	}
	if len(m.Shards) == 0 {
		return Manifest{}, fmt.Errorf("manifest names no shard")
	}
	for i, s := range m.Shards {
		if s.Index != i || s.Object == "" || len(s.SHA256) != 64 {
			return Manifest{}, fmt.Errorf("manifest shard %d is incomplete (index %d, object %q, sha256 %q)", i, s.Index, s.Object, s.SHA256)
		}
	}
	return m, nil
}
