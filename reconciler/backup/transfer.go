// The transfer of a backup: shards streamed into their objects, then the manifest and Completed.

package backup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/gomomento/valkey-operator/reconciler/render"
	"github.com/gomomento/valkey-operator/reconciler/views"
	"github.com/gomomento/valkey-operator/valkeyops/snapshot"
)

// abortQuiet is how long a backup's cut transfer must show no open upload before it is
// failed: a part still in flight when the transfer was cut can reopen its upload after the
// abort (objectstore.AbortIncompleteSettled).
const abortQuiet = 2 * time.Second

// transfer streams every planned shard (at most Options.Transfers at once across the
// operator), records each as it completes while a progress writer shows the bytes streamed so
// far, then writes the manifest and Completed. ctx ends when the backup is deleted, when the
// operator stops, or at the backup's deadline (errTimedOut), which fails it.
func (c *Controller) transfer(ctx context.Context, j *job) {
	log := ctrl.Log.WithName(ControllerName).WithValues("backup", j.key)
	defer c.forget(j.key)
	// Uploads a killed operator left open under this backup are aborted first.
	if err := j.store.AbortIncomplete(ctx, j.store.Key(j.path)+"/"); err != nil {
		log.Info("aborting unfinished uploads", "error", err.Error())
	}
	// The first shard that fails for good stops the others: the backup has failed.
	shardsCtx, stopShards := context.WithCancel(ctx)
	defer stopShards()
	progressDone := make(chan struct{})
	go func() {
		defer close(progressDone)
		c.reportProgress(shardsCtx, j, log)
	}()
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
			case <-shardsCtx.Done():
				return
			}
			shard, err := c.transferShard(shardsCtx, j, src, log)
			if err != nil {
				mu.Lock()
				if firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
				stopShards()
				return
			}
			c.recordShard(ctx, j, shard, log)
		}(src)
	}
	wg.Wait()
	stopShards()
	<-progressDone // no progress write may land after the final one
	if ctx.Err() != nil {
		// Deleted, the operator stopping, or timed out: nothing is named complete. A deletion
		// or a timeout aborts the open uploads; a stop leaves them to the next leader, which
		// aborts them first.
		endCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = j.store.AbortIncompleteSettled(endCtx, j.store.Key(j.path)+"/", abortQuiet)
		if errors.Is(context.Cause(ctx), errTimedOut) {
			c.failLatest(endCtx, j, timeoutMessage(c.opts.Timeout, j.status.StartedAt), log)
		}
		return
	}
	if firstErr != nil {
		_ = j.store.AbortIncompleteSettled(ctx, j.store.Key(j.path)+"/", abortQuiet)
		c.failLatest(ctx, j, firstErr.Error(), log)
		return
	}
	c.complete(ctx, j, log)
}

// sourceError is a failed stream whose cause is its source (died, lost its primary, reset
// the connection, refused the snapshot), so another copy of the shard may well succeed.
// A failed upload is not one: every copy would meet the same store.
type sourceError struct{ err error }

func (e *sourceError) Error() string { return e.err.Error() }
func (e *sourceError) Unwrap() error { return e.err }

// transferShard streams one shard from its candidates in order until one succeeds: a stream
// that fails because of its source is taken again from the next copy (an Event names the
// switch). It fails when the upload fails, or when every copy failed.
func (c *Controller) transferShard(ctx context.Context, j *job, src shardSource, log logr.Logger) (views.BackupShard, error) {
	return tryCopies(ctx, src,
		func(from member) (views.BackupShard, error) { return c.streamShard(ctx, j, src, from) },
		func(attempt int, from member, why error) { c.switchSource(ctx, j, src, from, attempt, why, log) })
}

// tryCopies runs stream on src's candidates in order, calling switched before each one after
// the first, until a stream succeeds or fails for a reason another copy cannot help with
// (anything but a sourceError, or ctx ended). When every copy failed, the error names how
// many were tried and wraps the last failure.
func tryCopies(ctx context.Context, src shardSource, stream func(member) (views.BackupShard, error), switched func(attempt int, from member, why error)) (views.BackupShard, error) {
	var last error
	for i, from := range src.Candidates {
		if i > 0 {
			switched(i, from, last)
		}
		shard, err := stream(from)
		var bySource *sourceError
		if err == nil || !errors.As(err, &bySource) || ctx.Err() != nil {
			return shard, err
		}
		last = err
	}
	if len(src.Candidates) == 1 {
		return views.BackupShard{}, last
	}
	return views.BackupShard{}, fmt.Errorf("shard %d: every copy failed (%d tried); the last: %w", src.Index, len(src.Candidates), last)
}

// switchSource records that shard src is streamed again, from its attempt-th candidate from,
// after its previous source failed with why.
func (c *Controller) switchSource(ctx context.Context, j *job, src shardSource, from member, attempt int, why error, log logr.Logger) {
	j.streamed[src.Index].Store(0)
	j.mu.Lock()
	defer j.mu.Unlock()
	for i := range j.status.Shards {
		if s := &j.status.Shards[i]; s.Index == src.Index {
			s.Node, s.Bytes = from.Name, 0
		}
	}
	j.status.Bytes = totalBytes(j.status.Shards)
	j.lastWrite = time.Now()
	b, err := c.patchLatest(ctx, j.key, j.status)
	if err != nil {
		log.Info("recording a shard's new source", "shard", src.Index, "error", err.Error())
	}
	role := "in-sync replica"
	if attempt == len(src.Candidates)-1 {
		role = "primary, which forks for it"
	}
	c.event(b, corev1.EventTypeWarning, ReasonSourceSwitched, fmt.Sprintf("Switch-%d", src.Index),
		"%v; streaming shard %d again from %s (its %s; copy %d of %d)", why, src.Index, from.Name, role, attempt+1, len(src.Candidates))
}

// streamShard streams one shard's snapshot from one member straight into its object,
// counting the bytes as they go for the progress writer.
func (c *Controller) streamShard(ctx context.Context, j *job, src shardSource, from member) (views.BackupShard, error) {
	object := j.store.Key(j.path, fmt.Sprintf("shard-%d.rdb", src.Index))
	counter := j.streamed[src.Index]
	counter.Store(0)
	pr, pw := io.Pipe()
	type streamed struct {
		res snapshot.Result
		err error
	}
	out := make(chan streamed, 1)
	go func() {
		res, err := snapshot.Stream(ctx, from.node(render.ClientPort), &countingWriter{w: pw, n: counter}, snapshot.Options{Credentials: j.creds})
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
		return views.BackupShard{}, &sourceError{fmt.Errorf("shard %d: snapshot from %s: %w", src.Index, from.Name, s.err)}
	case putErr != nil:
		return views.BackupShard{}, fmt.Errorf("shard %d: upload: %w", src.Index, putErr)
	case stored != s.res.Bytes:
		return views.BackupShard{}, fmt.Errorf("shard %d: %d bytes streamed but %d stored", src.Index, s.res.Bytes, stored)
	}
	return views.BackupShard{
		Index: src.Index, Object: object, Bytes: s.res.Bytes, SHA256: s.res.SHA256, Keys: s.res.Header.Keys,
		Slots: rangeStrings(src.Slots), RDBVersion: s.res.Header.Version, ValkeyVersion: s.res.Header.ServerVersion(), Node: from.Name,
	}, nil
}

// countingWriter adds what it writes to n, which the progress writer reads.
type countingWriter struct {
	w io.Writer
	n *atomic.Int64
}

func (w *countingWriter) Write(p []byte) (int, error) {
	k, err := w.w.Write(p)
	w.n.Add(int64(k))
	return k, err
}

// recordShard writes one uploaded shard into the status.
func (c *Controller) recordShard(ctx context.Context, j *job, shard views.BackupShard, log logr.Logger) {
	j.mu.Lock()
	defer j.mu.Unlock()
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
	j.status.Message = progressMessage(uploaded, len(j.status.Shards))
	j.lastWrite = time.Now()
	b, err := c.patchLatest(ctx, j.key, j.status)
	if err != nil {
		log.Info("recording an uploaded shard", "shard", shard.Index, "error", err.Error())
	}
	c.event(b, corev1.EventTypeNormal, ReasonShardUploaded, fmt.Sprintf("Upload-%d", shard.Index),
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
	b, err := c.patchLatest(ctx, j.key, j.status)
	if err != nil {
		log.Info("recording completion", "error", err.Error())
		return
	}
	c.event(b, corev1.EventTypeNormal, ReasonCompleted, "Complete", "%d shards, %d bytes, in %s/%s", len(j.status.Shards), j.status.Bytes, j.path, ManifestName)
}

// failLatest records Failed with msg on the backup as it is now.
func (c *Controller) failLatest(ctx context.Context, j *job, msg string, log logr.Logger) {
	j.status.Phase, j.status.Message = views.BackupFailed, msg
	b, err := c.patchLatest(ctx, j.key, j.status)
	if err != nil {
		log.Info("recording failure", "error", err.Error())
	}
	c.event(b, corev1.EventTypeWarning, ReasonFailed, "Fail", "%s", msg)
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
