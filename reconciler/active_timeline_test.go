//go:build envtest

package reconciler_test

import (
	"bufio"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomomento/valkey-operator/reconciler/plan"
	"github.com/gomomento/valkey-operator/reconciler/views"
	"github.com/stretchr/testify/assert"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
)

// ---- the operator's writes as one timeline ----------------------------------------------

// day2Step is one write the operator made for a cluster: an API write or a Valkey write call.
type day2Step struct {
	Start, End time.Time
	// Kind is the plan action the write belongs to (a plan.Kind), or what it is otherwise:
	// RecordStatus for an observed ID, role or IP recorded on a ValkeyNode.
	Kind   string
	Target string
	OK     bool
}

const recordStatus = "RecordStatus"

// Bookkeeping beside the actions: a pod's in-sync condition set, a shard's budget applied
// or deleted. Neither is a topology action, and both may recur (a pod turns in sync, out,
// and in again).
const (
	recordInSync = "RecordInSync"
	budgetWrite  = "Budget"
)

// bookkeeping reports whether a step records something rather than acting.
func bookkeeping(kind string) bool {
	return kind == recordStatus || kind == recordInSync || kind == budgetWrite
}

// settleStep is the Valkey write MarkActive starts with.
const settleStep = "Settle"

// timeline is the cluster's writes since `since`, in the order they started. API writes are
// classified by what they do: a ValkeyNode created, or its status moved to Joining, is
// CreateNodes, as is a pod or its config ConfigMap created; a status moved to Active or Leaving is MarkActive or
// MarkLeaving; a ValkeyNode deleted is Delete. Events are left out (they are written
// asynchronously, after the pass).
func (e *day2Env) timeline(key types.NamespacedName, since time.Time) []day2Step {
	var out []day2Step
	lifecycle := map[string]string{}
	for _, w := range e.api.in(key.Namespace, time.Time{}) {
		if w.Resource == "events" {
			continue
		}
		s := day2Step{Start: w.Start, End: w.End, OK: w.OK, Target: w.Name}
		switch {
		case w.Resource == "valkeynodes" && w.Method == http.MethodPost:
			s.Kind = string(plan.CreateNodes)
		case w.Resource == "valkeynodes" && w.Sub == "status":
			s.Kind = recordStatus
			if w.OK && w.Lifecycle != lifecycle[w.Name] {
				lifecycle[w.Name] = w.Lifecycle
				s.Kind = map[string]string{views.LifecycleJoining: string(plan.CreateNodes),
					views.LifecycleActive: string(plan.MarkActive), views.LifecycleLeaving: string(plan.MarkLeaving)}[w.Lifecycle]
				s.Target += " " + w.Lifecycle
			}
		case w.Resource == "valkeynodes" && w.Method == http.MethodDelete:
			s.Kind = string(plan.Delete)
		case w.Resource == "pods" && w.Method == http.MethodPost:
			s.Kind, s.Target = string(plan.CreateNodes), w.Name+" pod"
		case w.Resource == "configmaps" && w.Method == http.MethodPost:
			s.Kind, s.Target = string(plan.CreateNodes), w.Name // a new node's config file
		case w.Resource == "pods" && w.Sub == "status":
			s.Kind = recordInSync
		case w.Resource == "poddisruptionbudgets":
			s.Kind = budgetWrite
		case w.Resource == "valkeyclusters" && w.Sub == "status":
			s.Kind = "ClusterStatus"
		default:
			s.Kind = w.Method + " " + w.Resource
		}
		if !s.Start.Before(since) {
			out = append(out, s)
		}
	}
	for _, w := range e.valkey.log(key).since(since) {
		out = append(out, day2Step{Start: w.Start, End: w.End, Kind: w.Op, Target: w.Args, OK: w.Err == nil})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Start.Before(out[j].Start) })
	return out
}

// opList is writes in one line each, for failure messages.
func opList(ws []writeOp) []string {
	out := make([]string, len(ws))
	for i, w := range ws {
		out[i] = w.String()
	}
	return out
}

func kinds(ks ...plan.Kind) []string {
	out := make([]string, len(ks))
	for i, k := range ks {
		out[i] = string(k)
	}
	return out
}

// actionsOf is the sequence of successful actions: bookkeeping left out, and the consecutive
// writes of one action (a CreateNodes writes a node, its status and its pod per new node; a
// MarkActive one status per node) folded into one.
func actionsOf(steps []day2Step) []string {
	var out []string
	for _, s := range steps {
		// Settle is MarkActive's first step, on the servers (testScaleShards checks it).
		if !s.OK || bookkeeping(s.Kind) || s.Kind == settleStep {
			continue
		}
		if len(out) == 0 || out[len(out)-1] != s.Kind {
			out = append(out, s.Kind)
		}
	}
	return out
}

// opArgs are the targets of the successful steps of one kind, in order.
func opArgs(steps []day2Step, k plan.Kind) []string {
	var out []string
	for _, s := range steps {
		if s.OK && s.Kind == string(k) {
			out = append(out, s.Target)
		}
	}
	return out
}

// firstOK is the index of the first successful step of kind k whose target starts with name
// (-1 if none).
func firstOK(steps []day2Step, k plan.Kind, name string) int {
	for i, s := range steps {
		if s.OK && s.Kind == string(k) && strings.Fields(s.Target + " ")[0] == name {
			return i
		}
	}
	return -1
}

// assertTimeline: no write of an action starts before the previous one has ended (one
// action at a time), no successful action is repeated, and the cluster's status is never
// written (the state stays Active, Updating is never written, targetSpec stays unset: by
// construction, not by luck of the watch). Bookkeeping (an observed ID or role recorded on
// a ValkeyNode) is no action: a pass may record one while a slot move runs in the background.
func assertTimeline(t *testing.T, steps []day2Step) {
	t.Helper()
	var last time.Time
	done := map[string]bool{}
	for i, s := range steps {
		assert.NotEqual(t, "ClusterStatus", s.Kind, "the Active phase wrote the cluster's status: %s", describeSteps(steps))
		if bookkeeping(s.Kind) {
			continue
		}
		assert.False(t, s.Start.Before(last), "step %d (%s %s) started before the one before it ended: %s", i, s.Kind, s.Target, describeSteps(steps))
		if s.End.After(last) {
			last = s.End
		}
		if !s.OK {
			continue
		}
		id := s.Kind + " " + s.Target
		assert.False(t, done[id], "%s succeeded twice: %s", id, describeSteps(steps))
		done[id] = true
	}
}

func describeSteps(steps []day2Step) string {
	var b strings.Builder
	for _, s := range steps {
		fmt.Fprintf(&b, "\n  %s +%5s %-12s %s ok=%v", s.Start.Format("15:04:05.000"), s.End.Sub(s.Start).Round(time.Millisecond), s.Kind, s.Target, s.OK)
	}
	return b.String()
}

// nodeCreates are the names of the ValkeyNodes created in ns since `since`.
func (e *day2Env) nodeCreates(ns string, since time.Time) []string {
	var out []string
	for _, w := range e.api.in(ns, since) {
		if w.Resource == "valkeynodes" && w.Method == http.MethodPost && w.OK {
			out = append(out, w.Name)
		}
	}
	return out
}

// ---- the recording transport ------------------------------------------------------------

// apiWrite is one write request of an operator.
type apiWrite struct {
	Start, End                             time.Time
	Method, Namespace, Resource, Name, Sub string
	Lifecycle                              string // a ValkeyNode status write: the lifecycle it writes
	OK                                     bool
}

// apiRecorder records every write request the operators send, and can hold one: a held
// request never reaches the API server and ends only when its context does or its process
// dies (an operator stopped in the middle of it).
type apiRecorder struct {
	mu     sync.Mutex
	writes []apiWrite
	holds  []*apiHold
	lags   []*watchLag
}

type apiHold struct {
	method, namespace, resource string
	hit                         chan struct{}
}

// hold holds the next write of method to resource in namespace; the channel closes once
// one is held.
func (a *apiRecorder) hold(method, namespace, resource string) <-chan struct{} {
	a.mu.Lock()
	defer a.mu.Unlock()
	h := &apiHold{method: method, namespace: namespace, resource: resource, hit: make(chan struct{})}
	a.holds = append(a.holds, h)
	return h.hit
}

// in are the recorded writes in namespace ns that started at or after since.
func (a *apiRecorder) in(ns string, since time.Time) []apiWrite {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []apiWrite
	for _, w := range a.writes {
		if w.Namespace == ns && !w.Start.Before(since) {
			out = append(out, w)
		}
	}
	return out
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// wrap records the writes of the process proc; once it is dead, its requests fail without
// reaching the API server.
func (a *apiRecorder) wrap(next http.RoundTripper, proc *operatorProcess) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		if proc.gone() {
			return nil, fmt.Errorf("connection refused: the operator process is dead")
		}
		if req.Method == http.MethodGet || req.Method == http.MethodHead {
			resp, err := next.RoundTrip(req)
			if lag := a.lagFor(req); lag != nil && err == nil {
				resp.Body = &laggingBody{body: resp.Body, r: bufio.NewReader(resp.Body), lag: lag}
			}
			return resp, err
		}
		w := describeWrite(req)
		a.mu.Lock()
		var held *apiHold
		for i, h := range a.holds {
			if h.method == w.Method && h.namespace == w.Namespace && h.resource == w.Resource {
				held = h
				a.holds = append(a.holds[:i], a.holds[i+1:]...)
				break
			}
		}
		a.mu.Unlock()
		var resp *http.Response
		var err error
		if held != nil {
			close(held.hit)
			select {
			case <-req.Context().Done():
				err = req.Context().Err()
			case <-proc.killed():
				err = fmt.Errorf("connection reset: the operator process is dead")
			}
		} else {
			resp, err = next.RoundTrip(req)
		}
		w.End = time.Now()
		w.OK = err == nil && resp.StatusCode < 300
		a.mu.Lock()
		a.writes = append(a.writes, w)
		a.mu.Unlock()
		return resp, err
	})
}

// watchLag delays, once, the watch event of resource that match picks: the operators'
// caches then show every change before it at once, and that one only d later, as a slow
// informer would.
type watchLag struct {
	resource string
	match    func(watch.EventType, *unstructured.Unstructured) bool
	d        time.Duration
	used     atomic.Bool
	hit      chan struct{}
}

// lagWatch arms a watchLag; the channel closes when the event it delays arrives.
func (a *apiRecorder) lagWatch(resource string, d time.Duration, match func(watch.EventType, *unstructured.Unstructured) bool) <-chan struct{} {
	a.mu.Lock()
	defer a.mu.Unlock()
	l := &watchLag{resource: resource, match: match, d: d, hit: make(chan struct{})}
	a.lags = append(a.lags, l)
	return l.hit
}

// lagFor is the armed watchLag for a watch request, if any.
func (a *apiRecorder) lagFor(req *http.Request) *watchLag {
	if req.URL.Query().Get("watch") != "true" {
		return nil
	}
	w := parsePath(req)
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, l := range a.lags {
		if l.resource == w.Resource && !l.used.Load() {
			return l
		}
	}
	return nil
}

// laggingBody is a watch stream (one JSON event per line) that holds back the event its lag
// picks for the lag's duration.
type laggingBody struct {
	body io.ReadCloser
	r    *bufio.Reader
	lag  *watchLag
	buf  []byte
	err  error
}

func (b *laggingBody) Read(p []byte) (int, error) {
	for len(b.buf) == 0 {
		if b.err != nil {
			return 0, b.err
		}
		b.buf, b.err = b.r.ReadBytes('\n')
		var ev metav1.WatchEvent
		u := &unstructured.Unstructured{}
		if len(b.buf) > 0 && json.Unmarshal(b.buf, &ev) == nil && u.UnmarshalJSON(ev.Object.Raw) == nil &&
			b.lag.match(watch.EventType(ev.Type), u) && b.lag.used.CompareAndSwap(false, true) {
			close(b.lag.hit)
			time.Sleep(b.lag.d) // the lag itself: what is being simulated is a slow stream
		}
	}
	n := copy(p, b.buf)
	b.buf = b.buf[n:]
	return n, nil
}

func (b *laggingBody) Close() error { return b.body.Close() }

// parsePath reads the namespace, resource, name and subresource of an API request.
func parsePath(req *http.Request) apiWrite {
	w := apiWrite{Start: time.Now(), Method: req.Method}
	parts := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) >= 3 && parts[0] == "apis":
		parts = parts[3:]
	}
	if len(parts) >= 2 && parts[0] == "namespaces" {
		w.Namespace, parts = parts[1], parts[2:]
	}
	for i, p := range parts {
		switch i {
		case 0:
			w.Resource = p
		case 1:
			w.Name = p
		case 2:
			w.Sub = p
		}
	}
	return w
}

// describeWrite reads what a write request does from its path (and, for a create or a
// ValkeyNode write, its body) without consuming it.
func describeWrite(req *http.Request) apiWrite {
	w := parsePath(req)
	if req.GetBody == nil || (w.Method != http.MethodPost && w.Resource != "valkeynodes") {
		return w
	}
	body, err := req.GetBody()
	if err != nil {
		return w
	}
	defer body.Close()
	raw, err := io.ReadAll(body)
	if err != nil {
		return w
	}
	if w.Resource == "valkeynodes" {
		u := &unstructured.Unstructured{}
		if u.UnmarshalJSON(raw) == nil {
			w.Name = cmp.Or(w.Name, u.GetName())
			w.Lifecycle = views.Node{U: u}.Status().Lifecycle
		}
		return w
	}
	// Built-in kinds travel as protobuf.
	if obj, _, err := clientgoscheme.Codecs.UniversalDeserializer().Decode(raw, nil, nil); err == nil {
		if a, err := meta.Accessor(obj); err == nil {
			w.Name = cmp.Or(w.Name, a.GetName())
		}
	}
	return w
}
