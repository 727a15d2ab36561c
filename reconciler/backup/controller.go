// Package backup is the ValkeyBackup controller (issue #25): it checks a backup's cluster and
// storage, chooses a source per shard, and streams each shard's snapshot into object storage
// in transfer goroutines of its own, so that no reconcile worker is held for the length of a
// transfer. The manifest is written last: a backup is complete only once it exists.
package backup

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"

	"github.com/gomomento/valkey-operator/objectstore"
	"github.com/gomomento/valkey-operator/reconciler/views"
	"github.com/gomomento/valkey-operator/valkeyops"
	"github.com/gomomento/valkey-operator/valkeyops/model"
)

// ControllerName names the controller (metrics, logs).
const ControllerName = "valkeybackup"

// Event reasons of a backup, on the ValkeyBackup.
const (
	ReasonStarted       = "BackupStarted"
	ReasonShardUploaded = "BackupShardUploaded"
	ReasonCompleted     = "BackupCompleted"
	ReasonFailed        = "BackupFailed"
	ReasonFromPrimary   = "BackupFromPrimary"
	// ReasonSourceSwitched: a shard's stream failed and is taken again from its next copy.
	ReasonSourceSwitched = "BackupSourceSwitched"
)

// Defaults of Options.
const (
	DefaultTransfers = 2
	// DefaultTimeout bounds a backup's Running phase (--backup-timeout).
	DefaultTimeout = 6 * time.Hour
	// DefaultProgressEvery is how often, at most, a running backup's status is written with
	// the bytes its shards have streamed so far (see progressDue).
	DefaultProgressEvery = 5 * time.Second
)

// Options tune the controller.
type Options struct {
	// Transfers bounds the shard transfers running at once in this operator (default 2).
	Transfers int
	// Recorder receives the backups' Events (nil = none).
	Recorder events.EventRecorder
	// Metrics receives each cluster's completed backups (nil = none).
	Metrics Metrics
	// Timeout fails a backup still Running this long after its status.startedAt, so it
	// holds across operator restarts (default DefaultTimeout).
	Timeout time.Duration
	// ProgressEvery spaces the status writes that show a running backup's bytes (default
	// DefaultProgressEvery).
	ProgressEvery time.Duration
}

// Metrics is what the controller reports: when a cluster's latest backup completed. Every
// Completed backup is reported when it completes and again whenever it is reconciled (an
// operator start reconciles them all), so the figure survives a restart; the receiver keeps
// the latest per cluster.
type Metrics interface {
	BackupCompleted(namespace, cluster string, at time.Time)
}

// Controller reconciles ValkeyBackups.
type Controller struct {
	client client.Client // cached reads, writes
	reader client.Reader // reads around the cache (user Secrets, a backup's latest status)
	opts   Options
	slots  chan struct{} // one token per running shard transfer

	mu      sync.Mutex
	running map[types.NamespacedName]context.CancelFunc
	// ctx is the manager's: transfers end with the operator.
	ctx context.Context
}

// Setup registers the controller and the backup scheduler with mgr; transfers run under ctx.
func Setup(ctx context.Context, mgr ctrl.Manager, opts Options, skipNameValidation bool) error {
	if opts.Transfers <= 0 {
		opts.Transfers = DefaultTransfers
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.ProgressEvery <= 0 {
		opts.ProgressEvery = DefaultProgressEvery
	}
	c := &Controller{
		client: mgr.GetClient(), reader: mgr.GetAPIReader(), opts: opts,
		slots: make(chan struct{}, opts.Transfers), running: map[types.NamespacedName]context.CancelFunc{}, ctx: ctx,
	}
	if err := ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		For(views.NewBackupObject()).
		WithOptions(controller.Options{MaxConcurrentReconciles: 2, SkipNameValidation: ptr.To(skipNameValidation)}).
		Complete(c); err != nil {
		return err
	}
	// The schedules (scheduler.go): their own controller, keyed by cluster, on c's clients.
	return setupScheduler(mgr, c, skipNameValidation)
}

// Reconcile starts a Pending backup, resumes a Running one this process is not transferring
// (the operator restarted), and cancels the transfer of a backup that was deleted.
func (c *Controller) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	u := views.NewBackupObject()
	if err := c.client.Get(ctx, req.NamespacedName, u); err != nil {
		if apierrors.IsNotFound(err) {
			c.cancel(req.NamespacedName)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	b := views.Backup{U: u}
	if u.GetDeletionTimestamp() != nil {
		c.cancel(req.NamespacedName)
		return ctrl.Result{}, nil
	}
	switch b.Status().Phase {
	case views.BackupCompleted:
		c.reportCompleted(ctx, b)
		return ctrl.Result{}, nil
	case views.BackupFailed:
		return ctrl.Result{}, nil
	case views.BackupRunning:
		if c.isRunning(req.NamespacedName) {
			return ctrl.Result{}, nil
		}
	}
	return ctrl.Result{}, c.start(ctx, b)
}

// job is one backup's transfer, planned.
type job struct {
	key     types.NamespacedName
	cluster string
	store   *objectstore.Store
	path    string
	creds   valkeyops.Credentials // the backup user's
	sources []shardSource

	mu     sync.Mutex         // guards status and lastWrite: the shards' goroutines and the progress writer share them
	status views.BackupStatus // as last written
	// lastWrite is when the transfer last wrote the status (progressDue spaces writes from it).
	lastWrite time.Time
	// streamed counts, per shard index, the bytes the current attempt has streamed so far.
	streamed map[int]*atomic.Int64
}

// errTimedOut is the cause of a transfer's context ending at the backup's deadline.
var errTimedOut = errors.New("backup timed out")

// deadline is when a backup started at startedAt (RFC 3339) must be done.
func deadline(startedAt string, timeout time.Duration) (time.Time, error) {
	t, err := time.Parse(time.RFC3339, startedAt)
	if err != nil {
		return time.Time{}, fmt.Errorf("status.startedAt %q: %w", startedAt, err)
	}
	return t.Add(timeout), nil
}

// timeoutMessage is a timed-out backup's status message.
func timeoutMessage(timeout time.Duration, startedAt string) string {
	return fmt.Sprintf("the backup was still running %s after it started at %s (the operator's --backup-timeout): its transfers were cancelled and its incomplete uploads aborted", timeout, startedAt)
}

// start checks what a backup needs before any server is touched, plans its shards, records
// Running and hands the transfer to a goroutine. A problem of the user's input fails the
// backup with a message saying what to fix; an API error is returned for a retry.
func (c *Controller) start(ctx context.Context, b views.Backup) error {
	key := types.NamespacedName{Namespace: b.U.GetNamespace(), Name: b.U.GetName()}
	spec, st := b.Spec(), b.Status()
	cluster := views.Cluster{U: views.NewClusterObject()}
	if err := c.client.Get(ctx, types.NamespacedName{Namespace: key.Namespace, Name: spec.Cluster}, cluster.U); err != nil {
		if apierrors.IsNotFound(err) {
			return c.fail(ctx, b, fmt.Sprintf("ValkeyCluster %q not found in namespace %s", spec.Cluster, key.Namespace))
		}
		return err
	}
	if state := cluster.Status().State; state != views.StateActive && st.Phase != views.BackupRunning {
		return c.fail(ctx, b, fmt.Sprintf("cluster %s is %s, not Active: a backup starts only from an Active cluster", spec.Cluster, orNone(state)))
	}
	store, msg, err := c.openStore(ctx, key.Namespace, spec.Storage)
	if err != nil || msg != "" {
		if msg != "" {
			return c.fail(ctx, b, msg)
		}
		return err
	}
	checkCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err = store.Check(checkCtx)
	cancel()
	if err != nil {
		return c.fail(ctx, b, "object storage: "+err.Error())
	}
	path := strings.Join([]string{key.Namespace, spec.Cluster, key.Name}, "/")
	var due time.Time
	if st.Phase == views.BackupRunning {
		// Resumed after a restart: the timeout counts from when the backup first started.
		if due, err = deadline(st.StartedAt, c.opts.Timeout); err == nil && !time.Now().Before(due) {
			// The operator that ran it was cut off: parts it had in flight may still land.
			abortCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
			_ = store.AbortIncompleteSettled(abortCtx, store.Key(path)+"/", abortQuiet)
			cancel()
			return c.fail(ctx, b, timeoutMessage(c.opts.Timeout, st.StartedAt))
		}
	}
	opCreds, msg, err := c.operatorCredentials(ctx, cluster)
	if err != nil || msg != "" {
		if msg != "" {
			return c.fail(ctx, b, msg)
		}
		return err
	}
	members, err := c.members(ctx, key.Namespace, spec.Cluster)
	if err != nil {
		return err
	}
	sources, err := observeSources(ctx, opCreds, members)
	if err != nil {
		return c.fail(ctx, b, "choosing the shards' sources: "+err.Error())
	}

	next := views.BackupStatus{Phase: views.BackupRunning, StartedAt: st.StartedAt, Path: path}
	if _, err := time.Parse(time.RFC3339, next.StartedAt); err != nil {
		next.StartedAt = time.Now().UTC().Format(time.RFC3339) // Pending (none yet)
	}
	done := map[int]views.BackupShard{}
	for _, s := range st.Shards {
		if s.SHA256 != "" {
			done[s.Index] = s // uploaded before a restart: kept, checked before the manifest
		}
	}
	for _, src := range sources {
		if d, ok := done[src.Index]; ok {
			next.Shards = append(next.Shards, d)
			continue
		}
		next.Shards = append(next.Shards, views.BackupShard{
			Index: src.Index, Node: src.Source().Name, Slots: rangeStrings(src.Slots),
			Object: store.Key(path, fmt.Sprintf("shard-%d.rdb", src.Index)),
		})
	}
	next.Message = progressMessage(0, len(sources))
	if len(done) > 0 {
		next.Message = fmt.Sprintf("resumed: %d of %d shards uploaded", len(done), len(sources))
	}
	if err := c.writeStatus(ctx, b, next); err != nil {
		return err
	}
	c.event(b, corev1.EventTypeNormal, ReasonStarted, "Start", "backing up %d shards of %s to %s", len(sources), spec.Cluster, path)
	for _, src := range sources {
		if src.FromPrimary {
			c.event(b, corev1.EventTypeNormal, ReasonFromPrimary, "ChooseSource", "shard %d has no in-sync replica: its primary %s forks for the snapshot", src.Index, src.Source().Name)
		}
	}
	creds := opCreds
	creds.Username, creds.Password = model.BackupUser, model.BackupPassword(opCreds.Password)
	var todo []shardSource
	for _, src := range sources {
		if _, ok := done[src.Index]; !ok {
			todo = append(todo, src)
		}
	}
	j := &job{key: key, cluster: spec.Cluster, store: store, path: path, creds: creds, sources: todo, status: next, lastWrite: time.Now(), streamed: map[int]*atomic.Int64{}}
	for _, src := range todo {
		j.streamed[src.Index] = &atomic.Int64{}
	}
	if due, err = deadline(next.StartedAt, c.opts.Timeout); err != nil {
		return err // written by this operator a moment ago: cannot happen
	}
	runCtx, stop := context.WithDeadlineCause(c.ctx, due, errTimedOut)
	c.mu.Lock()
	c.running[key] = stop
	c.mu.Unlock()
	go c.transfer(runCtx, j)
	return nil
}

func (c *Controller) isRunning(key types.NamespacedName) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.running[key]
	return ok
}

func (c *Controller) cancel(key types.NamespacedName) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if stop, ok := c.running[key]; ok {
		stop()
	}
}

func (c *Controller) forget(key types.NamespacedName) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if stop, ok := c.running[key]; ok {
		stop()
		delete(c.running, key)
	}
}

func rangeStrings(rs []model.SlotRange) []string {
	out := make([]string, 0, len(rs))
	for _, r := range rs {
		out = append(out, r.String())
	}
	return out
}

func orNone(s string) string {
	if s == "" {
		return "not yet reconciled"
	}
	return s
}
