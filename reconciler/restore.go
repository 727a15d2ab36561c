package reconciler

// Creating a cluster from a backup (spec.restoreFrom, issue #25): the Creating steps that
// resolve the backup's manifest before any node exists, the node spec that makes each
// shard's first pod fetch its snapshot before its server starts, the watch on those
// fetches, and the Events that report each shard loaded. Forming itself is the ordinary
// Bootstrap with the backup's slot ranges (creating.go): the restored primaries start owning
// the slots their keys hash to, and the rest of each shard's ranges is assigned to them.

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/gomomento/valkey-operator/reconciler/backup"
	"github.com/gomomento/valkey-operator/reconciler/render"
	"github.com/gomomento/valkey-operator/reconciler/views"
	"github.com/gomomento/valkey-operator/valkeyops/model"
)

// restoring is what a Creating pass of a cluster created from a backup knows of the backup:
// its manifest, where it is, and each shard's slot ranges.
type restoring struct {
	// uid is the cluster's UID, so a cluster deleted and made again under the same name
	// (memory.go keys by name) never inherits its predecessor's manifest.
	uid      types.UID
	storage  views.BackupStorage
	manifest backup.Manifest
	layout   [][]model.SlotRange
}

// shards is the backup's shard count: the cluster forms with it (a different spec.shards
// is reached afterwards by the Active phase's scaling).
func (rs *restoring) shards() int { return len(rs.manifest.Shards) }

// Exit codes of `manager restore-fetch`: a refusal (the object differs from what the
// manifest recorded, an RDB too new) is permanent; anything else (the store unreachable) is
// worth another try.
const restoreFetchRefused = 2

// restoreLoadingPoll is how soon a forming cluster whose restored servers were still loading
// their snapshot is observed again. The end of loading changes nothing Kubernetes reports
// (the pod is already running), so only this poll sees it. At the poll interval (2 s) the
// wait was a third of a 1M-key restore's time (make bench-backup), whose 9 MB shards load in
// well under a second.
const restoreLoadingPoll = 250 * time.Millisecond

// prepareRestore resolves spec.restoreFrom to the backup's manifest, once per cluster (kept
// in memory), and refuses with a RestoreRefused Warning what cannot be restored: a
// ValkeyBackup missing or not Completed, a location that does not answer, a manifest
// missing or of an unknown format, an object missing or of another size, an RDB newer than
// the cluster's Valkey loads. The cluster then stays Creating with nothing created; the
// schema fixes restoreFrom, so deleting the cluster is the way out, or fixing what the
// message names (the pass after it proceeds). A restore already resolved goes on to watch
// its shards' fetches.
func (r *Reconciler) prepareRestore(ctx context.Context, p *pass) *outcome {
	src := p.cluster.RestoreFrom()
	if src == nil {
		return nil
	}
	uid := p.obj.GetUID()
	var rs *restoring
	r.memory.peek(p.key, func(c *clusterMemory) {
		if c.restore != nil && c.restore.uid == uid {
			rs = c.restore
		}
	})
	if rs == nil {
		var refusal string
		var err error
		rs, refusal, err = r.loadRestore(ctx, p, *src)
		if err != nil {
			return done(ctrl.Result{}, err)
		}
		if refusal != "" {
			p.raise(ReasonRestoreRefused, "Restore", "cannot restore "+describeSource(*src)+": "+refusal+
				"; the cluster waits in Creating, with nothing created (delete it to start over)")
			return done(ctrl.Result{RequeueAfter: r.opts.RecheckInterval}, nil)
		}
		rs.uid = uid
		r.memory.with(p.key, func(c *clusterMemory) { c.restore = rs })
	}
	p.settle(ReasonRestoreRefused)
	p.restore = rs
	return r.watchFetches(ctx, p)
}

func describeSource(src views.RestoreSource) string {
	if src.FromBackup() {
		return "ValkeyBackup " + strconv.Quote(src.Backup)
	}
	return "the backup at " + strconv.Quote(src.Path)
}

// loadRestore reads the source's manifest and checks it can be restored into this cluster;
// refusal says why not, in the user's terms.
func (r *Reconciler) loadRestore(ctx context.Context, p *pass, src views.RestoreSource) (rs *restoring, refusal string, err error) {
	storage, path := src.Storage, src.Path
	if src.FromBackup() {
		b := views.NewBackupObject()
		if err := r.client.Get(ctx, types.NamespacedName{Namespace: p.key.Namespace, Name: src.Backup}, b); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, "it does not exist in namespace " + p.key.Namespace, nil
			}
			return nil, "", err
		}
		v := views.Backup{U: b}
		st := v.Status()
		if st.Phase != views.BackupCompleted {
			phase := st.Phase
			if phase == "" {
				phase = views.BackupPending
			}
			return nil, "it is " + phase + ", not Completed", nil
		}
		storage, path = v.Spec().Storage, st.Path
	}
	if refusal := r.restorable(p); refusal != "" {
		return nil, refusal, nil
	}
	store, msg, err := backup.OpenStore(ctx, r.apiReader, p.key.Namespace, storage)
	if err != nil || msg != "" {
		return nil, msg, err
	}
	m, err := backup.LoadManifest(ctx, store, path)
	if err != nil {
		return nil, err.Error(), nil
	}
	rs = &restoring{storage: storage, manifest: m}
	for _, s := range m.Shards {
		if max, known := model.MaxRDBVersion(p.resolved.Version); known && s.RDBVersion > max {
			return nil, fmt.Sprintf("shard %d: its snapshot is RDB version %d (written by Valkey %s), newer than Valkey %s of image %s loads (%d)",
				s.Index, s.RDBVersion, s.ValkeyVersion, p.resolved.Version, p.resolved.Image, max), nil
		}
		ranges, err := model.ParseRanges(s.Slots)
		if err != nil {
			return nil, fmt.Sprintf("shard %d: the manifest's slots: %v", s.Index, err), nil
		}
		rs.layout = append(rs.layout, ranges)
	}
	if covered := countDistinct(rs.layout); covered != model.SlotCount {
		return nil, fmt.Sprintf("the manifest's shards hold %d distinct slots of %d (or give a slot twice)", covered, model.SlotCount), nil
	}
	return rs, "", nil
}

// restorable refuses what this operator cannot restore into: a cluster it has no image to
// fetch with. Every persistence mode is restorable: a server that keeps an AOF gets the
// snapshot as its AOF's base (render.KeepsAOF, snapshot.AOFLayout).
func (r *Reconciler) restorable(*pass) string {
	if r.opts.RestoreImage == "" {
		return "this operator was started without an image to fetch backups with (--restore-image)"
	}
	return ""
}

// countDistinct is how many slots the layout gives exactly once; a slot given twice makes
// it fall short of the total.
func countDistinct(layout [][]model.SlotRange) int {
	seen := make([]int, model.SlotCount)
	for _, ranges := range layout {
		for _, s := range model.ExpandSlots(ranges) {
			seen[s]++
		}
	}
	n := 0
	for _, c := range seen {
		if c == 1 {
			n++
		}
	}
	return n
}

// restoreFor is spec.restore of a node created for shard: the shard's snapshot if no node of
// the shard carries it yet (the shard's first node, its primary-to-be), nil otherwise and
// for a cluster not restoring.
func (p *pass) restoreFor(shard int, image string) *views.NodeRestore {
	if p.restore == nil || shard >= p.restore.shards() {
		return nil
	}
	if p.restoreGiven[shard] {
		return nil
	}
	for _, n := range p.nodes {
		if n.Shard() == shard && n.Spec().Restore != nil {
			return nil
		}
	}
	s := p.restore.manifest.Shards[shard]
	st := p.restore.storage
	return &views.NodeRestore{
		Endpoint: st.Endpoint, Bucket: st.Bucket, Region: st.Region,
		CredentialsSecret: st.CredentialsSecret.Name, CASecret: st.CASecret.Name,
		Object: s.Object, SHA256: s.SHA256, Bytes: s.Bytes, RDBVersion: s.RDBVersion, Keys: s.Keys,
		Slots: s.Slots, FetcherImage: image,
	}
}

// watchFetches reports each shard's fetch that failed, from its init container's exit: a
// refusal (exit 2: the object differs from the manifest, an RDB too new) is a RestoreFailed
// Warning with the fetcher's own message, and the cluster waits; any other failure (the
// store did not answer) is the same Warning, and the pod is deleted so that the next pass
// makes it again and the fetch is retried.
func (r *Reconciler) watchFetches(ctx context.Context, p *pass) *outcome {
	failed := false
	for _, n := range p.nodes {
		pod := p.pods[n.Name()]
		if n.Spec().Restore == nil || pod == nil {
			continue
		}
		term := fetchTerminated(pod)
		if term == nil || term.ExitCode == 0 {
			continue
		}
		failed = true
		msg := strings.TrimPrefix(strings.TrimSpace(term.Message), "restore-fetch: ")
		if msg == "" {
			msg = "exit code " + strconv.Itoa(int(term.ExitCode))
		}
		key := ReasonRestoreFailed + "/" + n.Name()
		if term.ExitCode == restoreFetchRefused {
			p.raiseAs(key, ReasonRestoreFailed, "RestoreFetch", fmt.Sprintf(
				"shard %d (node %s) cannot load its snapshot: %s; the cluster waits in Creating", n.Shard(), n.Name(), msg))
			continue
		}
		p.raiseAs(key, ReasonRestoreFailed, "RestoreFetch", fmt.Sprintf(
			"shard %d (node %s) could not fetch its snapshot: %s; retrying with a new pod", n.Shard(), n.Name(), msg))
		if pod.DeletionTimestamp == nil {
			if err := r.client.Delete(ctx, pod); err != nil && !apierrors.IsNotFound(err) {
				return done(ctrl.Result{}, err)
			}
		}
	}
	if failed {
		return done(ctrl.Result{RequeueAfter: r.opts.RecheckInterval}, nil)
	}
	for _, n := range p.nodes {
		if n.Spec().Restore != nil {
			p.settle(ReasonRestoreFailed + "/" + n.Name())
		}
	}
	return nil
}

// fetchTerminated is how the pod's restore-fetch container last ended, nil while it has not.
func fetchTerminated(pod *corev1.Pod) *corev1.ContainerStateTerminated {
	for _, s := range pod.Status.InitContainerStatuses {
		if s.Name != render.RestoreFetchContainer {
			continue
		}
		if s.State.Terminated != nil {
			return s.State.Terminated
		}
		return s.LastTerminationState.Terminated
	}
	return nil
}

// loadingShards names the restored primaries still loading their snapshot: forming waits for
// them (a loading server refuses the cluster commands Bootstrap sends).
func (p *pass) loadingShards() []string {
	if p.restore == nil || p.seen == nil || p.seen.snapshot == nil {
		return nil
	}
	var out []string
	for _, st := range p.seen.snapshot.Nodes {
		if st.Loading {
			out = append(out, st.Name)
		}
	}
	return out
}

// reportRestored records, once the restored cluster has formed, each shard's data as its
// primary holds it against what the backup recorded: a RestoreShardLoaded Event per shard.
func (r *Reconciler) reportRestored(p *pass) {
	if p.restore == nil || p.seen == nil || p.seen.snapshot == nil {
		return
	}
	for _, s := range p.restore.manifest.Shards {
		var st *model.NodeState
		for i := range p.seen.snapshot.Nodes {
			n := &p.seen.snapshot.Nodes[i]
			if n.Shard == s.Index && n.Role == model.RolePrimary && len(n.Slots) > 0 {
				st = n
			}
		}
		if st == nil {
			continue
		}
		// Each Event is about its shard's primary (related): Events of one reason and action
		// about the same objects are one series, which would keep only the first shard's.
		var related runtime.Object
		if n, err := p.node(st.Name); err == nil {
			related = n.U
		}
		r.event(p, related, ReasonRestoreShardLoaded, "Restore", "Shard %d restored on %s: %d keys loaded (the backup recorded %d), slots %s",
			s.Index, st.Name, st.Keys, s.Keys, model.FormatRanges(st.Slots))
	}
}
