package reconciler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/gomomento/valkey-operator/reconciler/plan"
	"github.com/gomomento/valkey-operator/reconciler/render"
	"github.com/gomomento/valkey-operator/reconciler/views"
	"github.com/gomomento/valkey-operator/valkeyops"
	"github.com/gomomento/valkey-operator/valkeyops/model"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The Active phase (docs/day2.md: all day-2 work happens while the cluster reports Active).
// Each pass observes the ValkeyNodes, their pods and every ready server's own view (read-only),
// asks plan.Next for the one next action against the live spec, performs it, and records it as
// an Event. A converged cluster is observed again after ActivePeriod, or at once on any pod or
// node event; it causes no API write and no Valkey write command.

// Bounds on one pass's work with the servers: a server that stops answering must not hold a
// worker (and with it other clusters) for longer. An action cut short is planned again.
const (
	observeTimeout = 15 * time.Second
	actionTimeout  = 3 * time.Minute
	// movedRecheck is how soon a cluster whose background slot move ended is observed again.
	movedRecheck = 100 * time.Millisecond
	// nextActionDelay is how soon the pass after a successful action runs.
	nextActionDelay = 100 * time.Millisecond
	// moveCheck is how often a cluster whose slot move runs in the background looks whether
	// it ended (a map lookup: the pass touches no server meanwhile).
	moveCheck = 500 * time.Millisecond
	// serverWait is how soon a cluster waiting on its servers (a replica syncing, gossip
	// settling, Valkey's own failover) is observed again: no watch event marks the end of
	// such a wait, and each one sits on the critical path of a roll or a heal.
	serverWait = 500 * time.Millisecond
)

// observeActive connects and observes every node whose pod is ready (or is being deleted but
// still runs), recording each server's ID, role and pod IP on its ValkeyNode.
func (r *Reconciler) observeActive(ctx context.Context, p *pass) *outcome {
	if r.memory.moving(p.key) {
		// A slot move runs in the background (tasks.go). Nothing else touches the servers
		// meanwhile: connecting with changed credentials (a rotated password, a new
		// certificate) would close the pooled client the move is using.
		p.log.V(1).Info("waiting", "reason", "a slot move is under way")
		if out := r.refuseRequest(ctx, p, "another topology action runs: a slot move is under way"); out != nil {
			return out
		}
		return done(ctrl.Result{RequeueAfter: moveCheck}, nil)
	}
	p.members = nil
	for _, n := range p.nodes {
		pod := p.pods[n.Name()]
		if pod == nil {
			continue
		}
		// A pod being deleted keeps serving through its preStop: observe it so a primary can
		// hand its slots over.
		if st, _ := podState(pod); st == plan.PodReady || (st == plan.PodLost && pod.Status.PodIP != "" && pod.Status.Phase == corev1.PodRunning) {
			m := valkeyNode(n.Name(), pod.Status.PodIP, n.Shard())
			m.ClientAddr = r.clientAddr(p, n.Name(), pod.UID)
			p.members = append(p.members, m)
		}
	}
	if len(p.members) == 0 {
		return nil // nothing to observe: the planner sees every node as not answering
	}
	if out := r.connect(ctx, p); out != nil {
		return out
	}
	return r.observe(ctx, p, r.needs(p))
}

// planActive plans the next action from what observeActive saw and performs it. The live
// configRef is resolved (from the cache) every pass: its hash against each node's is what
// rolls a shard. When it does not resolve, resolveConfig's Warning Event says so and nothing
// is rolled or created until it does.
func (r *Reconciler) planActive(ctx context.Context, p *pass) *outcome {
	if ended, busy := r.memory.moveFinished(p.key); busy {
		return done(ctrl.Result{RequeueAfter: r.opts.PollInterval}, nil) // it ended after observeActive looked
	} else if ended != nil {
		// Record how the move ended and what it moved, then plan from a fresh observation:
		// this pass's snapshot may predate the move's last step.
		if r.opts.Metrics != nil {
			r.opts.Metrics.Moved(p.key, ended.moved)
		}
		a := ended.action
		a.Reason += fmt.Sprintf("; moved %d slot(s) with %d key(s)", ended.moved.Slots, ended.moved.Keys)
		r.report(p, a, ended.err)
		return done(ctrl.Result{RequeueAfter: movedRecheck}, nil)
	}
	o := r.observed(p, p.cluster.Shards(), p.cluster.ReplicasPerShard())
	p.reportPersistenceFaults()
	out := r.resolveConfig(ctx, p)
	switch {
	case out == nil:
		o.Hash = r.liveHash(p)
		// Volumes follow the live config on their own, beside the one-action timeline:
		// a new reclaim or a larger size moves no data.
		if err := r.reconcileVolumes(ctx, p); err != nil {
			return done(ctrl.Result{}, err)
		}
	case out.err != nil:
		return out
	}
	o.BackupRunning = r.runningBackup(ctx, p)
	r.markInSync(ctx, p, o)
	if out := r.answerRequest(ctx, p, o); out != nil {
		return out
	}
	a := plan.Next(o)
	return r.act(ctx, p, a)
}

// observed is what the planner is told of this pass: the nodes with their pods and the
// servers' own views, planned towards shards x replicas. Hash is left for the caller: only a
// configRef that resolves gives one.
func (r *Reconciler) observed(p *pass, shards, replicas int) plan.Observed {
	o := plan.Observed{Shards: shards, Replicas: replicas, SlowStart: r.opts.SlowStart, ClientAddresses: p.cluster.ExternalAccess() != nil}
	for _, n := range p.nodes {
		spec := n.Spec()
		pn := plan.Node{Name: n.Name(), Shard: spec.Shard, Hash: spec.SpecHash, Lifecycle: n.Status().Lifecycle, RecordedID: n.Status().NodeID, Pod: plan.PodGone}
		if pod := p.pods[n.Name()]; pod != nil {
			pn.Pod, pn.Unschedulable = podState(pod)
			pn.Exited = serverExited(pod)
			pn.InSync, _ = podInSync(pod)
			pn.Cordoned = p.maintenance[pod.Spec.NodeName]
			// A claim being deleted under a running server (kept by its pod's use of it) is
			// a volume about to go: the node moves off it like off a cordoned host.
			if c := p.claimOf(n); c != nil && c.DeletionTimestamp != nil {
				pn.VolumeLost = true
			}
			if pn.Pod == plan.PodStarting {
				pn.NotReadyFor = r.opts.Now().Sub(pod.CreationTimestamp.Time)
			}
		} else if pn.Lifecycle == plan.Joining {
			pn.Pod = plan.PodStarting // created this pass or the last; its pod is made next
		}
		if snap := p.snapshot(); snap != nil {
			pn.State = snap.ByName(n.Name())
		}
		pn.Durable = p.durable(n)
		pn.FailedStarts = int(n.Status().FailedStarts)
		if pod := p.pods[n.Name()]; pn.Durable && pod != nil && pod.DeletionTimestamp != nil {
			pn.Pod = plan.PodLost // its name is taken until it goes: a restart waits for that
		}
		o.Nodes = append(o.Nodes, pn)
	}
	return o
}

// liveHash is the spec hash a node created now would get (the configRef resolved).
func (r *Reconciler) liveHash(p *pass) string {
	return render.NodeSpec(p.cluster, 0, p.resolved, r.opts.Settings.DefaultZoneSpread).SpecHash
}

// act performs one planned action. Every topology action is an Event; an action that fails
// is a Warning Event and is planned again on the next pass (each one is idempotent, so a
// retry, or a restarted operator, finishes it).
func (r *Reconciler) act(ctx context.Context, p *pass, a plan.Action) *outcome {
	again := done(ctrl.Result{RequeueAfter: r.opts.PollInterval}, nil)
	if stalled, ok := expiryStall(a, p.cluster.TLSSecretRef(), p.certExpiredAt(r.opts.Now())); ok {
		a = stalled // servers refuse an expired peer: the step would only time out (tlsexpiry.go)
	}
	switch a.Kind {
	case plan.None:
		p.settle(ReasonTopologyStall)
		p.settle(ReasonTopologyFail)
		p.settle(ReasonStranger) // a stranger met again is reported again
		return done(ctrl.Result{RequeueAfter: r.opts.ActivePeriod}, nil)
	case plan.Wait:
		if a.Held {
			// Held for a backup: its end is a watch event (backuphold.go), and the servers
			// are observed again at the usual pace meanwhile for anything else.
			p.log.V(1).Info("waiting", "reason", a.Reason)
			return done(ctrl.Result{RequeueAfter: r.opts.RecheckInterval}, nil)
		}
		if a.Warning {
			p.raise(ReasonTopologyStall, "Wait", a.Reason)
			return done(ctrl.Result{RequeueAfter: r.opts.RecheckInterval}, nil)
		}
		p.log.V(1).Info("waiting", "reason", a.Reason)
		return done(ctrl.Result{RequeueAfter: min(serverWait, r.opts.PollInterval)}, nil)
	}
	p.log.Info("topology action", "action", a.Kind, "reason", a.Reason)
	if a.Kind == plan.Rebalance {
		// A slot move may take minutes: it runs in the background (tasks.go) and a later
		// pass reports it.
		c, members := p.valkey.Topology, p.members
		r.memory.startMove(ctx, p.key, a, func(ctx context.Context) (valkeyops.MoveStats, error) { return c.Rebalance(ctx, members, a.Nodes) })
		return again
	}
	actx, cancel := context.WithTimeout(ctx, actionTimeout)
	defer cancel()
	started := time.Now()
	err := r.perform(actx, p, a)
	p.log.Info("topology action ended", "action", a.Kind, "took", time.Since(started).Round(time.Millisecond).String(), "failed", err != nil)
	if apierrors.IsConflict(err) || errors.Is(err, errStaleNodes) {
		return again
	}
	r.report(p, a, err)
	if err != nil {
		return again
	}
	// Each action waits until the servers show its effect, so the next one can be planned
	// at once; an action on the servers alone causes no watch event to wake the cluster.
	return done(ctrl.Result{RequeueAfter: nextActionDelay}, nil)
}

// report records how an action ended: an Event when it succeeded, a Warning Event when it
// failed (it is planned again on the next pass).
func (r *Reconciler) report(p *pass, a plan.Action, err error) {
	if r.opts.Metrics != nil {
		r.opts.Metrics.ActionDone(p.key, string(a.Kind), err)
	}
	if err != nil {
		p.raise(ReasonTopologyFail, string(a.Kind), fmt.Sprintf("%s (%s) failed: %v", a.Kind, a.Reason, err))
		return
	}
	p.settle(ReasonTopologyFail)
	p.settle(ReasonTopologyStall)
	r.event(p, nil, ReasonTopology, string(a.Kind), "%s: %s", a.Kind, a.Reason)
}

// setLifecycle writes lifecycle life to the named ValkeyNodes' status.
func (r *Reconciler) setLifecycle(ctx context.Context, p *pass, names []string, life string) error {
	for _, name := range names {
		n, err := p.node(name)
		if err != nil {
			return err
		}
		if err := r.setNodeStatus(ctx, n, func(s *views.NodeStatus) { s.Lifecycle = life }); err != nil {
			return err
		}
	}
	return nil
}

// deleteNode deletes a ValkeyNode (its pod and config ConfigMap go with it, by owner) and
// remembers that the cache must stop showing it.
func (r *Reconciler) deleteNode(ctx context.Context, p *pass, n views.Node) error {
	err := r.client.Delete(ctx, n.U, client.PropagationPolicy(metav1.DeletePropagationBackground))
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	r.expect(p, n.Name(), false)
	return nil
}

// createNodes creates ValkeyNodes (Joining) and their pods from the live resolution. atOnce
// creates the pods several at once (a forming cluster: createPodsAtOnce); otherwise one
// after the other, each a step of the Active phase's one-action-at-a-time timeline.
func (r *Reconciler) createNodes(ctx context.Context, p *pass, shards []int, atOnce bool) error {
	if p.resolved.Image == "" {
		return fmt.Errorf("configRef %q does not resolve yet", p.cluster.ConfigRef())
	}
	taken := map[string]bool{}
	for _, n := range p.nodes {
		taken[n.Name()] = true
	}
	var created []views.Node
	for _, shard := range shards {
		n, err := r.createNode(ctx, p, shard, taken)
		if err != nil {
			return err
		}
		taken[n.Name()] = true
		created = append(created, n)
	}
	// Pods for the new nodes only: a lost node never gets a fresh pod under its old name.
	if atOnce {
		return r.createPodsAtOnce(ctx, p, created)
	}
	return r.createPods(ctx, p, created)
}

// ensureActivePods creates the pod of a Joining node that has none (its creation was
// interrupted). An Active node without a pod is lost, never given a fresh pod under its old
// name: the planner replaces it.
func (r *Reconciler) ensureActivePods(ctx context.Context, p *pass) *outcome {
	var joining []views.Node
	for _, n := range p.nodes {
		if n.Status().Lifecycle == views.LifecycleJoining {
			joining = append(joining, n)
		}
	}
	return r.podsCreated(p, r.createPods(ctx, p, joining))
}

// ensurePodAnnotations brings the cluster's podAnnotations onto every live pod in place: new
// and changed keys, one merge patch per pod that lacks some, no restart. A removed key stays
// until the pod is replaced (docs/day2.md): the operator cannot tell a key it set from one
// someone else added.
func (r *Reconciler) ensurePodAnnotations(ctx context.Context, p *pass) *outcome {
	want := p.cluster.PodAnnotations()
	for _, n := range p.nodes {
		pod := p.pods[n.Name()]
		if pod == nil || pod.DeletionTimestamp != nil {
			continue
		}
		missing := map[string]any{}
		for k, v := range want {
			if have, ok := pod.Annotations[k]; !ok || have != v {
				missing[k] = v
			}
		}
		if len(missing) == 0 {
			continue
		}
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": missing}})
		if err != nil {
			return done(ctrl.Result{}, err)
		}
		if err := r.client.Patch(ctx, pod, client.RawPatch(types.MergePatchType, patch)); err != nil && !apierrors.IsNotFound(err) {
			return done(ctrl.Result{}, err)
		}
		p.log.Info("patched pod annotations", "pod", pod.Name, "keys", len(missing))
	}
	return nil
}

// joinable are the ready members of the kept shards that are not leaving: what a Join hands
// to Bootstrap.
func (p *pass) joinable() []model.Node {
	var out []model.Node
	for _, m := range p.members {
		n, err := p.node(m.Name)
		if err == nil && n.Status().Lifecycle != views.LifecycleLeaving && n.Shard() < p.cluster.Shards() {
			out = append(out, m)
		}
	}
	return out
}

// errStaleNodes: the cache showed a ValkeyNode in a lifecycle the API server no longer has;
// the pass ends and the next one plans from the newer view.
var errStaleNodes = errors.New("ValkeyNode lifecycle changed since the cache was read")

// requireNotYetActive reads the named ValkeyNodes around the cache and fails with
// errStaleNodes if one is gone, Active already or Leaving.
func (r *Reconciler) requireNotYetActive(ctx context.Context, p *pass, names []string) error {
	for _, name := range names {
		n, err := p.node(name)
		if err != nil {
			return err
		}
		live := &unstructured.Unstructured{}
		live.SetGroupVersionKind(n.U.GroupVersionKind())
		if err := r.apiReader.Get(ctx, client.ObjectKeyFromObject(n.U), live); err != nil {
			if apierrors.IsNotFound(err) {
				return fmt.Errorf("%w: %s is gone", errStaleNodes, name)
			}
			return err
		}
		// The planner activates any joined node not Active (a node whose Joining status
		// write was lost has none), and never a Leaving one.
		if life := (views.Node{U: live}).Status().Lifecycle; life == views.LifecycleActive || life == views.LifecycleLeaving {
			return fmt.Errorf("%w: %s is %s", errStaleNodes, name, life)
		}
	}
	return nil
}

// membersNamed is the members with the given names.
func (p *pass) membersNamed(names []string) []model.Node {
	var out []model.Node
	for _, m := range p.members {
		if slices.Contains(names, m.Name) {
			out = append(out, m)
		}
	}
	return out
}

// node finds a loaded ValkeyNode by name; the planner only names loaded nodes, so a miss is
// a bug reported as an error rather than acted on.
func (p *pass) node(name string) (views.Node, error) {
	for _, n := range p.nodes {
		if n.Name() == name {
			return n, nil
		}
	}
	return views.Node{}, fmt.Errorf("planner named unknown node %q", name)
}
