package views

import "encoding/json"

// Resources are the CPU and memory quantities of a Valkey container (requests = limits),
// spec.resources of a ValkeyConfig and of a ValkeyNode.
type Resources struct {
	CPU    string `json:"cpu,omitempty"`
	Memory string `json:"memory,omitempty"`
}

// UnmarshalJSON reads cpu and memory as the schema allows them, an integer or a quantity
// string, and keeps each as written: 2 reads "2", "500m" reads "500m". Parsing into a
// resource.Quantity instead would canonicalize ("0.5" into "500m", "1024Mi" into "1Gi") and so
// change the spec hash of nodes already running; intstr.IntOrString would hold an integer
// memory in an int32, too small for a byte count. The converter hands a struct with this
// method its JSON, which is why Resources needs no separate wire type.
func (r *Resources) UnmarshalJSON(b []byte) error {
	var w struct {
		CPU    quantity `json:"cpu"`
		Memory quantity `json:"memory"`
	}
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*r = Resources{CPU: string(w.CPU), Memory: string(w.Memory)}
	return nil
}

// quantity is an int-or-string field read as its text.
type quantity string

func (q *quantity) UnmarshalJSON(b []byte) error {
	var s string
	if json.Unmarshal(b, &s) == nil {
		*q = quantity(s)
		return nil
	}
	var n json.Number // keeps the number's own digits: no float formatting to get wrong
	if err := json.Unmarshal(b, &n); err != nil {
		return err
	}
	*q = quantity(n)
	return nil
}

// Placement says where a cluster's pods may run and how strictly each shard spreads:
// spec.placement of a ValkeyCluster and of a ValkeyNode.
type Placement struct {
	Zones        []string          `json:"zones,omitempty"`
	ZoneSpread   string            `json:"zoneSpread,omitempty"`
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`
}

// IsZero reports a placement with nothing in it, empty lists included. The omitzero tags
// of the parts that hold a Placement use it, so an empty placement is stored as no field at
// all rather than as {}.
func (p Placement) IsZero() bool {
	return len(p.Zones) == 0 && p.ZoneSpread == "" && len(p.NodeSelector) == 0
}

// Zone-spread modes of spec.placement.zoneSpread.
const (
	ZoneSpreadBestEffort = "bestEffort"
	ZoneSpreadRequired   = "required"
)

// tlsSpec is spec.tls of a cluster or a node. Its presence is what turns TLS on, so the
// views keep it as a pointer and expose only the Secret name, "" for "absent".
type tlsSpec struct {
	SecretRef string `json:"secretRef,omitempty"`
}

// tlsFor is the spec.tls that stores secretRef: none for "".
func tlsFor(secretRef string) *tlsSpec {
	if secretRef == "" {
		return nil
	}
	return &tlsSpec{SecretRef: secretRef}
}

func (t *tlsSpec) secretRef() string {
	if t == nil {
		return ""
	}
	return t.SecretRef
}

// Persistence modes of spec.persistence.mode, and what becomes of a node's volume when the
// node goes (spec.persistence.reclaim).
const (
	PersistenceNone      = "None"
	PersistenceRDB       = "RDB"
	PersistenceAOF       = "AOF"
	PersistenceRDBAndAOF = "RDBAndAOF"
	ReclaimDelete        = "Delete"
	ReclaimRetain        = "Retain"
)

// Persistence is where and how each server keeps its data: spec.persistence of a ValkeyConfig
// (where an empty field is left to the baseRef chain) and of a ValkeyNode (resolved: the mode
// and reclaim always set).
type Persistence struct {
	Mode             string `json:"mode,omitempty"`
	Size             string `json:"size,omitempty"`
	StorageClassName string `json:"storageClassName,omitempty"`
	Reclaim          string `json:"reclaim,omitempty"`
}

// UnmarshalJSON reads size as the schema allows it, an integer or a quantity string, kept as
// written (see Resources).
func (p *Persistence) UnmarshalJSON(b []byte) error {
	var w struct {
		Mode             string   `json:"mode"`
		Size             quantity `json:"size"`
		StorageClassName string   `json:"storageClassName"`
		Reclaim          string   `json:"reclaim"`
	}
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*p = Persistence{Mode: w.Mode, Size: string(w.Size), StorageClassName: w.StorageClassName, Reclaim: w.Reclaim}
	return nil
}

// Durable reports whether the servers keep their data on a volume (a mode other than None).
func (p Persistence) Durable() bool { return p.Mode != "" && p.Mode != PersistenceNone }

// IsZero reports a persistence with nothing set; such a field is stored as nothing at all.
func (p Persistence) IsZero() bool { return p == Persistence{} }
