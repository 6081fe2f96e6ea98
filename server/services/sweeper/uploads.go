package sweeper

import (
	"context"
	"time"

	"github.com/worker-gateway/gateway/server/objectstore"
)

// orphanSweepInterval is how often a replica looks for orphaned objects.
const orphanSweepInterval = 10 * time.Minute

// sweepUploads expires upload sessions past their expiry and deletes their
// objects, and now and then deletes orphaned objects: ones no open or
// committed session names (a crash between storing and recording, a
// failed commit).
func (sw *Sweeper) sweepUploads(ctx context.Context) {
	backend := sw.cfg.Uploads
	if backend == nil {
		return
	}
	keys, err := sw.store.ExpireUploads(ctx, sw.cfg.Batch)
	if err != nil {
		if ctx.Err() == nil {
			sw.logger.Warn("upload sweep failed", "error", err.Error())
		}
		return
	}
	for _, k := range keys {
		if err := backend.Delete(ctx, k); err != nil {
			sw.logger.Warn("delete expired upload", "error", err.Error())
		}
	}
	if len(keys) > 0 {
		sw.logger.Info("upload sweep", "expired_sessions", len(keys))
	}
	if time.Since(sw.lastOrphanSweep) < orphanSweepInterval {
		return
	}
	sw.lastOrphanSweep = time.Now()
	// Temp files of uploads that died mid-stream (fs only); no upload
	// outlives its session, so twice the session lifetime is safe.
	if tmp, ok := backend.(interface {
		RemoveStaleTemp(context.Context, time.Duration) (int, error)
	}); ok {
		if _, err := tmp.RemoveStaleTemp(ctx, 2*sw.cfg.UploadSessionTTL); err != nil {
			sw.logger.Warn("stale temp sweep failed", "error", err.Error())
		}
	}
	if n, err := sw.sweepOrphans(ctx, backend); err != nil {
		sw.logger.Warn("orphan sweep failed", "error", err.Error())
	} else if n > 0 {
		sw.logger.Info("orphan sweep", "deleted_objects", n)
	}
}

// sweepOrphans deletes objects older than twice the session lifetime that
// no live session or file names. Young objects are left alone: their
// session may still be about to record them.
func (sw *Sweeper) sweepOrphans(ctx context.Context, backend objectstore.Backend) (int, error) {
	cutoff := time.Now().Add(-2 * sw.cfg.UploadSessionTTL)
	var candidates []string
	deleted := 0
	flush := func() error {
		if len(candidates) == 0 {
			return nil
		}
		live, err := sw.store.LiveObjectKeys(ctx, candidates)
		if err != nil {
			return err
		}
		for _, k := range candidates {
			if !live[k] {
				if err := backend.Delete(ctx, k); err != nil {
					return err
				}
				deleted++
			}
		}
		candidates = candidates[:0]
		return nil
	}
	err := backend.List(ctx, sw.cfg.ArtifactKeyPrefix, func(key string, modTime time.Time) error {
		if modTime.After(cutoff) {
			return nil
		}
		candidates = append(candidates, key)
		if len(candidates) >= sw.cfg.Batch {
			return flush()
		}
		return nil
	})
	if err != nil {
		return deleted, err
	}
	return deleted, flush()
}
