// Package backup is the ValkeyBackup controller (issue #25): it checks a backup's cluster and
// storage, chooses a source per shard, and streams each shard's snapshot into object storage
// in transfer goroutines of its own, so that no reconcile worker is held for the length of a
// transfer. The manifest is written last: a backup is complete only once it exists.
package backup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"

	"github.com/gomomento/valkey-operator/objectstore"
	"github.com/gomomento/valkey-operator/reconciler/render"
	"github.com/gomomento/valkey-operator/reconciler/tlscheck"
	"github.com/gomomento/valkey-operator/reconciler/views"
	"github.com/gomomento/valkey-operator/valkeyops"
	"github.com/gomomento/valkey-operator/valkeyops/model"
	"github.com/gomomento/valkey-operator/valkeyops/snapshot"
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
)

// Options tune the controller.
type Options struct {
	// Transfers bounds the shard transfers running at once in this operator (default 2).
	Transfers int
	// Recorder receives the backups' Events (nil = none).
	Recorder events.EventRecorder
	// Metrics receives each cluster's completed backups (nil = none).
	Metrics Metrics
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

// Setup registers the controller with mgr; transfers run under ctx.
func Setup(ctx context.Context, mgr ctrl.Manager, opts Options, skipNameValidation bool) error {
	if opts.Transfers <= 0 {
		opts.Transfers = 2
	}
	c := &Controller{
		client: mgr.GetClient(), reader: mgr.GetAPIReader(), opts: opts,
		slots: make(chan struct{}, opts.Transfers), running: map[types.NamespacedName]context.CancelFunc{}, ctx: ctx,
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		For(views.NewBackupObject()).
		WithOptions(controller.Options{MaxConcurrentReconciles: 2, SkipNameValidation: ptr.To(skipNameValidation)}).
		Complete(c)
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
	status  views.BackupStatus
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

	path := strings.Join([]string{key.Namespace, spec.Cluster, key.Name}, "/")
	next := views.BackupStatus{Phase: views.BackupRunning, StartedAt: st.StartedAt, Path: path}
	if next.StartedAt == "" {
		next.StartedAt = time.Now().UTC().Format(time.RFC3339)
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
			Index: src.Index, Node: src.Source.Name, Slots: rangeStrings(src.Slots),
			Object: store.Key(path, fmt.Sprintf("shard-%d.rdb", src.Index)),
		})
	}
	next.Message = fmt.Sprintf("0 of %d shards uploaded", len(sources))
	if len(done) > 0 {
		next.Message = fmt.Sprintf("resumed: %d of %d shards uploaded", len(done), len(sources))
	}
	if err := c.writeStatus(ctx, b, next); err != nil {
		return err
	}
	c.event(b, corev1.EventTypeNormal, ReasonStarted, "Start", "backing up %d shards of %s to %s", len(sources), spec.Cluster, path)
	for _, src := range sources {
		if src.FromPrimary {
			c.event(b, corev1.EventTypeNormal, ReasonFromPrimary, "ChooseSource", "shard %d has no in-sync replica: its primary %s forks for the snapshot", src.Index, src.Source.Name)
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
	j := &job{key: key, cluster: spec.Cluster, store: store, path: path, creds: creds, sources: todo, status: next}
	runCtx, stop := context.WithCancel(c.ctx)
	c.mu.Lock()
	c.running[key] = stop
	c.mu.Unlock()
	go c.transfer(runCtx, j)
	return nil
}

// transfer streams every planned shard (at most Options.Transfers at once across the
// operator), records each as it completes, then writes the manifest and Completed.
func (c *Controller) transfer(ctx context.Context, j *job) {
	log := ctrl.Log.WithName(ControllerName).WithValues("backup", j.key)
	defer c.forget(j.key)
	// Uploads a killed operator left open under this backup are aborted first.
	if err := j.store.AbortIncomplete(ctx, j.path+"/"); err != nil {
		log.Info("aborting unfinished uploads", "error", err.Error())
	}
	var (
		mu       sync.Mutex
		firstErr error
		wg       sync.WaitGroup
	)
	for _, src := range j.sources {
		wg.Add(1)
		go func(src shardSource) {
			defer wg.Done()
			select {
			case c.slots <- struct{}{}:
				defer func() { <-c.slots }()
			case <-ctx.Done():
				return
			}
			shard, err := c.transferShard(ctx, j, src)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if firstErr == nil {
					firstErr = err
				}
				return
			}
			c.recordShard(ctx, j, shard, log)
		}(src)
	}
	wg.Wait()
	if ctx.Err() != nil {
		// Deleted, or the operator stopping: nothing is named complete. A deletion aborts
		// the open uploads; a stop leaves them to the next leader, which aborts them first.
		abortCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = j.store.AbortIncomplete(abortCtx, j.path+"/")
		return
	}
	if firstErr != nil {
		_ = j.store.AbortIncomplete(ctx, j.path+"/")
		c.failLatest(ctx, j, firstErr.Error(), log)
		return
	}
	c.complete(ctx, j, log)
}

// transferShard streams one shard's snapshot from its source straight into its object.
func (c *Controller) transferShard(ctx context.Context, j *job, src shardSource) (views.BackupShard, error) {
	object := j.store.Key(j.path, fmt.Sprintf("shard-%d.rdb", src.Index))
	pr, pw := io.Pipe()
	type streamed struct {
		res snapshot.Result
		err error
	}
	out := make(chan streamed, 1)
	go func() {
		res, err := snapshot.Stream(ctx, src.Source.node(render.ClientPort), pw, snapshot.Options{Credentials: j.creds})
		pw.CloseWithError(errOr(err, io.EOF))
		out <- streamed{res, err}
	}()
	stored, putErr := j.store.Put(ctx, object, pr)
	pr.CloseWithError(errOr(putErr, io.ErrClosedPipe))
	s := <-out
	switch {
	// A failed upload closes the pipe under the stream, which then fails with the upload's
	// error: the upload is the cause.
	case putErr != nil && (s.err == nil || errors.Is(s.err, putErr)):
		return views.BackupShard{}, fmt.Errorf("shard %d: upload: %w", src.Index, putErr)
	case s.err != nil:
		return views.BackupShard{}, fmt.Errorf("shard %d: snapshot from %s: %w", src.Index, src.Source.Name, s.err)
	case putErr != nil:
		return views.BackupShard{}, fmt.Errorf("shard %d: upload: %w", src.Index, putErr)
	case stored != s.res.Bytes:
		return views.BackupShard{}, fmt.Errorf("shard %d: %d bytes streamed but %d stored", src.Index, s.res.Bytes, stored)
	}
	return views.BackupShard{
		Index: src.Index, Object: object, Bytes: s.res.Bytes, SHA256: s.res.SHA256, Keys: s.res.Header.Keys,
		Slots: rangeStrings(src.Slots), RDBVersion: s.res.Header.Version, ValkeyVersion: s.res.Header.ServerVersion(), Node: src.Source.Name,
	}, nil
}

// recordShard writes one uploaded shard into the status (the caller holds the job's lock).
func (c *Controller) recordShard(ctx context.Context, j *job, shard views.BackupShard, log logr.Logger) {
	uploaded := 0
	for i := range j.status.Shards {
		if j.status.Shards[i].Index == shard.Index {
			j.status.Shards[i] = shard
		}
		if j.status.Shards[i].SHA256 != "" {
			uploaded++
		}
	}
	j.status.Bytes = totalBytes(j.status.Shards)
	j.status.Message = fmt.Sprintf("%d of %d shards uploaded", uploaded, len(j.status.Shards))
	if err := c.patchLatest(ctx, j.key, j.status); err != nil {
		log.Info("recording an uploaded shard", "shard", shard.Index, "error", err.Error())
	}
	c.eventOn(ctx, j.key, corev1.EventTypeNormal, ReasonShardUploaded, fmt.Sprintf("Upload-%d", shard.Index),
		"shard %d: %d bytes, %d keys, from %s", shard.Index, shard.Bytes, shard.Keys, shard.Node)
}

// complete checks every object's size, writes the manifest, then records Completed.
func (c *Controller) complete(ctx context.Context, j *job, log logr.Logger) {
	for _, s := range j.status.Shards {
		size, err := j.store.Stat(ctx, s.Object)
		if err == nil && size != s.Bytes {
			err = fmt.Errorf("object %s holds %d bytes, %d were uploaded", s.Object, size, s.Bytes)
		}
		if err != nil {
			c.failLatest(ctx, j, "checking shard "+fmt.Sprint(s.Index)+": "+err.Error(), log)
			return
		}
	}
	now := time.Now().UTC().Format(time.RFC3339)
	m := Manifest{FormatVersion: ManifestFormat, Cluster: j.cluster, Namespace: j.key.Namespace, Backup: j.key.Name,
		CreatedAt: now, StartedAt: j.status.StartedAt, CompletedAt: now, Shards: j.status.Shards}
	body, err := m.Encode()
	if err == nil {
		err = j.store.PutSmall(ctx, j.store.Key(j.path, ManifestName), body, "application/json")
	}
	if err != nil {
		c.failLatest(ctx, j, "writing the manifest: "+err.Error(), log)
		return
	}
	j.status.Phase, j.status.CompletedAt = views.BackupCompleted, now
	j.status.Message = fmt.Sprintf("%d shards, %d bytes, manifest written", len(j.status.Shards), j.status.Bytes)
	if err := c.patchLatest(ctx, j.key, j.status); err != nil {
		log.Info("recording completion", "error", err.Error())
		return
	}
	c.eventOn(ctx, j.key, corev1.EventTypeNormal, ReasonCompleted, "Complete", "%d shards, %d bytes, in %s/%s", len(j.status.Shards), j.status.Bytes, j.path, ManifestName)
}

// failLatest records Failed with msg on the backup as it is now.
func (c *Controller) failLatest(ctx context.Context, j *job, msg string, log logr.Logger) {
	j.status.Phase, j.status.Message = views.BackupFailed, msg
	if err := c.patchLatest(ctx, j.key, j.status); err != nil {
		log.Info("recording failure", "error", err.Error())
	}
	c.eventOn(ctx, j.key, corev1.EventTypeWarning, ReasonFailed, "Fail", "%s", msg)
}

// fail records Failed with msg, before any transfer started.
func (c *Controller) fail(ctx context.Context, b views.Backup, msg string) error {
	st := b.Status()
	st.Phase, st.Message = views.BackupFailed, msg
	if err := c.writeStatus(ctx, b, st); err != nil {
		return err
	}
	c.event(b, corev1.EventTypeWarning, ReasonFailed, "Fail", "%s", msg)
	return nil
}

// writeStatus patches b's status to st, failing on a conflict (the backup changed: a stale
// cache or another writer), so that two passes never both start one backup.
func (c *Controller) writeStatus(ctx context.Context, b views.Backup, st views.BackupStatus) error {
	before := b.U.DeepCopy()
	b.SetStatus(st)
	return c.client.Status().Patch(ctx, b.U, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))
}

// patchLatest writes st onto the backup as the API server has it now (a transfer's status
// writes come long after the pass that started it).
func (c *Controller) patchLatest(ctx context.Context, key types.NamespacedName, st views.BackupStatus) error {
	for attempt := 0; ; attempt++ {
		u := views.NewBackupObject()
		if err := c.reader.Get(ctx, key, u); err != nil {
			return err
		}
		err := c.writeStatus(ctx, views.Backup{U: u}, st)
		if err == nil || !apierrors.IsConflict(err) || attempt >= 4 {
			return err
		}
	}
}

// openStore builds the object store client from a storage spec and its Secrets. A missing
// Secret or key is the user's to fix (msg); an API failure is err.
func (c *Controller) openStore(ctx context.Context, namespace string, s views.BackupStorage) (*objectstore.Store, string, error) {
	creds, msg, err := c.secretKeys(ctx, namespace, s.CredentialsSecret.Name, "accessKey", "secretKey")
	if err != nil || msg != "" {
		return nil, msg, err
	}
	loc := objectstore.Location{Endpoint: s.Endpoint, Bucket: s.Bucket, Prefix: s.Prefix, Region: s.Region,
		AccessKey: string(creds["accessKey"]), SecretKey: string(creds["secretKey"])}
	if s.CASecret.Name != "" {
		ca, msg, err := c.secretKeys(ctx, namespace, s.CASecret.Name, "ca.crt")
		if err != nil || msg != "" {
			return nil, msg, err
		}
		loc.CA = ca["ca.crt"]
	}
	store, err := objectstore.Open(loc)
	if err != nil {
		return nil, "object storage: " + err.Error(), nil
	}
	return store, "", nil
}

// secretKeys reads keys of a user's Secret around the cache (the operator caches only its
// own Secrets).
func (c *Controller) secretKeys(ctx context.Context, namespace, name string, keys ...string) (map[string][]byte, string, error) {
	s := &corev1.Secret{}
	if err := c.reader.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, s); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Sprintf("Secret %q not found in namespace %s", name, namespace), nil
		}
		return nil, "", err
	}
	for _, k := range keys {
		if len(s.Data[k]) == 0 {
			return nil, fmt.Sprintf("Secret %q has no key %q", name, k), nil
		}
	}
	return s.Data, "", nil
}

// operatorCredentials is how the operator logs in to the cluster's servers now: the
// password they were last moved onto, and the cluster's TLS when it has TLS.
func (c *Controller) operatorCredentials(ctx context.Context, cluster views.Cluster) (valkeyops.Credentials, string, error) {
	ns, name := cluster.U.GetNamespace(), cluster.U.GetName()
	s := &corev1.Secret{}
	err := c.client.Get(ctx, types.NamespacedName{Namespace: ns, Name: render.AppliedAuthSecretName(name)}, s)
	if apierrors.IsNotFound(err) {
		err = c.reader.Get(ctx, types.NamespacedName{Namespace: ns, Name: render.AppliedAuthSecretName(name)}, s)
	}
	if err != nil {
		if apierrors.IsNotFound(err) {
			return valkeyops.Credentials{}, "cluster " + name + " has no recorded operator login yet", nil
		}
		return valkeyops.Credentials{}, "", err
	}
	pw := string(s.Data[render.AuthOperatorPasswordKey])
	if pw == "" {
		return valkeyops.Credentials{}, "cluster " + name + " has no recorded operator login yet", nil
	}
	creds := valkeyops.Credentials{Username: model.OperatorUser, Password: pw}
	if ref := cluster.TLSSecretRef(); ref != "" {
		data, msg, err := c.secretKeys(ctx, ns, ref, tlscheck.KeyCA, tlscheck.KeyCert, tlscheck.KeyKey)
		if err != nil || msg != "" {
			return valkeyops.Credentials{}, msg, err
		}
		creds.CA, creds.Cert, creds.Key = data[tlscheck.KeyCA], data[tlscheck.KeyCert], data[tlscheck.KeyKey]
		creds.ServerName = tlscheck.ServiceName(name, ns)
	}
	return creds, "", nil
}

// members lists the cluster's Active ValkeyNodes that have a pod address.
func (c *Controller) members(ctx context.Context, namespace, cluster string) ([]member, error) {
	l := views.NewNodeListObject()
	if err := c.client.List(ctx, l, client.InNamespace(namespace), client.MatchingLabels{render.LabelCluster: cluster}); err != nil {
		return nil, err
	}
	var out []member
	for i := range l.Items {
		n := views.Node{U: &l.Items[i]}
		st := n.Status()
		if st.Lifecycle == views.LifecycleActive && st.PodIP != "" {
			out = append(out, member{Name: n.Name(), Shard: n.Shard(), PodIP: st.PodIP})
		}
	}
	return out, nil
}

// observeSources reads the cluster's servers once, as the operator, and chooses the sources.
func observeSources(ctx context.Context, creds valkeyops.Credentials, members []member) ([]shardSource, error) {
	if len(members) == 0 {
		return nil, errors.New("the cluster has no Active member")
	}
	adm, err := valkeyops.NewAdmin(valkeyops.Options{Credentials: creds})
	if err != nil {
		return nil, err
	}
	defer adm.Close()
	var nodes []model.Node
	for _, m := range members {
		nodes = append(nodes, m.node(render.ClientPort))
	}
	obsCtx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	snap, err := adm.Observe(obsCtx, nodes)
	if err != nil {
		return nil, err
	}
	return chooseSources(members, snap)
}

// reportCompleted hands a Completed backup of a cluster that still exists to Metrics (a
// deleted cluster's series are gone, and its backups must not bring them back).
func (c *Controller) reportCompleted(ctx context.Context, b views.Backup) {
	if c.opts.Metrics == nil {
		return
	}
	at, err := time.Parse(time.RFC3339, b.Status().CompletedAt)
	if err != nil {
		return
	}
	cluster := b.Spec().Cluster
	if err := c.client.Get(ctx, types.NamespacedName{Namespace: b.U.GetNamespace(), Name: cluster}, views.NewClusterObject()); err != nil {
		return
	}
	c.opts.Metrics.BackupCompleted(b.U.GetNamespace(), cluster, at)
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

func (c *Controller) event(b views.Backup, eventType, reason, action, format string, args ...any) {
	if c.opts.Recorder != nil {
		c.opts.Recorder.Eventf(b.U, nil, eventType, reason, action, format, args...)
	}
}

// eventOn records an Event on the backup as it is now (a transfer outlives its pass's copy).
func (c *Controller) eventOn(ctx context.Context, key types.NamespacedName, eventType, reason, action, format string, args ...any) {
	u := views.NewBackupObject()
	if err := c.reader.Get(ctx, key, u); err != nil {
		return
	}
	c.event(views.Backup{U: u}, eventType, reason, action, format, args...)
}

func rangeStrings(rs []model.SlotRange) []string {
	out := make([]string, 0, len(rs))
	for _, r := range rs {
		out = append(out, r.String())
	}
	return out
}

func totalBytes(shards []views.BackupShard) int64 {
	var n int64
	for _, s := range shards {
		n += s.Bytes
	}
	return n
}

func errOr(err, fallback error) error {
	if err != nil {
		return err
	}
	return fallback
}

func orNone(s string) string {
	if s == "" {
		return "not yet reconciled"
	}
	return s
}
