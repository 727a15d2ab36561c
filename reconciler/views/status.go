package views

// Cluster states, serialized exactly as docs/status.md shows them.
const (
	StateCreating = "Creating"
	StateActive   = "Active"
	StateUpdating = "Updating"
	StateInvalid  = "Invalid"
)

// TargetSpec is the status.targetSpec snapshot: the topology only. Both counts are always
// stored, 0 included, as a snapshot has no defaults to fall back on.
type TargetSpec struct {
	Shards           int `json:"shards"`
	ReplicasPerShard int `json:"replicasPerShard"`
}

// Status is the whole operator-written part of a ValkeyCluster status. status.nodes is
// schema-reserved and never written, so it is deliberately absent here.
type Status struct {
	State   string      `json:"state,omitempty"` // as stored; "" when never written
	Target  *TargetSpec `json:"targetSpec,omitempty"`
	Message string      `json:"message,omitempty"`
}

// clusterStatus is the whole stored status: the operator's part and the fields it does not
// own, carried through a rewrite as read.
type clusterStatus struct {
	Status `json:",inline"`
	Nodes  []string `json:"nodes,omitempty"`
}

// Status reads the stored status.
func (c Cluster) Status() Status { return decode[clusterStatus](c.U, statusKey).Status }

// EffectiveState maps the stored state to the one the operator acts on: a status never
// written is Creating, and the reserved Updating is treated as Active (docs/status.md).
func (c Cluster) EffectiveState() string {
	switch s := c.Status().State; s {
	case "":
		return StateCreating
	case StateUpdating:
		return StateActive
	default:
		return s
	}
}

// SetStatus writes state, targetSpec and message, leaving every other status field (nodes)
// untouched.
func (c Cluster) SetStatus(s Status) {
	update(c.U, statusKey, func(w *clusterStatus) { w.Status = s })
}

// Equal compares two statuses field by field.
func (s Status) Equal(o Status) bool {
	if s.State != o.State || s.Message != o.Message {
		return false
	}
	if (s.Target == nil) != (o.Target == nil) {
		return false
	}
	return s.Target == nil || *s.Target == *o.Target
}
