// The transfer of a backup: shards streamed into their objects, then the manifest and Completed.

package backup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/gomomento/valkey-operator/reconciler/render"
	"github.com/gomomento/valkey-operator/reconciler/views"
	"github.com/gomomento/valkey-operator/valkeyops/snapshot"
)

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
