//go:build envtest

package reconciler_test

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gomomento/valkey-operator/internal/poll"
	"github.com/gomomento/valkey-operator/reconciler"
	"github.com/gomomento/valkey-operator/valkeyops"
	"github.com/gomomento/valkey-operator/valkeyops/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/types"
)

// The scripted Valkey: an in-memory model of one cluster's servers, standing behind
// reconciler.Valkey where production has valkeyops.Admin. Each port method does to the
// model what valkeyops does to real servers (the same checks, the same commands in the same
// order) and each command changes the model the way a real server would, refusing what a
// real server refuses. Observe renders every server's CLUSTER NODES text and parses it with
// model.ParseClusterNodes, the parser valkeyops.Observe uses, so the planner sees exactly
// the shape valkeyops.Observe produces.
//
// The simplifications, all on the side of time rather than behaviour: gossip converges at
// once among servers that know each other (MEET merges the two sides' tables), a failure is
// flagged only when the test says a node timeout passed, and replica links come up at once.
// Every slot is taken to hold keys, so a slot's data has one location the model tracks: a
// move that forgets the keys, or a failover to nobody, shows up as data not on its owner.

// scriptedVersion is what every server reports: an 8.x server, so slots move key by key
// (SETSLOT IMPORTING/MIGRATING) and an interrupted move leaves them open, as on Valkey 8.
const scriptedVersion = "8.0.2"

// scriptedValkey is a reconciler.Valkey whose clusters are valkeyModels, one per
// ValkeyCluster, created on first use.
type scriptedValkey struct {
	mu     sync.Mutex
	models map[types.NamespacedName]*valkeyModel
	// fallback's per-port fakes serve the ports the model does not script (credentials and
	// certificates); its write counter shows whether any of their writes was called.
	fallback *fakeValkey
	// latency is how long every write operation takes, so two that ran at once would overlap.
	latency time.Duration
}

func newScriptedValkey(latency time.Duration) *scriptedValkey {
	return &scriptedValkey{models: map[types.NamespacedName]*valkeyModel{}, fallback: newFakeValkey(), latency: latency}
}

// model is the cluster's model, created empty (no servers) on first use.
func (s *scriptedValkey) model(key types.NamespacedName) *valkeyModel {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.models[key]
	if m == nil {
		m = &valkeyModel{key: key, latency: s.latency, byAddr: map[string]*modelServer{}, byName: map[string]*modelServer{}, byID: map[string]*modelServer{}}
		s.models[key] = m
	}
	return m
}

// Connect refuses what a real connection refuses: no operator user or password, a TLS
// certificate the credentials' own verification rejects, and (WRONGPASS) a password other
// than the one the cluster's servers were first reached with.
func (s *scriptedValkey) Connect(ctx context.Context, key types.NamespacedName, cred valkeyops.Credentials) (*reconciler.Servers, error) {
	c, err := s.connect(ctx, key, cred)
	if err != nil {
		return nil, err
	}
	return c.servers(), nil
}

func (s *scriptedValkey) connect(_ context.Context, key types.NamespacedName, cred valkeyops.Credentials) (*scriptedClient, error) {
	if cred.Username != model.OperatorUser || cred.Password == "" {
		return nil, fmt.Errorf("scripted: refusing unauthenticated connection")
	}
	if err := verifyServedCertificate(cred); err != nil {
		return nil, fmt.Errorf("scripted: TLS handshake: %w", err)
	}
	m := s.model(key)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.password == "" {
		m.password = cred.Password
	}
	if m.password != cred.Password {
		return nil, fmt.Errorf("scripted: WRONGPASS invalid username-password pair")
	}
	return &scriptedClient{m: m, creds: s.fallback.creds.cluster(key), certs: s.fallback.certs.cluster(key)}, nil
}

func (s *scriptedValkey) Release(types.NamespacedName) {}

// scriptedProcess is one operator process as the servers see it: its connections. Killing it
// is what SIGKILL does to them: a command in flight ends where it was, and the process sends
// nothing more, even from a task that outlived its manager in this test binary.
type scriptedProcess struct {
	dead chan struct{}
	once sync.Once
}

func (p *scriptedProcess) kill() { p.once.Do(func() { close(p.dead) }) }

// killed is closed once the process is dead (never for the nil process).
func (p *scriptedProcess) killed() <-chan struct{} {
	if p == nil {
		return nil
	}
	return p.dead
}

func (p *scriptedProcess) gone() bool {
	select {
	case <-p.killed():
		return true
	default:
		return false
	}
}

// process returns a reconciler.Valkey whose connections die with the returned process.
func (s *scriptedValkey) process() (reconciler.Valkey, *scriptedProcess) {
	p := &scriptedProcess{dead: make(chan struct{})}
	return processValkey{s, p}, p
}

// processValkey is scriptedValkey as one operator process reaches it.
type processValkey struct {
	v *scriptedValkey
	p *scriptedProcess
}

func (pv processValkey) Connect(ctx context.Context, key types.NamespacedName, cred valkeyops.Credentials) (*reconciler.Servers, error) {
	if pv.p.gone() {
		return nil, fmt.Errorf("scripted: the operator process is dead")
	}
	c, err := pv.v.connect(ctx, key, cred)
	if err != nil {
		return nil, err
	}
	c.proc = pv.p
	return c.servers(), nil
}

func (pv processValkey) Release(key types.NamespacedName) { pv.v.Release(key) }

// ---- the model ------------------------------------------------------------------------

// modelServer is one Valkey process as the model knows it.
type modelServer struct {
	node        model.Node // ValkeyNode name, pod address, shard (from the pod)
	id          string
	alive       bool
	primaryID   string // "" for a primary
	linked      bool   // a replica's replication link is established
	masterauth  bool   // replication credentials set (auth is always on)
	configEpoch uint64
	offset      int64
	known       map[string]bool // peer IDs in its node table
	failing     map[string]bool // peer IDs it flags "fail"
	importing   map[int]string  // slot -> source ID
	migrating   map[int]string  // slot -> target ID
}

func (s *modelServer) primary() bool { return s.primaryID == "" }

// writeOp is one port write call and the commands it sent.
type writeOp struct {
	Op, Args   string
	Start, End time.Time
	Err        error
	// TargetRole is the role of the node the call names, when it names one, at call time.
	TargetRole string
	Cmds       []valkeyCmd
}

// valkeyCmd is one write command sent to one server.
type valkeyCmd struct {
	At   time.Time
	Node string
	Args string
}

// valkeyModel is one cluster's servers. Slot ownership is kept once (owner): every server
// that knows a slot's owner sees it owned by that node, one that does not sees it unassigned.
type valkeyModel struct {
	mu      sync.Mutex
	key     types.NamespacedName
	latency time.Duration

	password     string
	byAddr       map[string]*modelServer
	byName       map[string]*modelServer
	byID         map[string]*modelServer
	owner        [model.SlotCount]string // slot -> owner ID ("" = nobody)
	data         [model.SlotCount]string // slot -> ID of the server holding its keys
	currentEpoch uint64
	serial       int

	ops      []writeOp
	inflight []*writeOp
	overlaps []string
	brk      *rebalanceBreak
	gate     *rebalanceGate
	hooks    []opHook
	// invariant, when set, is checked before every command and after every change of the
	// servers; what it reports is kept in broken.
	invariant func() string
	broken    []string
}

// rebalanceGate holds the next Rebalance in flight, before it sends any command, until the
// test opens it: a slot move that takes as long as the test wants.
type rebalanceGate struct {
	hit, open chan struct{}
	once      sync.Once
}

// opHook runs fn once, right after the next write call of op that succeeds, before that call
// returns to its caller.
type opHook struct {
	op   string
	fn   func()
	done chan struct{}
}

// rebalanceBreak interrupts the next Rebalance once after slots have moved: it leaves the
// next chunk of slots open (IMPORTING/MIGRATING) and holds the call until its context ends,
// as a Rebalance cut short by a crashed operator would.
type rebalanceBreak struct {
	after int
	hit   chan struct{}
}

// errHold ends a write op that holds until its context is cancelled or its process dies.
var errHold = errors.New("scripted: holding until cancelled")

func scriptedOpErr(node, step string, err error) error {
	return &model.OpError{Node: node, Step: step, Err: err}
}

// scriptedServerErr is an error reply of a real server (what valkeyops surfaces as is).
func scriptedServerErr(node, step, format string, args ...any) error {
	return scriptedOpErr(node, step, fmt.Errorf("ERR "+format, args...))
}

// write runs one port write call: it takes the model's latency, applies fn under the
// lock, and records the call, flagging any other call of the same cluster still in flight.
func (m *valkeyModel) write(ctx context.Context, proc *scriptedProcess, op, args, target string, fn func(*writeOp) error) error {
	if proc.gone() {
		return scriptedOpErr("", strings.ToLower(op), fmt.Errorf("%w: connection closed (the operator process is dead)", model.ErrUnreachable))
	}
	m.mu.Lock()
	w := &writeOp{Op: op, Args: args, Start: time.Now()}
	if s := m.byName[target]; s != nil {
		w.TargetRole = modelRole(s)
	}
	for _, o := range m.inflight {
		m.overlaps = append(m.overlaps, fmt.Sprintf("%s(%s) started while %s(%s) was running", op, args, o.Op, o.Args))
	}
	m.inflight = append(m.inflight, w)
	var gate *rebalanceGate
	if op == "Rebalance" && m.gate != nil {
		gate, m.gate = m.gate, nil
		close(gate.hit)
	}
	m.mu.Unlock()

	var err error
	dead := fmt.Errorf("%w: connection closed (the operator process is dead)", model.ErrUnreachable)
	if gate != nil {
		select {
		case <-gate.open:
		case <-ctx.Done():
			err = fmt.Errorf("held: %w", ctx.Err())
		case <-proc.killed():
			err = fmt.Errorf("held: %w", dead)
		}
	}
	if err == nil {
		select {
		case <-ctx.Done():
			err = ctx.Err()
		case <-proc.killed():
			err = dead
		case <-time.After(m.latency):
			m.mu.Lock()
			err = fn(w)
			m.check("after " + op + "(" + args + ")")
			m.mu.Unlock()
		}
	}
	if errors.Is(err, errHold) {
		select {
		case <-ctx.Done():
			err = fmt.Errorf("interrupted: %w", ctx.Err())
		case <-proc.killed():
			err = fmt.Errorf("interrupted: %w", dead)
		}
	}

	m.mu.Lock()
	defer m.mu.Unlock()
	w.End, w.Err = time.Now(), err
	for i, o := range m.inflight {
		if o == w {
			m.inflight = append(m.inflight[:i], m.inflight[i+1:]...)
			break
		}
	}
	m.ops = append(m.ops, *w)
	if err == nil {
		for i, h := range m.hooks {
			if h.op == op {
				m.hooks = append(m.hooks[:i], m.hooks[i+1:]...)
				h.fn()
				close(h.done)
				break
			}
		}
	}
	return err
}

// check records what the invariant, if any, reports of the servers now. The caller holds m.mu.
func (m *valkeyModel) check(when string) {
	if m.invariant == nil {
		return
	}
	if why := m.invariant(); why != "" {
		m.broken = append(m.broken, when+": "+why)
	}
}

// cmd records one write command to s, refusing a server that does not answer.
func (m *valkeyModel) cmd(w *writeOp, s *modelServer, args ...string) error {
	if s == nil || !s.alive {
		name := "?"
		if s != nil {
			name = s.node.Name
		}
		return scriptedOpErr(name, strings.ToLower(strings.Join(args[:min(2, len(args))], "-")), fmt.Errorf("%w: connection refused", model.ErrUnreachable))
	}
	m.check("before " + strings.Join(args, " ") + " to " + s.node.Name)
	logged := slices.Clone(args)
	for i, a := range logged {
		if a == m.password {
			logged[i] = "<redacted>" // the log ends up in failure messages: no secrets there
		}
	}
	w.Cmds = append(w.Cmds, valkeyCmd{At: time.Now(), Node: s.node.Name, Args: strings.Join(logged, " ")})
	return nil
}

func modelRole(s *modelServer) string {
	if s.primary() {
		return string(model.RolePrimary)
	}
	return string(model.RoleReplica)
}

// sees reports whether s's view has a node of that ID.
func (s *modelServer) sees(id string) bool { return id != "" && (id == s.id || s.known[id]) }

func (m *valkeyModel) slotsOf(id string) []int {
	var out []int
	for slot, o := range m.owner {
		if o == id {
			out = append(out, slot)
		}
	}
	return out
}

// assigned is cluster_slots_assigned in s's view.
func (m *valkeyModel) assigned(s *modelServer) int {
	n := 0
	for _, o := range m.owner {
		if s.sees(o) {
			n++
		}
	}
	return n
}

// clusterState is cluster_state in s's view: every slot assigned to a node it does not flag
// as failed.
func (m *valkeyModel) clusterState(s *modelServer) string {
	for _, o := range m.owner {
		if !s.sees(o) || s.failing[o] {
			return "fail"
		}
	}
	return "ok"
}

// clusterNodes renders s's CLUSTER NODES reply.
func (m *valkeyModel) clusterNodes(s *modelServer) string {
	ids := []string{s.id}
	for id := range s.known {
		ids = append(ids, id)
	}
	sort.Strings(ids[1:])
	var b strings.Builder
	for _, id := range ids {
		p := m.byID[id]
		if p == nil {
			continue
		}
		flags := "master"
		if !p.primary() {
			flags = "slave"
		}
		if p == s {
			flags = "myself," + flags
		} else if s.failing[id] {
			flags += ",fail"
		}
		primary := "-"
		if !p.primary() {
			primary = p.primaryID
		}
		link := model.BusConnected
		if p != s && !p.alive {
			link = model.BusDisconnected
		}
		host, port, _ := strings.Cut(p.node.Addr, ":")
		bus, _ := strconv.Atoi(port)
		fmt.Fprintf(&b, "%s %s:%s@%d %s %s 0 1700000000000 %d %s", id, host, port, bus+10000, flags, primary, p.configEpoch, link)
		for _, r := range model.CompactSlots(m.slotsOf(id)) {
			b.WriteString(" " + r.String())
		}
		if p == s {
			for _, slot := range sortedSlots(s.migrating) {
				fmt.Fprintf(&b, " [%d->-%s]", slot, s.migrating[slot])
			}
			for _, slot := range sortedSlots(s.importing) {
				fmt.Fprintf(&b, " [%d-<-%s]", slot, s.importing[slot])
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}

func sortedSlots(m map[int]string) []int {
	out := make([]int, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Ints(out)
	return out
}

// state is what valkeyops' observeOne builds for the server at n.Addr.
func (m *valkeyModel) state(n model.Node) model.NodeState {
	st := model.NodeState{Node: n}
	s := m.byAddr[n.Addr]
	if s == nil || !s.alive {
		st.Err = scriptedOpErr(n.Name, "observe", fmt.Errorf("%w: dial tcp %s: connection refused", model.ErrUnreachable, n.Addr))
		return st
	}
	view, err := model.ParseClusterNodes(m.clusterNodes(s))
	if err != nil {
		st.Err = scriptedOpErr(n.Name, "observe", err)
		return st
	}
	st.Reachable = true
	st.View = view
	st.ClusterState = m.clusterState(s)
	st.KnownNodes = 1 + len(s.known)
	st.SlotsAssigned = m.assigned(s)
	st.CurrentEpoch = m.currentEpoch
	st.ReplOffset = s.offset
	st.Version = scriptedVersion
	if self := st.Self(); self != nil {
		st.ID, st.Flags, st.Slots, st.ConfigEpoch = self.ID, self.Flags, self.Slots, self.ConfigEpoch
		if self.IsReplica() {
			st.Role, st.PrimaryID, st.PrimaryLink = model.RoleReplica, self.PrimaryID, model.PrimaryLinkDown
			if p := m.byID[s.primaryID]; s.linked && p != nil && p.alive {
				st.PrimaryLink = model.PrimaryLinkUp
			}
		} else {
			st.Role, st.PrimaryLink = model.RolePrimary, model.PrimaryLinkUp
		}
	}
	return st
}

// snapshot observes nodes as valkeyops.Observe does (same order, unreachable ones kept).
func (m *valkeyModel) snapshot(nodes []model.Node) (*model.Snapshot, error) {
	seen := map[string]bool{}
	for _, n := range nodes {
		if seen[n.Name] {
			return nil, scriptedOpErr(n.Name, "observe", fmt.Errorf("%w: duplicate node name", model.ErrInvalidSpec))
		}
		seen[n.Name] = true
	}
	snap := &model.Snapshot{}
	for _, n := range nodes {
		snap.Nodes = append(snap.Nodes, m.state(n))
	}
	return snap, nil
}

// modelMember is a server reached through the address a caller gave, with the caller's Node.
type modelMember struct {
	*modelServer
	n model.Node
}

// members resolves nodes to the servers answering at their addresses; unreachable ones are
// nil. A caller naming a node twice is refused as valkeyops refuses it.
func (m *valkeyModel) members(nodes []model.Node) ([]modelMember, error) {
	if _, err := m.snapshot(nodes); err != nil {
		return nil, err
	}
	out := make([]modelMember, len(nodes))
	for i, n := range nodes {
		out[i].n = n
		if s := m.byAddr[n.Addr]; s != nil && s.alive {
			out[i].modelServer = s
		}
	}
	return out, nil
}

func requireAllMembers(ms []modelMember) error {
	for _, x := range ms {
		if x.modelServer == nil {
			return scriptedOpErr(x.n.Name, "observe", fmt.Errorf("%w: connection refused", model.ErrUnreachable))
		}
	}
	return nil
}

func reachableMembers(ms []modelMember) []modelMember {
	var out []modelMember
	for _, x := range ms {
		if x.modelServer != nil {
			out = append(out, x)
		}
	}
	return out
}

func memberNamed(ms []modelMember, name string) (modelMember, bool) {
	for _, x := range ms {
		if x.n.Name == name {
			return x, true
		}
	}
	return modelMember{}, false
}

// ---- commands: each changes the model as a real server does, or refuses ----------------

func (m *valkeyModel) configSet(w *writeOp, s *modelServer, kv ...string) error {
	if err := m.cmd(w, s, append([]string{"CONFIG", "SET"}, kv...)...); err != nil {
		return err
	}
	// The primary accepts the replication user with the password derived from the
	// operator's, as the rendered ACL says.
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i] == "masterauth" {
			s.masterauth = kv[i+1] == model.ReplicationPassword(m.password)
		}
	}
	return nil
}

func (m *valkeyModel) setConfigEpoch(w *writeOp, s *modelServer, epoch uint64) error {
	if err := m.cmd(w, s, "CLUSTER", "SET-CONFIG-EPOCH", strconv.FormatUint(epoch, 10)); err != nil {
		return err
	}
	if len(s.known) > 0 {
		return scriptedServerErr(s.node.Name, "set-config-epoch", "The user can assign a config epoch only when the node does not know any other node.")
	}
	if s.configEpoch != 0 {
		return scriptedServerErr(s.node.Name, "set-config-epoch", "Node config epoch is already non-zero")
	}
	s.configEpoch = epoch
	m.currentEpoch = max(m.currentEpoch, epoch)
	return nil
}

func (m *valkeyModel) addSlots(w *writeOp, s *modelServer, slots []int) error {
	args := []string{"CLUSTER", "ADDSLOTSRANGE"}
	for _, r := range model.CompactSlots(slots) {
		args = append(args, strconv.Itoa(r.Start), strconv.Itoa(r.End))
	}
	if err := m.cmd(w, s, args...); err != nil {
		return err
	}
	for _, slot := range slots {
		if s.sees(m.owner[slot]) {
			return scriptedServerErr(s.node.Name, "addslots", "Slot %d is already busy", slot)
		}
	}
	for _, slot := range slots {
		m.owner[slot], m.data[slot] = s.id, s.id // a slot nobody had: empty, and now s's
	}
	return nil
}

func (m *valkeyModel) bumpEpoch(w *writeOp, s *modelServer) error {
	if err := m.cmd(w, s, "CLUSTER", "BUMPEPOCH"); err != nil {
		return err
	}
	m.currentEpoch++
	s.configEpoch = m.currentEpoch
	return nil
}

// meet is CLUSTER MEET sent to a for b. The handshake completes only with a live server at
// b's address; gossip then merges both sides' tables (including what they flag as failed).
func (m *valkeyModel) meet(w *writeOp, a, b *modelServer) error {
	host, port, _ := strings.Cut(b.node.Addr, ":")
	if err := m.cmd(w, a, "CLUSTER", "MEET", host, port); err != nil {
		return err
	}
	if t := m.byAddr[b.node.Addr]; t != b || !b.alive {
		return scriptedOpErr(a.node.Name, "meet-wait", fmt.Errorf("%w: no handshake with %s", model.ErrNotConverged, b.node.Addr))
	}
	ids := map[string]bool{a.id: true, b.id: true}
	failed := map[string]bool{}
	for _, s := range []*modelServer{a, b} {
		for id := range s.known {
			ids[id] = true
		}
		for id := range s.failing {
			failed[id] = true
		}
	}
	for id := range ids {
		s := m.byID[id]
		if s == nil || !s.alive {
			continue
		}
		for other := range ids {
			if other != id {
				s.known[other] = true
				if failed[other] {
					s.failing[other] = true
				}
			}
		}
	}
	return nil
}

// replicate is CLUSTER REPLICATE sent to s.
func (m *valkeyModel) replicate(w *writeOp, s *modelServer, primaryID string) error {
	if err := m.cmd(w, s, "CLUSTER", "REPLICATE", primaryID); err != nil {
		return err
	}
	p := m.byID[primaryID]
	switch {
	case primaryID == s.id:
		return scriptedServerErr(s.node.Name, "replicate", "Can't replicate myself")
	case !s.known[primaryID] || p == nil:
		return scriptedServerErr(s.node.Name, "replicate", "Unknown node %s", primaryID)
	case !p.primary():
		return scriptedServerErr(s.node.Name, "replicate", "I can only replicate a master, not a replica.")
	case s.primary() && len(m.slotsOf(s.id)) > 0:
		return scriptedServerErr(s.node.Name, "replicate", "To set a master the node must be empty and without assigned slots.")
	}
	s.primaryID, s.importing, s.migrating = primaryID, map[int]string{}, map[int]string{}
	s.linked = s.masterauth && p.alive // without credentials the primary refuses the sync
	if s.linked {
		s.offset = p.offset
	}
	return nil
}

// forget is CLUSTER FORGET sent to s.
func (m *valkeyModel) forget(w *writeOp, s *modelServer, id string) error {
	if err := m.cmd(w, s, "CLUSTER", "FORGET", id); err != nil {
		return err
	}
	switch {
	case id == s.id:
		return scriptedServerErr(s.node.Name, "forget", "I tried hard but I can't forget myself...")
	case id == s.primaryID:
		return scriptedServerErr(s.node.Name, "forget", "Can't forget my master!")
	case !s.known[id]:
		return scriptedServerErr(s.node.Name, "forget", "Unknown node %s", id)
	}
	delete(s.known, id)
	delete(s.failing, id)
	return nil
}

// setSlot is CLUSTER SETSLOT <slot> IMPORTING|MIGRATING|NODE|STABLE [id] sent to s.
func (m *valkeyModel) setSlot(w *writeOp, s *modelServer, slot int, mode, id string) error {
	args := []string{"CLUSTER", "SETSLOT", strconv.Itoa(slot), mode}
	if id != "" {
		args = append(args, id)
	}
	if err := m.cmd(w, s, args...); err != nil {
		return err
	}
	if !s.primary() {
		return scriptedServerErr(s.node.Name, "setslot", "Please use SETSLOT only with masters.")
	}
	if id != "" && !s.sees(id) {
		return scriptedServerErr(s.node.Name, "setslot", "I don't know about node %s", id)
	}
	switch mode {
	case "IMPORTING":
		if m.owner[slot] == s.id {
			return scriptedServerErr(s.node.Name, "setslot", "I'm already the owner of hash slot %d", slot)
		}
		s.importing[slot] = id
	case "MIGRATING":
		if m.owner[slot] != s.id {
			return scriptedServerErr(s.node.Name, "setslot", "I'm not the owner of hash slot %d", slot)
		}
		if !m.byID[id].primary() {
			return scriptedServerErr(s.node.Name, "setslot", "Target node is not a master")
		}
		s.migrating[slot] = id
	case "STABLE":
		delete(s.importing, slot)
		delete(s.migrating, slot)
	case "NODE":
		if m.owner[slot] == s.id && id != s.id && m.data[slot] == s.id {
			return scriptedServerErr(s.node.Name, "setslot", "Can't assign hashslot %d to a different node while I still hold keys for this hash slot.", slot)
		}
		if id == s.id && s.importing[slot] != "" {
			// Claiming an imported slot bumps the epoch so the claim wins everywhere.
			m.currentEpoch++
			s.configEpoch = m.currentEpoch
		}
		delete(s.importing, slot)
		delete(s.migrating, slot)
		m.owner[slot] = id
	}
	return nil
}

// migrateKeys is the MIGRATE rounds of a slot being moved: its keys go from src to dst, which
// accepts them (RESTORE-ASKING) only for a slot it imports or owns.
func (m *valkeyModel) migrateKeys(w *writeOp, src, dst *modelServer, slot int) error {
	if err := m.cmd(w, src, "MIGRATE", dst.node.Addr, "slot", strconv.Itoa(slot)); err != nil {
		return err
	}
	if dst.importing[slot] == "" && m.owner[slot] != dst.id {
		return scriptedServerErr(src.node.Name, "migrate", "MOVED %d %s (target neither imports nor owns the slot)", slot, dst.node.Addr)
	}
	if m.data[slot] == src.id {
		m.data[slot] = dst.id
	}
	return nil
}

// promote makes replica r the primary of its shard: the slots and keys of its old primary
// are its own, the old primary's other replicas follow it, and a live old primary becomes
// its replica (it learns it lost its slots).
func (m *valkeyModel) promote(r *modelServer) {
	old := m.byID[r.primaryID]
	m.currentEpoch++
	r.configEpoch = m.currentEpoch
	r.primaryID = ""
	for _, slot := range m.slotsOf(old.id) {
		m.owner[slot] = r.id
		if m.data[slot] == old.id {
			m.data[slot] = r.id // the replica's copy
		}
	}
	for _, s := range m.byID {
		if s != r && s.primaryID == old.id {
			s.primaryID = r.id
		}
	}
	if old.alive {
		old.primaryID, old.linked = r.id, true
	}
}

// ---- the ports ------------------------------------------------------------------------

// scriptedClient is one cluster's client. Its methods mirror valkeyops.Admin's for the ports
// the model scripts (Topology, Failovers, Observe); the fallback's per-port fakes serve the
// credentials and certificates.
type scriptedClient struct {
	m     *valkeyModel
	proc  *scriptedProcess // nil: a process that never dies
	creds *fakeCredentials
	certs *fakeCertificates
}

// servers serves the topology ports and Observe with c, the others with the per-port fakes.
func (c *scriptedClient) servers() *reconciler.Servers {
	return &reconciler.Servers{
		Reads:    fakeReads{observe: c, auth: c.creds, certs: c.certs},
		Topology: c, Failovers: c, Credentials: c.creds, Certificates: c.certs,
	}
}

func joinNodeNames(nodes []model.Node) string {
	out := make([]string, len(nodes))
	for i, n := range nodes {
		out[i] = n.Name
	}
	return strings.Join(out, ",")
}

func (c *scriptedClient) Observe(_ context.Context, nodes []model.Node) (*model.Snapshot, error) {
	if c.proc.gone() {
		return nil, fmt.Errorf("scripted: connection closed (the operator process is dead)")
	}
	c.m.mu.Lock()
	defer c.m.mu.Unlock()
	return c.m.snapshot(nodes)
}

// Bootstrap mirrors valkeyops.Admin.Bootstrap: validate the shard grouping, require every
// node, set replication credentials, give fresh nodes distinct epochs, assign shard i's
// unowned part of range i to its primary, MEET every pair, attach the replicas, and report
// not converged unless every node then serves.
func (c *scriptedClient) Bootstrap(ctx context.Context, nodes []model.Node, shards int) error {
	m := c.m
	return m.write(ctx, c.proc, "Join", fmt.Sprintf("shards=%d nodes=%s", shards, joinNodeNames(nodes)), "", func(w *writeOp) error {
		groups := make([][]model.Node, max(shards, 0))
		for _, n := range nodes {
			if n.Shard < 0 || n.Shard >= shards {
				return scriptedOpErr(n.Name, "validate", fmt.Errorf("%w: shard %d outside 0..%d", model.ErrInvalidSpec, n.Shard, shards-1))
			}
			groups[n.Shard] = append(groups[n.Shard], n)
		}
		for i, g := range groups {
			if len(g) == 0 {
				return scriptedOpErr("", "validate", fmt.Errorf("%w: shard %d has no nodes", model.ErrInvalidSpec, i))
			}
		}
		ms, err := m.members(nodes)
		if err != nil {
			return err
		}
		if err := requireAllMembers(ms); err != nil {
			return err
		}
		for _, x := range ms {
			user, pw := model.ReplicationLogin(m.password)
			if err := m.configSet(w, x.modelServer, "masteruser", user, "masterauth", pw); err != nil {
				return err
			}
		}
		next := m.currentEpoch
		for _, x := range ms {
			next = max(next, x.configEpoch)
		}
		for _, x := range ms {
			if len(x.known) == 0 && x.configEpoch == 0 && len(m.slotsOf(x.id)) == 0 {
				next++
				if err := m.setConfigEpoch(w, x.modelServer, next); err != nil {
					return err
				}
				if err := m.configSet(w, x.modelServer, "repl-diskless-sync-delay", "0"); err != nil {
					return err
				}
			}
		}
		owned := make([]bool, model.SlotCount)
		for slot, o := range m.owner {
			for _, x := range ms {
				owned[slot] = owned[slot] || x.sees(o)
			}
		}
		ranges := model.EvenRanges(shards)
		primaries := make([]modelMember, shards)
		for shard, g := range groups {
			p, ok := m.choosePrimary(ms, g)
			if !ok {
				return scriptedOpErr(g[0].Name, "choose-primary", fmt.Errorf("%w: shard %d has no node that can be primary", model.ErrUnsafe, shard))
			}
			primaries[shard] = p
		}
		for shard, p := range primaries {
			var free []int
			for slot := ranges[shard].Start; slot <= ranges[shard].End; slot++ {
				if !owned[slot] {
					free = append(free, slot)
				}
			}
			if len(free) > 0 {
				if err := m.addSlots(w, p.modelServer, free); err != nil {
					return err
				}
			}
		}
		if err := m.meetAll(w, ms); err != nil {
			return err
		}
		for shard, g := range groups {
			for _, n := range g {
				if n.Name == primaries[shard].n.Name {
					continue
				}
				x, _ := memberNamed(ms, n.Name)
				if err := m.attach(w, x.modelServer, primaries[shard].modelServer); err != nil {
					return err
				}
			}
		}
		return m.serving(ms, func(x modelMember) error {
			for shard, g := range groups {
				for _, n := range g {
					if n.Name == x.n.Name && n.Name != primaries[shard].n.Name && x.primaryID != primaries[shard].id {
						return fmt.Errorf("%s not yet a replica of %s", n.Name, primaries[shard].n.Name)
					}
				}
			}
			return nil
		})
	})
}

// choosePrimary mirrors valkeyops: the member owning the most slots, else a primary that a
// member replicates, else the first member that is a primary.
func (m *valkeyModel) choosePrimary(ms []modelMember, group []model.Node) (modelMember, bool) {
	var in []modelMember
	for _, n := range group {
		x, _ := memberNamed(ms, n.Name)
		in = append(in, x)
	}
	var best modelMember
	for _, x := range in {
		if x.primary() && len(m.slotsOf(x.id)) > 0 && (best.modelServer == nil || len(m.slotsOf(x.id)) > len(m.slotsOf(best.id))) {
			best = x
		}
	}
	if best.modelServer != nil {
		return best, true
	}
	for _, x := range in {
		if !x.primary() {
			continue
		}
		for _, o := range in {
			if o.primaryID == x.id {
				return x, true
			}
		}
	}
	for _, x := range in {
		if x.primary() {
			return x, true
		}
	}
	return modelMember{}, false
}

// meetAll MEETs every pair of which one side does not know the other well (unknown, flagged
// failed, or at another address), as valkeyops does.
func (m *valkeyModel) meetAll(w *writeOp, ms []modelMember) error {
	for i, a := range ms {
		for _, b := range ms[i+1:] {
			if a.sees(b.id) && b.sees(a.id) && !a.failing[b.id] && !b.failing[a.id] {
				continue
			}
			if err := m.meet(w, a.modelServer, b.modelServer); err != nil {
				return err
			}
		}
	}
	return nil
}

// attach mirrors valkeyops' attachReplica: nothing if s already follows p; refused if s
// owns slots; else replication credentials and CLUSTER REPLICATE.
func (m *valkeyModel) attach(w *writeOp, s, p *modelServer) error {
	if !s.known[p.id] || !p.primary() {
		return scriptedOpErr(s.node.Name, "replicate", fmt.Errorf("%w: %s does not know primary %s yet", model.ErrNotConverged, s.node.Name, p.node.Name))
	}
	if s.primaryID == p.id {
		return nil
	}
	if len(m.slotsOf(s.id)) > 0 {
		return scriptedOpErr(s.node.Name, "replicate", fmt.Errorf("%w: node owns slots", model.ErrUnsafe))
	}
	user, pw := model.ReplicationLogin(m.password)
	if err := m.configSet(w, s, "masteruser", user, "masterauth", pw); err != nil {
		return err
	}
	return m.replicate(w, s, p.id)
}

// serving is valkeyops' waitServing without the wait (the model has converged already, or
// never will): every node answers, sees all slots assigned, reports ok, and passes check.
func (m *valkeyModel) serving(ms []modelMember, check func(modelMember) error) error {
	for _, x := range ms {
		var why error
		switch {
		case x.modelServer == nil:
			why = fmt.Errorf("%s unreachable", x.n.Name)
		case m.assigned(x.modelServer) != model.SlotCount:
			why = fmt.Errorf("%s sees %d slots assigned", x.n.Name, m.assigned(x.modelServer))
		case m.clusterState(x.modelServer) != "ok":
			why = fmt.Errorf("%s reports cluster_state fail", x.n.Name)
		case check != nil:
			why = check(x)
		}
		if why != nil {
			return scriptedOpErr("", "converge", fmt.Errorf("%w: %v", model.ErrNotConverged, why))
		}
	}
	return nil
}

// Replicate mirrors valkeyops.Admin.Replicate.
func (c *scriptedClient) Replicate(ctx context.Context, nodes []model.Node, name string, shard int) error {
	m := c.m
	return m.write(ctx, c.proc, "Replicate", fmt.Sprintf("%s shard=%d", name, shard), name, func(w *writeOp) error {
		ms, err := m.members(nodes)
		if err != nil {
			return err
		}
		r, ok := memberNamed(ms, name)
		if !ok || r.modelServer == nil {
			return scriptedOpErr(name, "replicate", model.ErrUnreachable)
		}
		var p modelMember
		for _, x := range ms {
			if x.modelServer != nil && x.primary() && x.n.Shard == shard && x.n.Name != name && len(m.slotsOf(x.id)) > 0 {
				p = x
			}
		}
		if p.modelServer == nil {
			return scriptedOpErr(name, "replicate", fmt.Errorf("%w: shard %d has no slot-holding primary", model.ErrInvalidSpec, shard))
		}
		if !r.sees(p.id) {
			if err := m.meetAll(w, reachableMembers(ms)); err != nil {
				return err
			}
		}
		if err := m.configSet(w, p.modelServer, "repl-diskless-sync-delay", "0"); err != nil {
			return err
		}
		if err := m.attach(w, r.modelServer, p.modelServer); err != nil {
			return err
		}
		if !r.linked || r.primaryID != p.id {
			return scriptedOpErr("", "replicate-link", fmt.Errorf("%w: %s link down", model.ErrNotConverged, name))
		}
		return nil
	})
}

// Rebalance mirrors valkeyops.Admin.Rebalance on the key-by-key path: every node must answer
// and report ok; slots left open by an earlier run are finished first; then the moves of
// model.PlanRebalance run, each slot opened on both ends, its keys migrated, and claimed.
func (c *scriptedClient) Rebalance(ctx context.Context, nodes []model.Node, leaving []string) (valkeyops.MoveStats, error) {
	m := c.m
	sorted := append([]string(nil), leaving...)
	sort.Strings(sorted)
	var moved valkeyops.MoveStats
	err := m.write(ctx, c.proc, "Rebalance", "leaving="+strings.Join(sorted, ","), "", func(w *writeOp) error {
		leave := map[string]bool{}
		for _, n := range leaving {
			leave[n] = true
		}
		ms, err := m.members(nodes)
		if err != nil {
			return err
		}
		for _, x := range ms {
			if x.modelServer == nil {
				return scriptedOpErr(x.n.Name, "rebalance-precheck", fmt.Errorf("%w: connection refused", model.ErrUnreachable))
			}
			if st := m.clusterState(x.modelServer); st != "ok" {
				return scriptedOpErr(x.n.Name, "rebalance-precheck", fmt.Errorf("%w: cluster_state is %q", model.ErrUnsafe, st))
			}
		}
		if err := m.finishOpen(w, ms); err != nil {
			return err
		}
		owned := map[string][]model.SlotRange{}
		for _, x := range ms {
			if x.primary() {
				if s := m.slotsOf(x.id); len(s) > 0 {
					owned[x.id] = model.CompactSlots(s)
				}
			}
		}
		targets := scriptedTargets(m, ms, leave)
		if len(targets) == 0 {
			return scriptedOpErr("", "plan", fmt.Errorf("%w: no primary left to hold slots", model.ErrInvalidSpec))
		}
		moves, err := model.PlanRebalance(owned, targets)
		if err != nil {
			return scriptedOpErr("", "plan", err)
		}
		for _, mv := range moves {
			if err := m.moveSlots(w, m.byID[mv.From], m.byID[mv.To], model.ExpandSlots(mv.Slots)); err != nil {
				return err
			}
			moved.Slots += model.CountSlots(mv.Slots)
		}
		for _, x := range ms {
			if leave[x.n.Name] && x.primary() && len(m.slotsOf(x.id)) > 0 {
				return scriptedOpErr("", "rebalance-converge", fmt.Errorf("%w: leaving %s still owns slots", model.ErrNotConverged, x.n.Name))
			}
			if len(x.importing)+len(x.migrating) > 0 {
				return scriptedOpErr("", "rebalance-converge", fmt.Errorf("%w: %s has open slots", model.ErrNotConverged, x.n.Name))
			}
		}
		return m.serving(ms, nil)
	})
	return moved, err
}

// finishOpen mirrors valkeyops' finishOpenSlots: a slot some primary reports open is moved on
// to the importing side when both ends answer, else closed where it is.
func (m *valkeyModel) finishOpen(w *writeOp, ms []modelMember) error {
	type pair struct{ from, to string }
	open := map[pair][]int{}
	var pairs []pair
	add := func(from, to string, slot int) {
		k := pair{from, to}
		if open[k] == nil {
			pairs = append(pairs, k)
		}
		if !slices.Contains(open[k], slot) {
			open[k] = append(open[k], slot)
		}
	}
	for _, x := range ms {
		if !x.primary() {
			continue
		}
		for _, slot := range sortedSlots(x.migrating) {
			add(x.id, x.migrating[slot], slot)
		}
		for _, slot := range sortedSlots(x.importing) {
			add(x.importing[slot], x.id, slot)
		}
	}
	find := func(id string) *modelServer {
		for _, x := range ms {
			if x.id == id {
				return x.modelServer
			}
		}
		return nil
	}
	for _, k := range pairs {
		slots := open[k]
		sort.Ints(slots)
		src, dst := find(k.from), find(k.to)
		switch {
		case src != nil && dst != nil && dst.primary():
			if err := m.moveSlots(w, src, dst, slots); err != nil {
				return err
			}
		case src != nil && src.primary():
			for _, slot := range slots {
				if err := m.setSlot(w, src, slot, "STABLE", ""); err != nil {
					return err
				}
			}
		case dst != nil:
			for _, slot := range slots {
				if err := m.setSlot(w, dst, slot, "STABLE", ""); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// scriptedTargets mirrors valkeyops' chooseTargets: one primary per shard among those not leaving (the one
// holding slots, else the first), then any further slot-holding primary.
func scriptedTargets(m *valkeyModel, ms []modelMember, leave map[string]bool) []string {
	perShard := map[int]modelMember{}
	var shards []int
	for _, x := range ms {
		if x.modelServer == nil || !x.primary() || leave[x.n.Name] {
			continue
		}
		cur, ok := perShard[x.n.Shard]
		if !ok {
			shards = append(shards, x.n.Shard)
		}
		if !ok || (len(m.slotsOf(cur.id)) == 0 && len(m.slotsOf(x.id)) > 0) {
			perShard[x.n.Shard] = x
		}
	}
	sort.Ints(shards)
	var out []string
	seen := map[string]bool{}
	for _, s := range shards {
		out = append(out, perShard[s].id)
		seen[perShard[s].id] = true
	}
	for _, x := range ms {
		if x.modelServer != nil && x.primary() && !leave[x.n.Name] && len(m.slotsOf(x.id)) > 0 && !seen[x.id] {
			out = append(out, x.id)
		}
	}
	return out
}

// moveChunk is how many slots valkeyops opens, migrates and claims per round.
const moveChunk = 512

// moveSlots mirrors valkeyops' moveSlotsLegacy, chunk by chunk: IMPORTING on dst (for slots
// it does not own), MIGRATING on src (for slots it owns), MIGRATE, claim on dst, then SETSLOT
// NODE on src. An armed rebalanceBreak stops it between opening a chunk and migrating it.
func (m *valkeyModel) moveSlots(w *writeOp, src, dst *modelServer, slots []int) error {
	if src == nil || dst == nil {
		return scriptedOpErr("", "migrate", fmt.Errorf("%w: move endpoint not observed", model.ErrUnreachable))
	}
	moved := 0
	for len(slots) > 0 {
		chunk := slots[:min(moveChunk, len(slots))]
		slots = slots[len(chunk):]
		for _, slot := range chunk {
			if m.owner[slot] != dst.id {
				if err := m.setSlot(w, dst, slot, "IMPORTING", src.id); err != nil {
					return err
				}
			}
			if m.owner[slot] == src.id {
				if err := m.setSlot(w, src, slot, "MIGRATING", dst.id); err != nil {
					return err
				}
			}
		}
		if b := m.brk; b != nil && moved >= b.after {
			m.brk = nil
			close(b.hit)
			return errHold
		}
		for _, slot := range chunk {
			if m.data[slot] == src.id { // GETKEYSINSLOT finds keys to MIGRATE
				if err := m.migrateKeys(w, src, dst, slot); err != nil {
					return err
				}
			}
			if err := m.setSlot(w, dst, slot, "NODE", dst.id); err != nil {
				return err
			}
			if err := m.setSlot(w, src, slot, "NODE", dst.id); err != nil {
				return err
			}
		}
		moved += len(chunk)
	}
	return nil
}

// RemoveNode mirrors valkeyops.Admin.RemoveNode: the node must be among nodes, answer and own
// no slots; every other node forgets it (the node itself is left as it is until its pod goes).
func (c *scriptedClient) RemoveNode(ctx context.Context, nodes []model.Node, name string) error {
	m := c.m
	return m.write(ctx, c.proc, "Remove", name, name, func(w *writeOp) error {
		ms, err := m.members(nodes)
		if err != nil {
			return err
		}
		r, ok := memberNamed(ms, name)
		switch {
		case !ok:
			return scriptedOpErr(name, "remove-node", fmt.Errorf("%w: node not in the given set", model.ErrInvalidSpec))
		case r.modelServer == nil:
			return scriptedOpErr(name, "remove-node", fmt.Errorf("%w: cannot tell its role", model.ErrUnreachable))
		case len(m.slotsOf(r.id)) > 0:
			return scriptedOpErr(name, "remove-node", fmt.Errorf("%w: node owns slots", model.ErrUnsafe))
		}
		var rest []modelMember
		for _, x := range ms {
			if x.n.Name != name {
				rest = append(rest, x)
			}
		}
		return m.forgetAll(w, rest, []string{r.id})
	})
}

// forgetAll mirrors valkeyops.Admin.Forget: every reachable node (other than those being
// forgotten) that knows an ID is told to forget it; one node's refusal does not stop the rest.
func (m *valkeyModel) forgetAll(w *writeOp, ms []modelMember, ids []string) error {
	var errs []error
	for _, x := range reachableMembers(ms) {
		if slices.Contains(ids, x.id) {
			continue
		}
		for _, id := range ids {
			if x.known[id] {
				errs = append(errs, m.forget(w, x.modelServer, id))
			}
		}
	}
	return errors.Join(errs...)
}

// Settle mirrors valkeyops.Admin.Settle: a CONFIG SET on each named node, which a node that
// cannot be reached refuses (the others are still set). The model keeps no settings.
func (c *scriptedClient) Settle(ctx context.Context, nodes []model.Node) error {
	m := c.m
	return m.write(ctx, c.proc, "Settle", joinNodeNames(nodes), "", func(*writeOp) error {
		ms, err := m.members(nodes)
		if err != nil {
			return err
		}
		var errs []error
		for _, x := range ms {
			if x.modelServer == nil {
				errs = append(errs, scriptedOpErr(x.n.Name, "settle-node-timeout", model.ErrUnreachable))
			}
		}
		return errors.Join(errs...)
	})
}

// Forget mirrors valkeyops.Admin.Forget.
func (c *scriptedClient) Forget(ctx context.Context, nodes []model.Node, ids []string) error {
	m := c.m
	return m.write(ctx, c.proc, "Forget", strings.Join(ids, ","), "", func(w *writeOp) error {
		ms, err := m.members(nodes)
		if err != nil {
			return err
		}
		return m.forgetAll(w, ms, ids)
	})
}

// Failover mirrors valkeyops.Admin.Failover: nothing for a node that is already a replica,
// ErrNoInSyncReplica without a linked, caught-up replica, else a graceful CLUSTER FAILOVER
// sent to the best replica (which real Valkey refuses while its primary is down).
func (c *scriptedClient) Failover(ctx context.Context, nodes []model.Node, primary string) error {
	m := c.m
	return m.write(ctx, c.proc, "Failover", primary, primary, func(w *writeOp) error {
		ms, err := m.members(nodes)
		if err != nil {
			return err
		}
		p, ok := memberNamed(ms, primary)
		if !ok || p.modelServer == nil {
			return scriptedOpErr(primary, "failover", model.ErrUnreachable)
		}
		if !p.primary() {
			return nil
		}
		snap, _ := m.snapshot(nodes)
		best := model.BestReplica(snap, p.id)
		if best == nil {
			return scriptedOpErr(primary, "failover", model.ErrNoInSyncReplica)
		}
		r := m.byAddr[best.Addr]
		return m.clusterFailover(w, r, "")
	})
}

// clusterFailover is CLUSTER FAILOVER [TAKEOVER] sent to replica r.
func (m *valkeyModel) clusterFailover(w *writeOp, r *modelServer, mode string) error {
	args := []string{"CLUSTER", "FAILOVER"}
	if mode != "" {
		args = append(args, mode)
	}
	if err := m.cmd(w, r, args...); err != nil {
		return err
	}
	if r.primary() {
		return scriptedServerErr(r.node.Name, "failover", "You should send CLUSTER FAILOVER to a replica")
	}
	old := m.byID[r.primaryID]
	if mode == "" && (old == nil || !old.alive || r.failing[old.id]) {
		return scriptedServerErr(r.node.Name, "failover", "Master is down or failed, please use CLUSTER FAILOVER FORCE")
	}
	if mode == "" && !r.linked {
		return scriptedServerErr(r.node.Name, "failover", "replica is not in sync")
	}
	m.promote(r)
	return nil
}

// Takeover mirrors valkeyops.Admin.Takeover: nothing for a primary, else CLUSTER FAILOVER
// TAKEOVER, which needs no vote.
func (c *scriptedClient) Takeover(ctx context.Context, nodes []model.Node, replica string) error {
	m := c.m
	return m.write(ctx, c.proc, "Takeover", replica, replica, func(w *writeOp) error {
		ms, err := m.members(nodes)
		if err != nil {
			return err
		}
		r, ok := memberNamed(ms, replica)
		if !ok || r.modelServer == nil {
			return scriptedOpErr(replica, "takeover", model.ErrUnreachable)
		}
		if r.primary() {
			return nil
		}
		return m.clusterFailover(w, r.modelServer, "TAKEOVER")
	})
}

// ForceFailover mirrors valkeyops.Admin.ForceFailover: nothing for a primary, else CLUSTER
// FAILOVER FORCE, whose election still needs a majority of the slot-holding primaries alive.
func (c *scriptedClient) ForceFailover(ctx context.Context, nodes []model.Node, replica string) error {
	m := c.m
	return m.write(ctx, c.proc, "ForceFailover", replica, replica, func(w *writeOp) error {
		ms, err := m.members(nodes)
		if err != nil {
			return err
		}
		r, ok := memberNamed(ms, replica)
		if !ok || r.modelServer == nil {
			return scriptedOpErr(replica, "force-failover", model.ErrUnreachable)
		}
		if r.primary() {
			return nil
		}
		owners, alive := map[string]bool{}, 0
		for _, id := range m.owner {
			if id != "" {
				owners[id] = true
			}
		}
		for id := range owners {
			if s := m.byID[id]; s != nil && s.alive && id != r.primaryID {
				alive++
			}
		}
		if 2*alive <= len(owners) {
			return scriptedOpErr(replica, "force-failover-wait", fmt.Errorf("no majority of primaries to vote (%d of %d)", alive, len(owners)))
		}
		return m.clusterFailover(w, r.modelServer, "FORCE")
	})
}

// AssignSlots mirrors valkeyops.Admin.AssignSlots: only to a reachable primary, only slots no
// reachable node sees owned, MEET first for a node alone, then ADDSLOTSRANGE and BUMPEPOCH,
// and the cluster must serve again.
func (c *scriptedClient) AssignSlots(ctx context.Context, nodes []model.Node, name string, slots []model.SlotRange) error {
	m := c.m
	return m.write(ctx, c.proc, "AssignSlots", name+" "+model.FormatRanges(slots), name, func(w *writeOp) error {
		ms, err := m.members(nodes)
		if err != nil {
			return err
		}
		n, ok := memberNamed(ms, name)
		if !ok || n.modelServer == nil {
			return scriptedOpErr(name, "assign-slots", model.ErrUnreachable)
		}
		if !n.primary() {
			return scriptedOpErr(name, "assign-slots", fmt.Errorf("%w: node is a replica", model.ErrUnsafe))
		}
		var free []int
		for _, slot := range model.ExpandSlots(slots) {
			taken := false
			for _, x := range reachableMembers(ms) {
				taken = taken || x.sees(m.owner[slot])
			}
			if !taken {
				free = append(free, slot)
			}
		}
		if len(n.known) == 0 {
			if err := m.meetAll(w, reachableMembers(ms)); err != nil {
				return err
			}
		}
		if len(free) > 0 {
			if err := m.addSlots(w, n.modelServer, free); err != nil {
				return err
			}
			if err := m.bumpEpoch(w, n.modelServer); err != nil {
				return err
			}
		}
		return m.serving(ms, nil)
	})
}

// ---- scripting: what the test makes happen --------------------------------------------

// start runs a fresh, empty server for ValkeyNode name at ip (its pod started).
func (m *valkeyModel) start(name, ip string, shard int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.serial++
	sum := sha1.Sum([]byte(fmt.Sprintf("%s/%s/%d", m.key, name, m.serial)))
	s := &modelServer{
		node: model.Node{Name: name, Addr: ip + ":6379", Shard: shard}, id: hex.EncodeToString(sum[:]), alive: true,
		offset: 1000, known: map[string]bool{}, failing: map[string]bool{}, importing: map[int]string{}, migrating: map[int]string{},
	}
	m.byAddr[s.node.Addr], m.byName[name], m.byID[s.id] = s, s, s
}

// stop ends the server of ValkeyNode name (its pod is gone, or its process was killed): it
// answers nothing; peers see their link to it down but flag it failed only after a node
// timeout (nodeTimeout).
func (m *valkeyModel) stop(name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s := m.byName[name]; s != nil {
		s.alive = false
	}
	m.check(name + " stopped")
}

// nodeTimeout is a node timeout passing after name stopped: every live server that knows it
// flags it failed (the majority agreed, so pfail became fail).
func (m *valkeyModel) nodeTimeout(name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	d := m.byName[name]
	if d == nil || d.alive {
		return fmt.Errorf("scripted: %s is not a stopped process", name)
	}
	for _, s := range m.byID {
		if s.alive && s.known[d.id] {
			s.failing[d.id] = true
		}
	}
	return nil
}

// valkeyFailover is Valkey's own failover of the failed primary name: a majority of the
// slot-holding primaries must flag it failed; its live replica with the highest offset is
// promoted. It returns the promoted node's name.
func (m *valkeyModel) valkeyFailover(name string) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	d := m.byName[name]
	if d == nil || d.alive || !d.primary() || len(m.slotsOf(d.id)) == 0 {
		return "", fmt.Errorf("scripted: %s is not a stopped slot-holding primary", name)
	}
	holders, votes := map[string]bool{}, 0
	for _, o := range m.owner {
		if o != "" {
			holders[o] = true
		}
	}
	for id := range holders {
		if s := m.byID[id]; s != nil && s.alive && s.failing[d.id] {
			votes++
		}
	}
	if 2*votes <= len(holders) {
		return "", fmt.Errorf("scripted: %d of %d primaries flag %s failed: no majority to elect a replica", votes, len(holders), name)
	}
	var best *modelServer
	for _, s := range m.byID {
		if s.alive && s.primaryID == d.id && (best == nil || s.offset > best.offset || s.offset == best.offset && s.node.Name < best.node.Name) {
			best = s
		}
	}
	if best == nil {
		return "", fmt.Errorf("scripted: %s has no live replica to promote", name)
	}
	m.promote(best)
	return best.node.Name, nil
}

// manualFailover is someone running a graceful CLUSTER FAILOVER on replica name.
func (m *valkeyModel) manualFailover(name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.byName[name]
	if r == nil {
		return fmt.Errorf("scripted: no process %s", name)
	}
	return m.clusterFailover(&writeOp{}, r, "")
}

// openSlot leaves slot open from src to dst, as a move interrupted right after SETSLOT
// IMPORTING/MIGRATING leaves it (its keys still on src).
func (m *valkeyModel) openSlot(src, dst string, slot int) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, d := m.byName[src], m.byName[dst]
	if s == nil || d == nil || m.owner[slot] != s.id || !d.primary() {
		return fmt.Errorf("scripted: cannot open slot %d from %s to %s", slot, src, dst)
	}
	d.importing[slot], s.migrating[slot] = s.id, d.id
	return nil
}

// breakNextRebalance arms a rebalanceBreak after `after` slots have moved; the returned
// channel closes when it fires.
func (m *valkeyModel) breakNextRebalance(after int) <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.brk = &rebalanceBreak{after: after, hit: make(chan struct{})}
	return m.brk.hit
}

// holdNextRebalance arms a rebalanceGate: the returned channel closes once the next
// Rebalance is held; release (safe to call more than once) lets it run.
func (m *valkeyModel) holdNextRebalance() (held <-chan struct{}, release func()) {
	m.mu.Lock()
	defer m.mu.Unlock()
	g := &rebalanceGate{hit: make(chan struct{}), open: make(chan struct{})}
	m.gate = g
	return g.hit, func() { g.once.Do(func() { close(g.open) }) }
}

// afterNext runs fn once, right after the next successful write call of op and before that
// call returns (e.g. to kill the operator process at that exact point); the returned
// channel closes once fn has run.
func (m *valkeyModel) afterNext(op string, fn func()) <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	h := opHook{op: op, fn: fn, done: make(chan struct{})}
	m.hooks = append(m.hooks, h)
	return h.done
}

// watchSynced checks, from now on, before every command and after every change, that each
// of shards 0..shards-1 holds at least least synced members: a live primary owning slots
// and the live replicas whose replication link to it is up. What it finds goes to broken.
func (m *valkeyModel) watchSynced(shards, least int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.invariant = func() string {
		got := m.syncedMembers()
		var short []string
		for s := 0; s < shards; s++ {
			if got[s] < least {
				short = append(short, fmt.Sprintf("shard %d has %d synced member(s)", s, got[s]))
			}
		}
		return strings.Join(short, "; ")
	}
	m.check("watch begins")
}

// syncedMembers counts, per shard, its live slot-holding primaries and their linked live
// replicas. The caller holds m.mu.
func (m *valkeyModel) syncedMembers() map[int]int {
	holders := map[string]bool{}
	for _, o := range m.owner {
		holders[o] = true
	}
	out := map[int]int{}
	for _, p := range m.byID {
		if !p.alive || !p.primary() || !holders[p.id] {
			continue
		}
		out[p.node.Shard]++
		for _, r := range m.byID {
			if r.alive && r.primaryID == p.id && r.linked {
				out[p.node.Shard]++
			}
		}
	}
	return out
}

// ---- inspection -------------------------------------------------------------------------

// violations is what the invariant of watchSynced found so far.
func (m *valkeyModel) violations() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.broken...)
}

// inflightOps names the write calls in flight now.
func (m *valkeyModel) inflightOps() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for _, w := range m.inflight {
		out = append(out, w.Op+"("+w.Args+")")
	}
	return out
}

// writes are the write calls so far, in the order they ended.
func (m *valkeyModel) writes() []writeOp {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]writeOp(nil), m.ops...)
}

// String is the call in one line, for failure messages.
func (w writeOp) String() string {
	return fmt.Sprintf("%s %s(%s) err=%v cmds=%d", w.Start.Format("15:04:05.000"), w.Op, w.Args, w.Err, len(w.Cmds))
}

// overlapping lists every write call that started while another one of the cluster ran.
func (m *valkeyModel) overlapping() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.overlaps...)
}

// serverState is one server as a test checks it.
type serverState struct {
	Name, ID, Role, Primary string // Primary: the name of the server it follows
	Alive, Linked           bool
	Slots, Open             int // slots owned; slots open (importing or migrating)
	Known                   []string
}

func (m *valkeyModel) inspect(name string) (serverState, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.byName[name]
	if s == nil {
		return serverState{}, false
	}
	st := serverState{Name: name, ID: s.id, Role: modelRole(s), Alive: s.alive, Linked: s.linked,
		Slots: len(m.slotsOf(s.id)), Open: len(s.importing) + len(s.migrating)}
	if p := m.byID[s.primaryID]; p != nil {
		st.Primary = p.node.Name
	}
	for id := range s.known {
		if p := m.byID[id]; p != nil {
			st.Known = append(st.Known, p.node.Name)
		}
	}
	sort.Strings(st.Known)
	return st, true
}

// knownBy lists the live servers whose table still has node ID id.
func (m *valkeyModel) knownBy(id string) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for _, s := range m.byID {
		if s.alive && s.known[id] {
			out = append(out, s.node.Name)
		}
	}
	sort.Strings(out)
	return out
}

// inCluster lists the live servers that know another node or are known by one: the cluster
// as its servers see it (a reset or never-met server is in none).
func (m *valkeyModel) inCluster() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for _, s := range m.byID {
		if !s.alive {
			continue
		}
		in := len(s.known) > 0
		for _, o := range m.byID {
			in = in || o.alive && o.known[s.id]
		}
		if in {
			out = append(out, s.node.Name)
		}
	}
	sort.Strings(out)
	return out
}

// health judges the servers of the given ValkeyNodes with model.Health, the Active criteria
// of docs/status.md, and adds what Health does not check: every slot's keys on its owner and
// the slot-holding primaries balanced within 1%.
func (m *valkeyModel) health(names []string, shards, replicas int) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var nodes []model.Node
	for _, n := range names {
		if s := m.byName[n]; s != nil {
			nodes = append(nodes, s.node)
		} else {
			nodes = append(nodes, model.Node{Name: n, Addr: "nowhere:6379"})
		}
	}
	snap, err := m.snapshot(nodes)
	if err != nil {
		return []string{err.Error()}
	}
	problems := model.Health(snap, shards, replicas)
	lost := 0
	for slot, o := range m.owner {
		if m.data[slot] != o {
			lost++
		}
	}
	if lost > 0 {
		problems = append(problems, fmt.Sprintf("%d slots' keys are not on their owner", lost))
	}
	lo, hi := model.SlotCount, 0
	for _, p := range snap.Primaries() {
		if c := model.CountSlots(p.Slots); c > 0 {
			lo, hi = min(lo, c), max(hi, c)
		}
	}
	if hi-lo > model.SlotCount/100 {
		problems = append(problems, fmt.Sprintf("slots uneven across primaries (%d..%d)", lo, hi))
	}
	return problems
}

// describe is the model in one line per server, for failure messages.
func (m *valkeyModel) describe() string {
	m.mu.Lock()
	names := make([]string, 0, len(m.byName))
	for n := range m.byName {
		names = append(names, n)
	}
	m.mu.Unlock()
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		st, _ := m.inspect(n)
		fmt.Fprintf(&b, "\n  %s id=%.8s alive=%v role=%s primary=%s linked=%v slots=%d open=%d knows=%v", n, st.ID, st.Alive, st.Role, st.Primary, st.Linked, st.Slots, st.Open, st.Known)
	}
	for _, w := range m.writes() {
		b.WriteString("\n  " + w.String())
	}
	return b.String()
}

// ---- the model's own tests: it must behave as valkeyops on real servers does -------------

// formedModel is a scripted 2-shard × 1-replica cluster (servers n0a, n0b, n1a, n1b) formed
// by Bootstrap, with its client and the nodes as the reconciler passes them.
func formedModel(t *testing.T, latency time.Duration) (*valkeyModel, *scriptedClient, []model.Node) {
	t.Helper()
	v := newScriptedValkey(latency)
	key := types.NamespacedName{Namespace: "model", Name: strings.ReplaceAll(t.Name(), "/", "-")}
	m := v.model(key)
	var nodes []model.Node
	for i, name := range []string{"n0a", "n0b", "n1a", "n1b"} {
		ip := fmt.Sprintf("10.0.0.%d", i+1)
		m.start(name, ip, i/2)
		nodes = append(nodes, model.Node{Name: name, Addr: ip + ":6379", Shard: i / 2})
	}
	c, err := v.connect(context.Background(), key, valkeyops.Credentials{Username: model.OperatorUser, Password: "operator-pw"})
	require.NoError(t, err)
	require.NoError(t, c.Bootstrap(context.Background(), nodes, 2))
	return m, c, nodes
}

// TestScriptedValkeyObservesAsValkeyops: a formed model passes model.Health, and each
// NodeState is what valkeyops.Observe builds (identity and role from the node's own line,
// replicas linked to their primary's ID); a stopped server is in the snapshot, unreachable
// with ErrUnreachable, its peers see the link down but flag it only after a node timeout;
// a second Bootstrap changes nothing.
func TestScriptedValkeyObservesAsValkeyops(t *testing.T) {
	ctx := context.Background()
	m, c, nodes := formedModel(t, 0)
	snap, err := c.Observe(ctx, nodes)
	require.NoError(t, err)
	assert.Empty(t, model.Health(snap, 2, 1))
	ranges := model.EvenRanges(2)
	for i, st := range snap.Nodes {
		self := st.Self()
		require.NotNil(t, self, st.Name)
		assert.Equal(t, nodes[i], st.Node)
		assert.Equal(t, self.ID, st.ID)
		assert.Equal(t, 4, st.KnownNodes)
		assert.Equal(t, model.SlotCount, st.SlotsAssigned)
		assert.True(t, st.ClusterOK())
		assert.Equal(t, model.PrimaryLinkUp, st.PrimaryLink)
		if i%2 == 0 {
			assert.Equal(t, model.RolePrimary, st.Role, st.Name)
			assert.Equal(t, []model.SlotRange{ranges[i/2]}, st.Slots, st.Name)
		} else {
			assert.Equal(t, model.RoleReplica, st.Role, st.Name)
			assert.Equal(t, snap.Nodes[i-1].ID, st.PrimaryID, st.Name)
			assert.Empty(t, st.Slots)
		}
	}

	m.stop("n1b")
	snap, err = c.Observe(ctx, nodes)
	require.NoError(t, err)
	gone := snap.ByName("n1b")
	require.NotNil(t, gone, "a stopped server stays in the snapshot")
	assert.False(t, gone.Reachable)
	assert.ErrorIs(t, gone.Err, model.ErrUnreachable)
	n1b := snap.ByName("n0a").Peer(m.byName["n1b"].id)
	require.NotNil(t, n1b, "its peers still know it")
	assert.Equal(t, model.BusDisconnected, n1b.BusLink)
	assert.False(t, n1b.Failing(), "not flagged before a node timeout")
	require.NoError(t, m.nodeTimeout("n1b"))
	snap, err = c.Observe(ctx, nodes)
	require.NoError(t, err)
	assert.True(t, snap.ByName("n0a").Peer(m.byName["n1b"].id).Failing())

	before := len(m.writes())
	require.NoError(t, c.Bootstrap(ctx, nodes[:3], 2), "Bootstrap of the live nodes again")
	after := m.writes()[before]
	for _, cmd := range after.Cmds {
		assert.True(t, strings.HasPrefix(cmd.Args, "CONFIG SET masteruser"), "a second Bootstrap only refreshes credentials: %s", cmd.Args)
		assert.NotContains(t, cmd.Args, "operator-pw", "no password in the command log")
	}
}

// TestScriptedValkeyRefuses: what real Valkey (or valkeyops' own safety checks) refuses, the
// model refuses, with the error valkeyops would return, and changes nothing.
func TestScriptedValkeyRefuses(t *testing.T) {
	ctx := context.Background()
	type env struct {
		m     *valkeyModel
		c     *scriptedClient
		nodes []model.Node
	}
	tests := []struct {
		name string
		do   func(e env) error
		is   error  // errors.Is target; nil for a server error reply
		msg  string // what the error says
	}{
		{name: "remove a node holding slots", is: model.ErrUnsafe,
			do: func(e env) error { return e.c.RemoveNode(ctx, e.nodes, "n0a") }},
		{name: "fail over a primary without a linked replica", is: model.ErrNoInSyncReplica,
			do: func(e env) error { e.m.stop("n0b"); return e.c.Failover(ctx, e.nodes, "n0a") }},
		{name: "make a slot-holding primary a replica", is: model.ErrUnsafe,
			do: func(e env) error { return e.c.Replicate(ctx, e.nodes, "n0a", 1) }},
		{name: "replicate a node that is not a member", is: model.ErrUnreachable,
			do: func(e env) error { return e.c.Replicate(ctx, e.nodes[:3], "n1b", 1) }},
		{name: "bootstrap an address where no server runs", is: model.ErrUnreachable,
			do: func(e env) error {
				return e.c.Bootstrap(ctx, append(e.nodes, model.Node{Name: "ghost", Addr: "10.0.0.99:6379", Shard: 1}), 2)
			}},
		{name: "a replica forgets its own primary", msg: "Can't forget my master!",
			do: func(e env) error { return e.c.Forget(ctx, e.nodes, []string{e.m.byName["n0a"].id}) }},
		{name: "assign slots to a replica", is: model.ErrUnsafe,
			do: func(e env) error {
				return e.c.AssignSlots(ctx, e.nodes, "n0b", []model.SlotRange{{Start: 0, End: 0}})
			}},
		{name: "move slots while a primary is failed", is: model.ErrUnsafe,
			do: func(e env) error {
				e.m.stop("n1a")
				require.NoError(t, e.m.nodeTimeout("n1a"))
				_, err := e.c.Rebalance(ctx, []model.Node{e.nodes[0], e.nodes[1], e.nodes[3]}, nil)
				return err
			}},
		{name: "graceful failover while the primary is down", msg: "Master is down or failed",
			do: func(e env) error { e.m.stop("n0a"); return e.m.manualFailover("n0b") }},
		{name: "Valkey's own failover without a majority of primaries", msg: "no majority",
			do: func(e env) error {
				e.m.stop("n0a")
				require.NoError(t, e.m.nodeTimeout("n0a"))
				_, err := e.m.valkeyFailover("n0a")
				return err
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, c, nodes := formedModel(t, 0)
			layout := func() map[string]int {
				out := map[string]int{}
				for _, n := range nodes {
					st, _ := m.inspect(n.Name)
					out[n.Name+" "+st.Role] = st.Slots
				}
				return out
			}
			want := layout()
			err := tc.do(env{m, c, nodes})
			require.Error(t, err)
			if tc.is != nil {
				assert.ErrorIs(t, err, tc.is)
				var op *model.OpError
				assert.ErrorAs(t, err, &op, "typed as valkeyops' errors are (model.OpError)")
			}
			assert.Contains(t, err.Error(), tc.msg)
			assert.Equal(t, want, layout(), "a refused operation changes nothing")
		})
	}
}

// TestScriptedValkeyFlagsOverlappingWrites: a write call that starts while another one of
// the same cluster runs is flagged.
func TestScriptedValkeyFlagsOverlappingWrites(t *testing.T) {
	ctx := context.Background()
	m, c, nodes := formedModel(t, 200*time.Millisecond)
	require.Empty(t, m.overlapping(), "Bootstrap alone overlaps nothing")
	first := make(chan error, 1)
	go func() { _, err := c.Rebalance(ctx, nodes, nil); first <- err }()
	require.NoError(t, poll.Until(ctx, 5*time.Millisecond, 5*time.Second, "the first Rebalance in flight", func(context.Context) (bool, string, error) {
		m.mu.Lock()
		defer m.mu.Unlock()
		return len(m.inflight) == 1, fmt.Sprintf("%d in flight", len(m.inflight)), nil
	}))
	require.NoError(t, c.Forget(ctx, nodes, []string{"0000000000000000000000000000000000000000"}))
	require.NoError(t, <-first)
	assert.Len(t, m.overlapping(), 1)
}

// TestScriptedValkeyFinishesOpenSlots: a slot a crash left open shows on both ends' own
// lines as model.ParseClusterNodes reads them (MIGRATING on the source, IMPORTING on the target), and the
// next Rebalance finishes it: no slot open, every slot's keys on its owner, balanced.
func TestScriptedValkeyFinishesOpenSlots(t *testing.T) {
	ctx := context.Background()
	m, c, nodes := formedModel(t, 0)
	require.NoError(t, m.openSlot("n0a", "n1a", 100))
	snap, err := c.Observe(ctx, nodes)
	require.NoError(t, err)
	src, dst := snap.ByName("n0a"), snap.ByName("n1a")
	assert.Equal(t, map[int]string{100: dst.ID}, src.Self().Migrating)
	assert.Equal(t, map[int]string{100: src.ID}, dst.Self().Importing)
	assert.Contains(t, model.Health(snap, 2, 1), "node n0a has open slots (importing 0, migrating 1)")

	_, err = c.Rebalance(ctx, nodes, nil)
	require.NoError(t, err)
	assert.Empty(t, m.health([]string{"n0a", "n0b", "n1a", "n1b"}, 2, 1))
	for _, n := range nodes {
		st, _ := m.inspect(n.Name)
		assert.Zero(t, st.Open, n.Name)
	}
}

// TestScriptedValkeyHoldsRebalance: a held Rebalance is in flight and sends nothing until
// released (other calls of the cluster meanwhile are flagged as overlapping it), then runs
// to its end; a hook armed for an op runs right after that op succeeds, once.
func TestScriptedValkeyHoldsRebalance(t *testing.T) {
	ctx := context.Background()
	m, c, nodes := formedModel(t, 0)
	held, release := m.holdNextRebalance()
	t.Cleanup(release)
	ran := 0
	hooked := m.afterNext("Rebalance", func() { ran++ })
	first := make(chan error, 1)
	go func() { _, err := c.Rebalance(ctx, nodes, nil); first <- err }()
	select {
	case <-held:
	case <-time.After(5 * time.Second):
		t.Fatal("the Rebalance was never held")
	}
	assert.Equal(t, []string{"Rebalance(leaving=)"}, m.inflightOps())
	before := len(m.writes())
	require.NoError(t, c.Forget(ctx, nodes, []string{"0000000000000000000000000000000000000000"}))
	assert.Len(t, m.overlapping(), 1, "a call while the Rebalance is held overlaps it")
	select {
	case err := <-first:
		t.Fatalf("the held Rebalance ended: %v", err)
	case <-hooked:
		t.Fatal("the hook ran before the Rebalance did")
	default:
	}
	release()
	require.NoError(t, <-first)
	<-hooked
	assert.Equal(t, 1, ran)
	require.Len(t, m.writes(), before+2)
	assert.Equal(t, "Rebalance", m.writes()[before+1].Op)
	_, err := c.Rebalance(ctx, nodes, nil)
	require.NoError(t, err)
	assert.Equal(t, 1, ran, "a hook runs once")
}

// TestScriptedValkeyWatchesSyncedMembers: watchSynced flags a shard that drops below the
// count when a replica's server stops, and nothing while every shard keeps its primary and a
// linked replica.
func TestScriptedValkeyWatchesSyncedMembers(t *testing.T) {
	ctx := context.Background()
	m, c, nodes := formedModel(t, 0)
	m.watchSynced(2, 2)
	require.NoError(t, c.Failover(ctx, nodes, "n0a"), "a graceful failover keeps both members synced")
	assert.Empty(t, m.violations())
	m.stop("n1b")
	assert.Equal(t, []string{"n1b stopped: shard 1 has 1 synced member(s)"}, m.violations())
}
