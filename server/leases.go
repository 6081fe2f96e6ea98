package server

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/worker-gateway/gateway/internal/protocol"
	"github.com/worker-gateway/gateway/problem"
	"github.com/worker-gateway/gateway/server/api"
	"github.com/worker-gateway/gateway/store"
)

// AcquireLeases is the long-poll (POST /v1/leases).
func (h *handlers) AcquireLeases(ctx context.Context, req api.AcquireLeasesRequestObject) (api.AcquireLeasesResponseObject, error) {
	arrived := time.Now()
	if req.Body != nil && req.Body.ProtocolVersion != nil && !protocol.Supported(*req.Body.ProtocolVersion) {
		return nil, newProblem(http.StatusBadRequest, problem.UnsupportedProtocol, problem.Text(fmt.Sprintf(
			"this gateway serves worker protocol version %s; the worker announced %q", protocol.Range(), *req.Body.ProtocolVersion)))
	}
	body := api.LeaseRequest{}
	if req.Body != nil {
		body = *req.Body
	}
	params := store.AcquireParams{
		WorkerID:        workerFrom(ctx),
		MaxTasks:        1,
		SoftwareVersion: body.SoftwareVersion,
		ProtocolVersion: body.ProtocolVersion,
	}
	if body.MaxTasks != nil {
		params.MaxTasks = *body.MaxTasks
	}
	if body.Capabilities != nil {
		params.Capabilities = *body.Capabilities
	}
	if req.Params.IdempotencyKey != nil {
		params.IdempotencyKey = *req.Params.IdempotencyKey
	}
	wait := h.cfg.DefaultWait
	if body.WaitSeconds != nil {
		wait = time.Duration(*body.WaitSeconds) * time.Second
	}
	leases, err := h.poll(ctx, params, wait, arrived)
	if err != nil {
		return nil, err
	}
	return api.AcquireLeases200JSONResponse{Leases: leases}, nil
}

// leasesAfterCompletion is the poll a completion call asks for with
// `next`, answered in the same call. Its idempotency key is derived from
// the attempts the call completes, so that repeating the call replays the
// leases the first one granted (with fresh tokens) instead of leasing
// again: the completion and its leases are repeatable together.
func (h *handlers) leasesAfterCompletion(ctx context.Context, next *api.NextLeases, attempts []uuid.UUID, arrived time.Time) (*[]api.Lease, error) {
	if next == nil {
		return nil, nil
	}
	params := store.AcquireParams{WorkerID: workerFrom(ctx), MaxTasks: 1, IdempotencyKey: nextLeasesKey(attempts)}
	if next.MaxTasks != nil {
		params.MaxTasks = *next.MaxTasks
	}
	var wait time.Duration
	if next.WaitSeconds != nil {
		wait = time.Duration(*next.WaitSeconds) * time.Second
	}
	leases, err := h.poll(ctx, params, wait, arrived)
	if err != nil {
		return nil, err
	}
	return &leases, nil
}

// nextLeasesKey is the idempotency key of the poll a completion call makes
// for `next`: the same for the same attempts in any order, and distinct
// from any other call's (a worker's own poll keys are its own business;
// one that chose this form would only replay its own leases).
func nextLeasesKey(attempts []uuid.UUID) string {
	if len(attempts) == 1 {
		return "next:" + attempts[0].String()
	}
	sorted := slices.Clone(attempts)
	slices.SortFunc(sorted, func(a, b uuid.UUID) int { return bytes.Compare(a[:], b[:]) })
	sum := sha256.New()
	for _, id := range slices.Compact(sorted) {
		sum.Write(id[:])
	}
	return "next-many:" + hex.EncodeToString(sum.Sum(nil))
}

// poll leases for one worker, waiting up to wait (capped by MaxWait) when
// there is nothing to lease at once. Each pass runs one acquisition
// transaction; when it leases nothing the poll registers with the hub and
// sleeps — holding no connection and running no query — until a wake-up,
// the end of its wait, or shutdown. A poll holds one of the worker's and
// the replica's poll places while it runs.
func (h *handlers) poll(ctx context.Context, params store.AcquireParams, wait time.Duration, arrived time.Time) ([]api.Lease, error) {
	workerID := params.WorkerID
	release, err := h.polls.acquire(workerID, h.cfg.Limits)
	if err != nil {
		return nil, err
	}
	defer release()
	wait = min(wait, h.cfg.MaxWait)
	if wait > 0 {
		noteLongPoll(ctx)
	}
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	var wokenBy *Waiter
	for {
		seq := h.hub.Seq()
		started := time.Now()
		res, err := h.acquire(ctx, params, wokenBy != nil)
		if res.Began != 0 {
			// Served by a group that began after this poll queued for it.
			seq = res.Began
		}
		h.metrics.leaseAcquisition.Observe(time.Since(started).Seconds())
		if err != nil {
			return nil, err
		}
		if ctx.Err() != nil && len(res.Leases) > 0 {
			// The poll went away while its leases were granted: nobody
			// will receive them, so they go back to the queue now.
			h.releaseUndelivered(workerID, res.Leases)
			return nil, ctx.Err()
		}
		if res.Replayed {
			h.metrics.replays.WithLabelValues("leases").Inc()
		}
		if len(res.Leases) > 0 || wait == 0 {
			if wokenBy != nil && len(res.Leases) > 0 {
				// Approximate: from the signal to this answer, including
				// the acquisition transaction it ran.
				h.metrics.wakeLatency.Observe(time.Since(wokenBy.SignalledAt()).Seconds())
			}
			h.metrics.observeLeasePoll(arrived, len(res.Leases) > 0)
			return h.leaseAnswer(ctx, workerID, res), nil
		}
		if wokenBy != nil && h.dueTaskStillQueued(ctx, res.OrganizationIDs) {
			// Woken but nothing to lease, and a due task is still queued:
			// this worker cannot take it, the next one may. (If none is,
			// another poll — here or on another replica — took it.)
			h.hub.Forward(wokenBy)
			h.metrics.wakeupsPassedOn.Inc()
		}
		// Only the first pass needs to persist the advertisement.
		params.Capabilities, params.SoftwareVersion, params.ProtocolVersion = nil, nil, nil

		slots := res.FreeSlots
		if res.Disabled {
			slots = 0
		}
		waiter := h.hub.Register(workerID, res.OrganizationIDs, slots, seq)
		select {
		case <-waiter.C():
			wokenBy = waiter
			continue
		case <-deadline.C:
		case <-h.hub.Closed():
		case <-ctx.Done():
		}
		h.hub.Unregister(waiter)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		h.metrics.observeLeasePoll(arrived, false)
		return []api.Lease{}, nil
	}
}

// dueTaskStillQueued reports whether orgs have a due task queued; when it
// cannot tell, it says yes, so a notice is passed on rather than dropped.
func (h *handlers) dueTaskStillQueued(ctx context.Context, orgs []uuid.UUID) bool {
	queued, err := h.store.DueTaskQueued(ctx, orgs)
	return queued || err != nil
}

// releaseUndelivered releases leases granted to a poll that is gone.
func (h *handlers) releaseUndelivered(workerID uuid.UUID, leases []store.Lease) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h.undeliveredReleased(h.store.ReleaseLeases(ctx, workerID, leases))
}

// undeliveredReleased counts (or logs the failure of) a release of leases
// nobody received; a lease not released expires as usual.
func (s *Server) undeliveredReleased(n int, err error) {
	if err != nil {
		s.logger.Warn("releasing undelivered leases failed; they will expire", "error", err)
		return
	}
	s.metrics.undelivered.Add(float64(n))
}

func (h *handlers) leaseAnswer(ctx context.Context, workerID uuid.UUID, res store.AcquireResult) []api.Lease {
	if len(res.Leases) > 0 {
		// The sweeper must come for the soonest expiry in time.
		soonest := res.Leases[0].LeaseTTL
		for _, l := range res.Leases[1:] {
			soonest = min(soonest, l.LeaseTTL)
		}
		h.services.DueWithin(soonest)
	}
	granted, secrets := h.resolveSecrets(ctx, workerID, res.Leases)
	leases := make([]api.Lease, 0, len(granted))
	for i, l := range granted {
		lease := h.toLease(l)
		if secrets[i] != nil {
			lease.Secrets = &secrets[i]
		}
		leases = append(leases, lease)
	}
	if !res.Replayed {
		h.services.Granted(len(res.Leases))
	}
	return leases
}

// HeartbeatWorker renews all of a worker's listed leases in one statement.
func (h *handlers) HeartbeatWorker(ctx context.Context, req api.HeartbeatWorkerRequestObject) (api.HeartbeatWorkerResponseObject, error) {
	p := store.RenewParams{WorkerID: workerFrom(ctx), SoftwareVersion: req.Body.SoftwareVersion}
	if req.Body.Capabilities != nil {
		p.Capabilities = *req.Body.Capabilities
	}
	for _, l := range req.Body.Leases {
		p.Leases = append(p.Leases, store.AttemptRef{AttemptID: l.AttemptId, LeaseToken: l.LeaseToken})
	}
	statuses, err := h.heartbeats.Renew(ctx, p)
	if err != nil {
		return nil, err
	}
	for _, st := range statuses {
		if st.State == store.LeaseLost {
			h.metrics.fencingRejections.Inc()
		} else {
			h.metrics.heartbeats.Inc()
		}
	}
	return api.HeartbeatWorker200JSONResponse{Leases: mapSlice(statuses, h.toLeaseStatus)}, nil
}

// pollLimiter bounds concurrent long-polls per worker and per replica.
type pollLimiter struct {
	mu        sync.Mutex
	perWorker map[uuid.UUID]int
	total     int
}

func (l *pollLimiter) acquire(worker uuid.UUID, limits Limits) (release func(), err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.perWorker == nil {
		l.perWorker = map[uuid.UUID]int{}
	}
	if limits.MaxPolls > 0 && l.total >= limits.MaxPolls {
		p := newProblem(http.StatusTooManyRequests, problem.TooManyRequests, "the gateway has too many open polls; retry later")
		p.RetryAfter = 1
		return nil, p
	}
	if limits.PollsPerWorker > 0 && l.perWorker[worker] >= limits.PollsPerWorker {
		p := newProblem(http.StatusTooManyRequests, problem.CapacityExceeded, "this worker has too many open polls")
		p.RetryAfter = 1
		return nil, p
	}
	l.total++
	l.perWorker[worker]++
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.total--
		if l.perWorker[worker]--; l.perWorker[worker] == 0 {
			delete(l.perWorker, worker)
		}
	}, nil
}

// acquire runs one pass of a poll: with the replica's shared acquisition
// (LeaseGroupCommit) when the poll arrives, so that a busy replica serves
// its polls with one fetcher, else in a transaction of its own. A poll
// woken by a wake-up always goes on its own: the wake-up is for a task that
// is there now, and waiting for the acquisition in flight to finish would
// add its time to the wake latency (p99 4.7 → 15 ms measured), while a
// wake-up concerns few polls at once (the hub wakes only as many as could
// win a task).
func (h *handlers) acquire(ctx context.Context, p store.AcquireParams, woken bool) (store.AcquireResult, error) {
	if h.acquisitions != nil && !woken {
		return h.acquisitions.Acquire(ctx, p)
	}
	return h.store.AcquireLeases(ctx, p)
}
