// This file renews the leases: one heartbeat for all of them, scheduled by
// the shortest interval the gateway asked for, and local expiry.

package workerclient

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

// heartbeatLoop renews every held lease in one call whenever the earliest
// one is due, and gives up leases whose local expiry passes unrenewed.
func (r *runner) heartbeatLoop(ctx context.Context) {
	// Heartbeats cannot block in retry: while one waits to be repeated the
	// loop still expires leases and takes new ones in, so it keeps the
	// policy's backoff and schedules the retry itself.
	bo := callRetry.delays()
	var retryAt time.Time // after a failed renewal, not before this
	var timer *time.Timer
	for {
		now := time.Now()
		renewAt, expireAt, ok := r.schedule(now)
		var wake <-chan time.Time
		if ok {
			at := renewAt
			if retryAt.After(at) {
				at = retryAt
			}
			if expireAt.Before(at) {
				at = expireAt
			}
			timer = time.NewTimer(at.Sub(now))
			wake = timer.C
		}
		fired := false
		select {
		case <-ctx.Done():
		case <-r.hbWake: // a new lease: its interval may be the shortest
		case <-wake:
			fired = true
		}
		if timer != nil {
			timer.Stop()
			timer = nil
		}
		if ctx.Err() != nil {
			return
		}
		if !fired {
			continue
		}
		now = time.Now()
		if now.Before(renewAt) || now.Before(retryAt) {
			continue // woken to expire a lease, not to renew
		}
		if err := r.heartbeat(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			delay := bo.next(err)
			retryAt = time.Now().Add(delay)
			r.log.Warn("heartbeat failed; retrying", "error", err, "retry_in", delay.String())
			continue
		}
		bo.reset()
		retryAt = time.Time{}
	}
}

// schedule marks the leases whose local expiry has passed as lost and
// returns when the next renewal is due and when the next lease expires;
// false when no lease is held.
func (r *runner) schedule(now time.Time) (renewAt, expireAt time.Time, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, ls := range r.leases {
		if ls.lost {
			continue
		}
		if !now.Before(ls.expiresAt) {
			ls.lost = true
			ls.cancel(ErrLeaseLost)
			ls.log.Warn("lease expired without a renewal")
			continue
		}
		due := ls.renewedAt.Add(ls.interval)
		if !ok || due.Before(renewAt) {
			renewAt = due
		}
		if !ok || ls.expiresAt.Before(expireAt) {
			expireAt = ls.expiresAt
		}
		ok = true
	}
	return renewAt, expireAt, ok
}

// heartbeat renews every held lease with one call.
func (r *runner) heartbeat(ctx context.Context) error {
	r.mu.Lock()
	refs := make([]apiclient.LeaseRef, 0, len(r.leases))
	byID := make(map[uuid.UUID]*lease, len(r.leases))
	for id, ls := range r.leases {
		if !ls.lost {
			refs = append(refs, apiclient.LeaseRef{AttemptId: id, LeaseToken: ls.token})
			byID[id] = ls
		}
	}
	r.mu.Unlock()
	if len(refs) == 0 {
		return nil
	}

	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	sent := time.Now()
	sv := r.w.cfg.SoftwareVersion
	resp, err := r.w.client.HeartbeatWorkerWithResponse(ctx, apiclient.WorkerHeartbeatRequest{
		Leases: refs, Capabilities: r.w.caps, SoftwareVersion: &sv,
	})
	if err != nil {
		return fmt.Errorf("heartbeat: %w", err)
	}
	if err := checkResponse("heartbeat", resp.HTTPResponse, resp.Body); err != nil {
		if isRevoked(err) {
			r.revoked(err)
		}
		return err
	}
	if resp.JSON200 == nil {
		return fmt.Errorf("heartbeat: unexpected answer %s", resp.Status())
	}
	for i := range resp.JSON200.Leases {
		st := &resp.JSON200.Leases[i]
		if ls := byID[st.AttemptId]; ls != nil {
			r.applyStatus(ls, st, sent, true)
			delete(byID, st.AttemptId)
		}
	}
	// A lease the answer left out is not renewed, but its next renewal is
	// not due at once either: it expires locally unless a later answer
	// renews it.
	r.mu.Lock()
	for _, ls := range byID {
		ls.renewedAt = sent
	}
	r.mu.Unlock()
	return nil
}

// applyStatus records a lease's state as of a request sent at sent.
// renewal says whether the request renewed the lease (a heartbeat) or only
// reported on it (start).
func (r *runner) applyStatus(ls *lease, st *apiclient.LeaseStatus, sent time.Time, renewal bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ls.lost {
		return
	}
	switch {
	case st.State == stateLost:
		ls.lost = true
		ls.log.Warn("the gateway reports the lease lost")
		ls.cancel(ErrLeaseLost)
		return
	case st.State == stateCancelRequested || st.CancelRequested:
		if ls.ctx.Err() == nil {
			ls.log.Info("the gateway requested cancellation")
		}
		ls.cancel(ErrCancelRequested) // the lease is still renewed until completion
	}
	ttl := seconds(st.LeaseTtlSeconds)
	ls.expiresAt = sent.Add(ttl)
	if st.HeartbeatIntervalSeconds != nil {
		ls.interval = heartbeatInterval(seconds(*st.HeartbeatIntervalSeconds), ttl)
	}
	if renewal {
		ls.renewedAt = sent
	}
}

// heartbeatInterval is the gateway's interval, or a third of the TTL when it
// gives none, never longer than half the TTL nor shorter than
// minHeartbeatInterval.
func heartbeatInterval(interval, ttl time.Duration) time.Duration {
	if interval <= 0 {
		interval = ttl / 3
	}
	if ttl > 0 && interval > ttl/2 {
		interval = ttl / 2
	}
	return max(interval, minHeartbeatInterval)
}
