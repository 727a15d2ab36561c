package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tidwall/gjson"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/gomomento/valkey-operator/crds"
	"github.com/gomomento/valkey-operator/devcluster/dockernet"
	"github.com/gomomento/valkey-operator/reconciler"
	"github.com/gomomento/valkey-operator/reconciler/render"
	"github.com/gomomento/valkey-operator/reconciler/views"
)

// The single-apply breakdown (issue #14): where the seconds from `kubectl apply` to Active
// go. Conditions' lastTransitionTime and containers' startedAt have 1 s resolution on the
// API server, too coarse for a 3 s budget, so the bench watches the cluster's objects itself
// and stamps each change on arrival. It prints one line:
//
//	fleet: single-apply-breakdown created=<s> nodes=<s> objects=<s> scheduled=<s> started=<s> listening=<s> ready=<s> formed=<s> active=<s>
//
// each the time from the start of `kubectl apply` until the last of the cluster's members
// reached that point: created, the ValkeyCluster exists (kubectl's own start-up and
// discovery); nodes, every ValkeyNode exists; objects, every pod exists; scheduled, every pod
// is bound to a node; started, every server container runs; listening, every server accepts
// connections (its own log line, read from Docker afterwards); ready, every server container is
// ready (its readiness probe passed: what the operator waits for before it bootstraps);
// formed, the operator's Bootstrap Event (the servers formed the cluster and the operator
// recorded it); active, status.state reads Active. Event delivery and watch latency are a
// few milliseconds on the dev cluster.
//
// Reading it: formed cannot come sooner than about 2 s after the last primary's server
// started (listening), whatever the operator does: a Valkey primary reports cluster_state
// ok no earlier than CLUSTER_WRITABLE_DELAY (2000 ms, compiled in) after its start, and
// Bootstrap waits for ok everywhere. The operator's work between ready and formed runs
// under that delay; what moves Active is how soon the containers start.

var (
	nodesGVR  = schema.GroupVersionResource{Group: crds.Group, Version: crds.Version, Resource: "valkeynodes"}
	phaseKeys = []string{"created", "nodes", "objects", "scheduled", "started", "listening", "ready", "formed", "active"}
)

// breakdown collects the first time each phase was complete for one cluster.
type breakdown struct {
	start   time.Time
	members int // ValkeyNodes (and pods) the cluster ends up with

	mu      sync.Mutex
	uid     string // the cluster's, so Events of an earlier cluster of the same name are ignored
	at      map[string]time.Duration
	nodes   map[string]bool
	pods    map[string]*corev1.Pod
	podSeen map[string]time.Duration // first sighting of each pod, for the log
}

func newBreakdown(members int) *breakdown {
	return &breakdown{members: members, at: map[string]time.Duration{}, nodes: map[string]bool{},
		pods: map[string]*corev1.Pod{}, podSeen: map[string]time.Duration{}}
}

// mark records phase as reached now, once; it is a no-op before the clock started.
func (b *breakdown) mark(phase string) {
	if b.start.IsZero() {
		return
	}
	if _, ok := b.at[phase]; !ok {
		b.at[phase] = time.Since(b.start)
	}
}

// all reports whether every one of the cluster's pods satisfies pred.
func (b *breakdown) all(pred func(*corev1.Pod) bool) bool {
	if len(b.pods) < b.members {
		return false
	}
	for _, p := range b.pods {
		if !pred(p) {
			return false
		}
	}
	return true
}

func serverContainer(p *corev1.Pod) *corev1.ContainerStatus {
	for i := range p.Status.ContainerStatuses {
		if p.Status.ContainerStatuses[i].Name == render.ContainerName {
			return &p.Status.ContainerStatuses[i]
		}
	}
	return nil
}

func (b *breakdown) onPod(p *corev1.Pod, deleted bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if deleted {
		delete(b.pods, p.Name)
		return
	}
	b.pods[p.Name] = p
	if _, ok := b.podSeen[p.Name]; !ok && !b.start.IsZero() {
		b.podSeen[p.Name] = time.Since(b.start)
	}
	if b.all(func(*corev1.Pod) bool { return true }) {
		b.mark("objects")
	}
	if b.all(func(p *corev1.Pod) bool { return p.Spec.NodeName != "" }) {
		b.mark("scheduled")
	}
	if b.all(func(p *corev1.Pod) bool { cs := serverContainer(p); return cs != nil && cs.State.Running != nil }) {
		b.mark("started")
	}
	if b.all(func(p *corev1.Pod) bool { cs := serverContainer(p); return cs != nil && cs.Ready }) {
		b.mark("ready")
	}
}

func (b *breakdown) onNode(name string, deleted bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if deleted {
		delete(b.nodes, name)
		return
	}
	b.nodes[name] = true
	if len(b.nodes) >= b.members {
		b.mark("nodes")
	}
}

func (b *breakdown) onCluster(u *unstructured.Unstructured) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.mark("created")
	b.uid = string(u.GetUID())
	if (views.Cluster{U: u}).Status().State == views.StateActive {
		b.mark("active")
	}
}

func (b *breakdown) onEvent(e *corev1.Event) {
	if e.Reason != reconciler.ReasonBootstrap {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.uid == "" || string(e.InvolvedObject.UID) != b.uid {
		return
	}
	b.mark("formed")
}

// line is the result line; a phase never reached prints as -1.
func (b *breakdown) line() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var s strings.Builder
	s.WriteString("fleet: single-apply-breakdown")
	for _, k := range phaseKeys {
		v, ok := b.at[k]
		if !ok {
			fmt.Fprintf(&s, " %s=-1", k)
			continue
		}
		fmt.Fprintf(&s, " %s=%.2f", k, v.Seconds())
	}
	return s.String()
}

// podTimes describes, per pod, when it was first seen and what its container reported, for
// the progress log.
func (b *breakdown) podTimes() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for name, p := range b.pods {
		node := p.Spec.NodeName
		out = append(out, fmt.Sprintf("%s seen=%.2fs node=%s", name, b.podSeen[name].Seconds(), node))
	}
	return strings.Join(out, "; ")
}

// watchBreakdown starts the watches of one cluster (about to be applied in ns) and returns
// the breakdown they fill in; they stop when ctx ends. Call begin on the breakdown when the
// apply starts: the watches are established before this returns, so nothing is missed.
func (b *bench) watchBreakdown(ctx context.Context, ns, name string, members int) (*breakdown, error) {
	bd := newBreakdown(members)
	sel := render.LabelCluster + "=" + name
	type source struct {
		what  string
		open  func(context.Context) (watch.Interface, error)
		apply func(watch.Event)
	}
	sources := []source{
		{"pods", func(ctx context.Context) (watch.Interface, error) {
			return b.env.Kube.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{LabelSelector: sel})
		}, func(ev watch.Event) {
			if p, ok := ev.Object.(*corev1.Pod); ok {
				bd.onPod(p, ev.Type == watch.Deleted)
			}
		}},
		{"valkeynodes", func(ctx context.Context) (watch.Interface, error) {
			return b.dyn.Resource(nodesGVR).Namespace(ns).Watch(ctx, metav1.ListOptions{LabelSelector: sel})
		}, func(ev watch.Event) {
			if u, ok := ev.Object.(*unstructured.Unstructured); ok {
				bd.onNode(u.GetName(), ev.Type == watch.Deleted)
			}
		}},
		{"valkeycluster", func(ctx context.Context) (watch.Interface, error) {
			return b.dyn.Resource(clustersGVR).Namespace(ns).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
		}, func(ev watch.Event) {
			if u, ok := ev.Object.(*unstructured.Unstructured); ok && ev.Type != watch.Deleted {
				bd.onCluster(u)
			}
		}},
		{"events", func(ctx context.Context) (watch.Interface, error) {
			return b.env.Kube.CoreV1().Events(ns).Watch(ctx, metav1.ListOptions{
				FieldSelector: "involvedObject.kind=" + crds.KindCluster + ",involvedObject.name=" + name})
		}, func(ev watch.Event) {
			if e, ok := ev.Object.(*corev1.Event); ok && ev.Type != watch.Deleted {
				bd.onEvent(e)
			}
		}},
	}
	for _, s := range sources {
		w, err := s.open(ctx)
		if err != nil {
			return nil, fmt.Errorf("watching %s: %w", s.what, err)
		}
		go func() {
			defer func() { w.Stop() }()
			for {
				select {
				case <-ctx.Done():
					return
				case ev, ok := <-w.ResultChan():
					if !ok {
						// The API server ended the watch (timeout): open it again; the
						// objects come back as ADDED, which changes no recorded time.
						if ctx.Err() != nil {
							return
						}
						nw, err := s.open(ctx)
						if err != nil {
							logf("re-watching %s: %v", s.what, err)
							return
						}
						w = nw
						continue
					}
					s.apply(ev)
				}
			}
		}()
	}
	return bd, nil
}

// begin starts the breakdown's clock.
func (b *breakdown) begin(t time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.start = t
}

// dockerTimes reads, from Docker itself (nanosecond timestamps), when each container of the
// cluster's pods was created and started, and from each server's log when it listened,
// relative to the start of the apply, for the progress log: how much of "started" is the
// container runtime and how much reaching the API server. The last server to listen is
// recorded as the breakdown's listening phase.
func (b *bench) dockerTimes(ctx context.Context, bd *breakdown, ns string) string {
	ids, err := b.containers(ctx, ns, "")
	if err != nil || len(ids) == 0 {
		return fmt.Sprintf("no containers (%v)", err)
	}
	out, err := docker(ctx, append([]string{"inspect", "--format",
		`{{.ID}} {{index .Config.Labels "` + dockernet.LabelPodName + `"}}/{{index .Config.Labels "` + dockernet.LabelContainer + `"}} {{.Created}} {{.State.StartedAt}}`}, ids...)...)
	if err != nil {
		return err.Error()
	}
	bd.mu.Lock()
	start := bd.start
	bd.mu.Unlock()
	var lines []string
	var lastCreated, lastStarted, lastListening time.Duration
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(l)
		if len(f) != 4 {
			continue
		}
		id, name := f[0], f[1]
		created, err1 := time.Parse(time.RFC3339Nano, f[2])
		started, err2 := time.Parse(time.RFC3339Nano, f[3])
		if err1 != nil || err2 != nil {
			continue
		}
		c, s := created.Sub(start), started.Sub(start)
		lastCreated, lastStarted = max(lastCreated, c), max(lastStarted, s)
		line := fmt.Sprintf("%s created=%.2f started=%.2f", name, c.Seconds(), s.Seconds())
		if _, ctr, _ := strings.Cut(name, "/"); ctr != render.ContainerName {
			lines = append(lines, line)
			continue
		}
		if at, ok := listeningAt(ctx, id); ok {
			l := at.Sub(start)
			lastListening = max(lastListening, l)
			line += fmt.Sprintf(" listening=%.2f", l.Seconds())
		}
		lines = append(lines, line)
	}
	slices.Sort(lines)
	if lastListening > 0 {
		bd.mu.Lock()
		bd.at["listening"] = lastListening
		bd.mu.Unlock()
	}
	return fmt.Sprintf("last created=%.2f last started=%.2f last listening=%.2f; %s", lastCreated.Seconds(), lastStarted.Seconds(),
		lastListening.Seconds(), strings.Join(lines, "; "))
}

// listeningAt reads, from the log of the Valkey server in container id, when it was ready
// to accept connections (valkey-server logs milliseconds, in UTC in the image).
func listeningAt(ctx context.Context, id string) (time.Time, bool) {
	logs, err := docker(ctx, "logs", id)
	if err != nil {
		return time.Time{}, false
	}
	for _, l := range strings.Split(logs, "\n") {
		// 1:M 03 Dec 2026 23:31:36.539 * Ready to accept connections tcp
		f := strings.Fields(l)
		if !strings.Contains(l, "Ready to accept connections") || len(f) < 5 {
			continue
		}
		t, err := time.Parse("02 Jan 2006 15:04:05.000", strings.Join(f[1:5], " "))
		return t, err == nil
	}
	return time.Time{}, false
}

// operatorTimeline is the operator's log between start and end as "<s> <message>" lines,
// times relative to start: where the operator's own steps fall within the breakdown (with
// -operator-debug, valkeyops' steps too).
func (b *bench) operatorTimeline(ctx context.Context, start, end time.Time) string {
	text, err := b.fleetOp.log(ctx)
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, l := range strings.Split(text, "\n") {
		t, ok := logTime(l)
		if !ok || t.Before(start) || t.After(end) {
			continue
		}
		out = append(out, fmt.Sprintf("  %6.2f %s", t.Sub(start).Seconds(), gjson.Get(l, "msg").String()))
	}
	return strings.Join(out, "\n")
}

// begun is the breakdown's start.
func (b *breakdown) begun() time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.start
}

// reached reports when phase was reached, if it was.
func (b *breakdown) reached(phase string) (time.Duration, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	d, ok := b.at[phase]
	return d, ok
}
