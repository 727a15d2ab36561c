package kubectlvalkey

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gomomento/valkey-operator/valkeyops/model"
)

// Report is what `kubectl valkey status` prints; `-o json` prints it as it is, so its field
// names are the plugin's interface for scripts.
type Report struct {
	Cluster   string   `json:"cluster"`
	Namespace string   `json:"namespace"`
	State     string   `json:"state"`
	Message   string   `json:"message,omitempty"`
	Desired   Topology `json:"desired"`
	// Formed is the topology the servers report: shards with a primary holding slots, and
	// the fewest linked replicas any of them has.
	Formed Topology `json:"formed"`
	// Live says where the per-node server data came from, or why there is none.
	Live     string       `json:"live"`
	Nodes    []NodeReport `json:"nodes"`
	Moves    []Move       `json:"moves,omitempty"`
	Actions  []Event      `json:"actions,omitempty"`
	Warnings []Event      `json:"warnings,omitempty"`
	TLS      *TLSReport   `json:"tls,omitempty"`
}

// Topology is a count of shards and of replicas per shard.
type Topology struct {
	Shards           int `json:"shards"`
	ReplicasPerShard int `json:"replicasPerShard"`
}

// NodeReport is one ValkeyNode: what the operator recorded and what its server says.
type NodeReport struct {
	Name      string `json:"name"`
	Shard     int    `json:"shard"`
	Lifecycle string `json:"lifecycle"`
	Pod       string `json:"pod,omitempty"`
	Zone      string `json:"zone,omitempty"`
	Node      string `json:"node,omitempty"` // the Kubernetes node
	IP        string `json:"ip,omitempty"`
	// External is the address clients outside the pod network use (spec.externalAccess):
	// host:port, "pending" until the Service has one, "? (why)" when it cannot.
	External string `json:"external,omitempty"`
	// From the server itself (empty when it did not answer: see Error).
	ID        string   `json:"id,omitempty"`
	Role      string   `json:"role,omitempty"`
	Slots     []string `json:"slots,omitempty"`
	SlotCount int      `json:"slotCount"`
	Keys      int64    `json:"keys"`
	// Link is a replica's link to its primary ("up", "down"); Primary the ValkeyNode it follows.
	Link    string `json:"link,omitempty"`
	Primary string `json:"primary,omitempty"`
	// LagBytes is how far a replica's replication offset trails its primary's (nil when
	// either offset is unknown).
	LagBytes *int64 `json:"lagBytes,omitempty"`
	Syncing  bool   `json:"syncing,omitempty"`
	Error    string `json:"error,omitempty"`
}

// Move is a slot move in progress: slots the source still has migrating to the target.
type Move struct {
	From      string `json:"from"`
	To        string `json:"to"`
	SlotsLeft int    `json:"slotsLeft"`
}

// Event is one Event of the cluster, newest last.
type Event struct {
	Time    time.Time `json:"time"`
	Type    string    `json:"type"`
	Reason  string    `json:"reason"`
	Message string    `json:"message"`
	Count   int32     `json:"count,omitempty"`
}

// TLSReport is the certificate the servers present, from the cluster's TLS Secret.
type TLSReport struct {
	Secret   string    `json:"secret"`
	NotAfter time.Time `json:"notAfter,omitzero"`
	Error    string    `json:"error,omitempty"`
}

// Served fills each node's server data from its own view (states by ValkeyNode name, nil
// for a server that did not answer), then the formed topology and the slot moves.
func (r *Report) Served(states map[string]*model.NodeState, errs map[string]error) {
	byID := map[string]*model.NodeState{}
	nameOf := map[string]string{}
	for name, st := range states {
		if st != nil && st.ID != "" {
			byID[st.ID], nameOf[st.ID] = st, name
		}
	}
	name := func(id string) string {
		if n, ok := nameOf[id]; ok {
			return n
		}
		return id
	}
	linked := map[string]int{} // primary ID -> linked replicas
	for i := range r.Nodes {
		n := &r.Nodes[i]
		if err := errs[n.Name]; err != nil {
			n.Error = err.Error()
		}
		st := states[n.Name]
		if st == nil {
			continue
		}
		n.ID, n.Role, n.Keys = st.ID, string(st.Role), st.Keys
		n.SlotCount = model.CountSlots(st.Slots)
		for _, s := range st.Slots {
			n.Slots = append(n.Slots, s.String())
		}
		if st.Role == model.RoleReplica {
			n.Link, n.Primary, n.Syncing = string(st.PrimaryLink), name(st.PrimaryID), st.SyncInProgress
			if p := byID[st.PrimaryID]; p != nil {
				lag := max(p.ReplOffset-st.ReplOffset, 0)
				n.LagBytes = &lag
			}
			if st.LinkedToPrimary() {
				linked[st.PrimaryID]++
			}
		}
		if self := st.Self(); self != nil {
			r.Moves = append(r.Moves, moves(n.Name, self.Migrating, name)...)
		}
	}
	r.Formed = Topology{}
	least := -1
	for id, st := range byID {
		if st.Role == model.RolePrimary && len(st.Slots) > 0 {
			r.Formed.Shards++
			if least < 0 || linked[id] < least {
				least = linked[id]
			}
		}
	}
	r.Formed.ReplicasPerShard = max(least, 0)
	sort.Slice(r.Moves, func(i, j int) bool { return r.Moves[i].From+r.Moves[i].To < r.Moves[j].From+r.Moves[j].To })
}

// moves groups a source's migrating slots by target.
func moves(from string, migrating map[int]string, name func(string) string) []Move {
	left := map[string]int{}
	for _, to := range migrating {
		left[to]++
	}
	var out []Move
	for to, n := range left {
		out = append(out, Move{From: from, To: name(to), SlotsLeft: n})
	}
	return out
}

// WriteText prints the report for a person.
func (r *Report) WriteText(w io.Writer, now time.Time) error {
	p := &printer{w: w}
	p.f("Cluster:   %s/%s\n", r.Namespace, r.Cluster)
	p.f("State:     %s\n", r.State)
	if r.Message != "" {
		p.f("Message:   %s\n", r.Message)
	}
	p.f("Shards:    %d formed / %d desired\n", r.Formed.Shards, r.Desired.Shards)
	p.f("Replicas:  %d formed / %d desired per shard\n", r.Formed.ReplicasPerShard, r.Desired.ReplicasPerShard)
	if r.TLS != nil {
		switch {
		case r.TLS.Error != "":
			p.f("TLS:       secret %s: %s\n", r.TLS.Secret, r.TLS.Error)
		case r.TLS.NotAfter.Before(now):
			p.f("TLS:       secret %s, certificate EXPIRED %s (%s ago)\n", r.TLS.Secret, r.TLS.NotAfter.UTC().Format(time.RFC3339), humanDuration(now.Sub(r.TLS.NotAfter)))
		default:
			p.f("TLS:       secret %s, certificate expires %s (in %s)\n", r.TLS.Secret, r.TLS.NotAfter.UTC().Format(time.RFC3339), humanDuration(r.TLS.NotAfter.Sub(now)))
		}
	}
	p.f("Live data: %s\n\n", r.Live)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	external := false
	for _, n := range r.Nodes {
		external = external || n.External != ""
	}
	header := "NODE\tSHARD\tLIFECYCLE\tROLE\tSLOTS\tRANGES\tKEYS\tLINK\tLAG\tZONE\tK8S NODE\tIP"
	if external {
		header += "\tEXTERNAL"
	}
	fmt.Fprintln(tw, header)
	for _, n := range r.Nodes {
		link, lag := dash(n.Link), "-"
		if n.Primary != "" {
			link += " (" + n.Primary + ")"
		}
		if n.Syncing {
			link += " syncing"
		}
		if n.LagBytes != nil {
			lag = fmt.Sprintf("%dB", *n.LagBytes)
		}
		role := dash(n.Role)
		if n.Error != "" {
			role = "? (" + n.Error + ")"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%d\t%s\t%d\t%s\t%s\t%s\t%s\t%s", n.Name, n.Shard, n.Lifecycle, role, n.SlotCount,
			dash(strings.Join(n.Slots, ",")), n.Keys, link, lag, dash(n.Zone), dash(n.Node), dash(n.IP))
		if external {
			fmt.Fprintf(tw, "\t%s", dash(n.External))
		}
		fmt.Fprintln(tw)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(r.Moves) > 0 {
		p.f("\nSlot moves in progress:\n")
		for _, m := range r.Moves {
			p.f("  %s -> %s: %d slot(s) left\n", m.From, m.To, m.SlotsLeft)
		}
	}
	events := func(title string, es []Event) {
		if len(es) == 0 {
			return
		}
		p.f("\n%s:\n", title)
		for _, e := range es {
			p.f("  %s  %s  %s\n", e.Time.UTC().Format(time.RFC3339), e.Reason, e.Message)
		}
	}
	events("Last topology actions", r.Actions)
	events("Warnings", r.Warnings)
	return p.err
}

type printer struct {
	w   io.Writer
	err error
}

func (p *printer) f(format string, args ...any) {
	if p.err == nil {
		_, p.err = fmt.Fprintf(p.w, format, args...)
	}
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// humanDuration prints d in days when it is long, else hours and minutes.
func humanDuration(d time.Duration) string {
	if d >= 48*time.Hour {
		return fmt.Sprintf("%dd", int(d.Hours()/24))
	}
	return d.Truncate(time.Minute).String()
}
