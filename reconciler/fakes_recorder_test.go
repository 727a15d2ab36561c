//go:build envtest

package reconciler_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/gomomento/valkey-operator/reconciler"
	"github.com/gomomento/valkey-operator/valkeyops"
	"github.com/gomomento/valkey-operator/valkeyops/model"
	"k8s.io/apimachinery/pkg/types"
)

// The Active-phase tests' Valkey as the operator processes reach it: the day-2 servers
// (fakes_day2_test.go) behind the Topology, Failovers and Observe ports, the suite's per-port
// fakes behind Connect, credentials and certificates. A recording decorator around the
// topology ports keeps every write call of a cluster (when it started and ended, how it
// ended, the role of the node it names), flags a call that starts while another of the same
// cluster runs, and holds the hooks the scenarios need: a Rebalance held until the test lets
// it go, a Rebalance cut short with slots left open, a function run right after a call, and
// an operator process killed so that its calls in flight and later ones fail.

// operatorProcess is one operator process as the servers see it: its connections. Killing it
// is what SIGKILL does to them: a call in flight ends where it was, and the process sends
// nothing more, even from a task that outlived its manager in this test binary.
type operatorProcess struct {
	dead chan struct{}
	once sync.Once
}

func (p *operatorProcess) kill() { p.once.Do(func() { close(p.dead) }) }

func (p *operatorProcess) killed() <-chan struct{} { return p.dead }

func (p *operatorProcess) gone() bool {
	select {
	case <-p.dead:
		return true
	default:
		return false
	}
}

// errDead is what a dead process's connections report.
var errDead = fmt.Errorf("%w: connection closed (the operator process is dead)", model.ErrUnreachable)

// day2Valkey is every operator process's view of the servers, and each cluster's write log.
type day2Valkey struct {
	servers *day2Servers
	// base serves Connect's checks (login, TLS), the credentials and the certificates; its
	// write counter shows whether any of their writes was called.
	base *fakeValkey
	// latency is how long every write call takes, so two that ran at once would overlap.
	latency time.Duration
	mu      sync.Mutex
	logs    map[types.NamespacedName]*opLog
}

func newDay2Valkey(latency time.Duration) *day2Valkey {
	return &day2Valkey{servers: newDay2Servers(), base: newFakeValkey(), latency: latency, logs: map[types.NamespacedName]*opLog{}}
}

// model is the cluster's servers.
func (v *day2Valkey) model(key types.NamespacedName) *day2Cluster { return v.servers.cluster(key) }

// describe is the cluster's servers and write calls, for failure messages.
func (v *day2Valkey) describe(key types.NamespacedName) string {
	var b strings.Builder
	b.WriteString(v.model(key).describe())
	for _, w := range v.log(key).writes() {
		b.WriteString("\n  " + w.String())
	}
	return b.String()
}

// log is the cluster's write log.
func (v *day2Valkey) log(key types.NamespacedName) *opLog {
	v.mu.Lock()
	defer v.mu.Unlock()
	l := v.logs[key]
	if l == nil {
		l = &opLog{}
		v.logs[key] = l
	}
	return l
}

// process returns a reconciler.Valkey whose connections die with the returned process.
func (v *day2Valkey) process() (reconciler.Valkey, *operatorProcess) {
	p := &operatorProcess{dead: make(chan struct{})}
	return processValkey{v: v, p: p}, p
}

type processValkey struct {
	v *day2Valkey
	p *operatorProcess
}

func (pv processValkey) Connect(ctx context.Context, key types.NamespacedName, cred valkeyops.Credentials) (*reconciler.Servers, error) {
	if pv.p.gone() {
		return nil, errDead
	}
	s, err := pv.v.base.Connect(ctx, key, cred)
	if err != nil {
		return nil, err
	}
	r := &recordedPorts{c: pv.v.model(key), log: pv.v.log(key), proc: pv.p, latency: pv.v.latency}
	reads := s.Reads.(fakeReads)
	reads.observe = r
	s.Reads, s.Topology, s.Failovers = reads, r, r
	return s, nil
}

func (pv processValkey) Release(key types.NamespacedName) { pv.v.base.Release(key) }

// writeOp is one write call of a port.
type writeOp struct {
	Op, Args   string
	Start, End time.Time
	Err        error
	// TargetRole is the role of the node the call names, when it names one, at call time.
	TargetRole string
}

// String is the call in one line, for failure messages.
func (w writeOp) String() string {
	return fmt.Sprintf("%s %s(%s) err=%v", w.Start.Format("15:04:05.000"), w.Op, w.Args, w.Err)
}

// opLog is one cluster's write calls and the hooks armed on them.
type opLog struct {
	mu       sync.Mutex
	ops      []writeOp // ended, in the order they ended
	inflight []*writeOp
	overlaps []string
	gate     *rebalanceGate
	brk      chan struct{}
	hooks    []opHook
}

// rebalanceGate holds the next Rebalance in flight, before it does anything, until opened.
type rebalanceGate struct {
	hit, open chan struct{}
	once      sync.Once
}

// opHook runs fn once, right after the next successful call of op, before it returns.
type opHook struct {
	op   string
	fn   func()
	done chan struct{}
}

// holdNextRebalance arms a rebalanceGate: the returned channel closes once the next Rebalance
// is held; release (safe to call more than once) lets it run.
func (l *opLog) holdNextRebalance() (held <-chan struct{}, release func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	g := &rebalanceGate{hit: make(chan struct{}), open: make(chan struct{})}
	l.gate = g
	return g.hit, func() { g.once.Do(func() { close(g.open) }) }
}

// breakNextRebalance cuts the next Rebalance short as a crash in its first move would: a chunk
// of slots is left open (IMPORTING/MIGRATING) and the call holds until its context ends or
// its process dies. The returned channel closes once the slots are open.
func (l *opLog) breakNextRebalance() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.brk = make(chan struct{})
	return l.brk
}

// afterNext runs fn once, right after the next successful call of op and before that call
// returns (e.g. to kill the operator process at that exact point); the returned channel
// closes once fn has run.
func (l *opLog) afterNext(op string, fn func()) <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	h := opHook{op: op, fn: fn, done: make(chan struct{})}
	l.hooks = append(l.hooks, h)
	return h.done
}

func (l *opLog) begin(op, args, role string) *writeOp {
	l.mu.Lock()
	defer l.mu.Unlock()
	w := &writeOp{Op: op, Args: args, Start: time.Now(), TargetRole: role}
	for _, o := range l.inflight {
		l.overlaps = append(l.overlaps, fmt.Sprintf("%s(%s) started while %s(%s) was running", op, args, o.Op, o.Args))
	}
	l.inflight = append(l.inflight, w)
	return w
}

func (l *opLog) end(w *writeOp, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	w.End, w.Err = time.Now(), err
	for i, o := range l.inflight {
		if o == w {
			l.inflight = append(l.inflight[:i], l.inflight[i+1:]...)
			break
		}
	}
	l.ops = append(l.ops, *w)
	for i, h := range l.hooks {
		if err == nil && h.op == w.Op {
			l.hooks = append(l.hooks[:i], l.hooks[i+1:]...)
			h.fn()
			close(h.done)
			break
		}
	}
}

// takeGate returns and disarms the Rebalance gate.
func (l *opLog) takeGate() *rebalanceGate {
	l.mu.Lock()
	defer l.mu.Unlock()
	g := l.gate
	l.gate = nil
	return g
}

// takeBreak returns and disarms the Rebalance break.
func (l *opLog) takeBreak() chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.brk
	l.brk = nil
	return b
}

// writes are the calls so far, in the order they ended.
func (l *opLog) writes() []writeOp {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]writeOp(nil), l.ops...)
}

// since are the calls that started at or after t.
func (l *opLog) since(t time.Time) []writeOp {
	var out []writeOp
	for _, w := range l.writes() {
		if !w.Start.Before(t) {
			out = append(out, w)
		}
	}
	return out
}

// inflightOps names the calls in flight now.
func (l *opLog) inflightOps() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, w := range l.inflight {
		out = append(out, w.Op+"("+w.Args+")")
	}
	return out
}

// overlapping lists every call that started while another one of the cluster ran.
func (l *opLog) overlapping() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.overlaps...)
}

// recordedPorts are one process's topology ports of one cluster, recorded.
type recordedPorts struct {
	c       *day2Cluster
	log     *opLog
	proc    *operatorProcess
	latency time.Duration
}

// errHold ends a call that holds until its context ends or its process dies.
var errHold = errors.New("fake: holding until interrupted")

// do runs one write call: fn after the call's latency, unless the context ends or the process
// dies first; a Rebalance waits at an armed gate first.
func (r *recordedPorts) do(ctx context.Context, op, args, target string, fn func() error) error {
	if r.proc.gone() {
		return model.NewOpError("", strings.ToLower(op), errDead)
	}
	w := r.log.begin(op, args, r.c.roleOf(target))
	var err error
	wait := func(until <-chan time.Time) error {
		select {
		case <-until:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("interrupted: %w", ctx.Err())
		case <-r.proc.killed():
			return fmt.Errorf("interrupted: %w", errDead)
		}
	}
	if op == "Rebalance" {
		if gate := r.log.takeGate(); gate != nil {
			close(gate.hit)
			select {
			case <-gate.open:
			case <-ctx.Done():
				err = fmt.Errorf("held: %w", ctx.Err())
			case <-r.proc.killed():
				err = fmt.Errorf("held: %w", errDead)
			}
		}
	}
	if err == nil {
		if err = wait(time.After(r.latency)); err == nil {
			err = fn()
		}
	}
	if errors.Is(err, errHold) {
		err = wait(nil)
	}
	r.log.end(w, err)
	return err
}

func (r *recordedPorts) Observe(ctx context.Context, nodes []model.Node) (*model.Snapshot, error) {
	if r.proc.gone() {
		return nil, errDead
	}
	return r.c.Observe(ctx, nodes)
}

func (r *recordedPorts) Bootstrap(ctx context.Context, nodes []model.Node, shards int) error {
	return r.do(ctx, "Join", fmt.Sprintf("shards=%d nodes=%s", shards, nodeNames(nodes)), "", func() error {
		return r.c.Bootstrap(ctx, nodes, shards)
	})
}

func (r *recordedPorts) BootstrapSlots(ctx context.Context, nodes []model.Node, shards int, layout [][]model.SlotRange) error {
	return r.do(ctx, "Join", fmt.Sprintf("shards=%d nodes=%s layout=%v", shards, nodeNames(nodes), layout), "", func() error {
		return r.c.BootstrapSlots(ctx, nodes, shards, layout)
	})
}

func (r *recordedPorts) Settle(ctx context.Context, nodes []model.Node) error {
	return r.do(ctx, "Settle", nodeNames(nodes), "", func() error { return r.c.Settle(ctx, nodes) })
}

func (r *recordedPorts) Replicate(ctx context.Context, nodes []model.Node, name string, shard int) error {
	return r.do(ctx, "Replicate", fmt.Sprintf("%s shard=%d", name, shard), name, func() error {
		return r.c.Replicate(ctx, nodes, name, shard)
	})
}

// Rebalance is recorded with its leaving nodes, sorted; an armed break leaves the first
// chunk of its first move open instead of moving anything.
func (r *recordedPorts) Rebalance(ctx context.Context, nodes []model.Node, leaving []string) (valkeyops.MoveStats, error) {
	sorted := append([]string(nil), leaving...)
	sort.Strings(sorted)
	var moved valkeyops.MoveStats
	err := r.do(ctx, "Rebalance", "leaving="+strings.Join(sorted, ","), "", func() error {
		if brk := r.log.takeBreak(); brk != nil {
			r.c.openFirstMove(nodes, leaving, moveChunk)
			close(brk)
			return errHold
		}
		var err error
		moved, err = r.c.Rebalance(ctx, nodes, leaving)
		return err
	})
	return moved, err
}

// moveChunk is how many slots valkeyops opens and moves per round.
const moveChunk = 512

func (r *recordedPorts) RemoveNode(ctx context.Context, nodes []model.Node, name string) error {
	return r.do(ctx, "Remove", name, name, func() error { return r.c.RemoveNode(ctx, nodes, name) })
}

func (r *recordedPorts) AssignSlots(ctx context.Context, nodes []model.Node, name string, slots []model.SlotRange) error {
	return r.do(ctx, "AssignSlots", name+" "+model.FormatRanges(slots), name, func() error {
		return r.c.AssignSlots(ctx, nodes, name, slots)
	})
}

func (r *recordedPorts) Forget(ctx context.Context, nodes []model.Node, ids []string) error {
	return r.do(ctx, "Forget", strings.Join(ids, ","), "", func() error { return r.c.Forget(ctx, nodes, ids) })
}

func (r *recordedPorts) Failover(ctx context.Context, nodes []model.Node, primary string) error {
	return r.do(ctx, "Failover", primary, primary, func() error { return r.c.Failover(ctx, nodes, primary) })
}

func (r *recordedPorts) ForceFailover(ctx context.Context, nodes []model.Node, replica string) error {
	return r.do(ctx, "ForceFailover", replica, replica, func() error { return r.c.ForceFailover(ctx, nodes, replica) })
}

func (r *recordedPorts) Takeover(ctx context.Context, nodes []model.Node, replica string) error {
	return r.do(ctx, "Takeover", replica, replica, func() error { return r.c.Takeover(ctx, nodes, replica) })
}

func nodeNames(nodes []model.Node) string {
	out := make([]string, len(nodes))
	for i, n := range nodes {
		out[i] = n.Name
	}
	return strings.Join(out, ",")
}
