// This file holds the poll loop: it asks the gateway for as many tasks as
// there are free slots and hands each lease to its own goroutine.

package workerclient

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/google/uuid"

	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

// pollRequest is one poll, kept so that a retry repeats it exactly.
type pollRequest struct {
	key  string
	body apiclient.LeaseRequest
}

func (r *runner) newPoll(free int) *pollRequest {
	cfg := &r.w.cfg
	wait, sv, pv := cfg.WaitSeconds, cfg.SoftwareVersion, ProtocolVersion
	return &pollRequest{
		key: uuid.NewString(),
		body: apiclient.LeaseRequest{
			MaxTasks:        &free,
			WaitSeconds:     &wait,
			Capabilities:    r.w.caps,
			SoftwareVersion: &sv,
			ProtocolVersion: &pv,
		},
	}
}

// errEmptyPoll is an empty answer that came back faster than minEmptyPoll:
// the gateway is not waiting (shutting down, or a short wait), so the next
// poll backs off instead of polling in a tight loop.
var errEmptyPoll = errors.New("workerclient: empty poll answered at once")

// pollLoop polls until ctx ends or the gateway refuses the worker for good.
// Each round of retry ends with a poll that leased tasks or waited, so the
// backoff starts over after one.
func (r *runner) pollLoop(ctx context.Context) {
	var pending *pollRequest // a poll to repeat after a failure
	policy := callRetry.withLog(func(err error, delay time.Duration) {
		switch {
		case errors.Is(err, errEmptyPoll):
		case isPollRefused(err):
			r.log.Warn("poll refused", "error", err)
		default:
			r.log.Warn("poll failed; retrying", "error", err, "retry_in", delay.String())
		}
	})
	policy.permanent = func(err error) bool {
		var apiErr *APIError
		return isRevoked(err) || errors.As(err, &apiErr) && !isTransient(err) && !isPollRefused(err)
	}
	// A refusal an operator may fix: keep trying, slowly, with a new poll.
	policy.delay = func(err error) (time.Duration, bool) { return backoffCap, isPollRefused(err) }
	for {
		err := retry(ctx, policy, func(ctx context.Context) error {
			if pending == nil {
				free := r.waitForSlot(ctx)
				if free == 0 {
					return ctx.Err()
				}
				pending = r.newPoll(free)
			}
			sent := time.Now()
			leases, err := r.acquire(ctx, pending)
			if err != nil {
				if isPollRefused(err) {
					pending = nil
				}
				return err
			}
			pending = nil
			r.startLeases(leases, sent)
			if len(leases) == 0 && time.Since(sent) < minEmptyPoll {
				return errEmptyPoll
			}
			return nil
		})
		switch {
		case err == nil:
			continue
		case ctx.Err() != nil:
		case isRevoked(err):
			r.revoked(err)
		default: // our request is wrong (400, 413, 415): repeating it cannot help
			r.abort(fmt.Errorf("workerclient: the gateway rejected the poll: %w", err))
		}
		return
	}
}

// isPollRefused reports a poll the gateway refused for a reason an operator
// may fix (401, 403: an unknown certificate, a disabled worker), as opposed
// to a revocation or a request that is wrong (400, 413, 415).
func isPollRefused(err error) bool {
	var apiErr *APIError
	if !errors.As(err, &apiErr) || isTransient(err) || isRevoked(err) {
		return false
	}
	switch apiErr.Status {
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusUnsupportedMediaType:
		return false
	}
	return true
}

// abort stops polling and makes Run return err once it has drained.
func (r *runner) abort(err error) {
	r.mu.Lock()
	if r.fatal == nil {
		r.fatal = err
	}
	r.mu.Unlock()
	r.stopPolling()
}

// waitForSlot returns the number of free slots once there is one, or 0 when
// ctx is done. Slots a completion call in flight may lease are not free.
func (r *runner) waitForSlot(ctx context.Context) int {
	defer func() {
		r.mu.Lock()
		r.pollParked = false
		r.mu.Unlock()
	}()
	for {
		r.mu.Lock()
		free := r.w.cfg.Slots - len(r.leases) - r.nextReserved
		r.pollParked = free <= 0
		r.mu.Unlock()
		if free > 0 {
			return free
		}
		select {
		case <-ctx.Done():
			return 0
		case <-r.slotFree:
		}
	}
}

// nextRefusedFor is how long completion calls stop asking for leases after
// the gateway refused `next`: during a rolling upgrade, an old replica.
const nextRefusedFor = 5 * time.Minute

// reserveNext lets a completion call lease the slots its completions free
// when the poll loop is parked for want of a slot: a full worker's next
// task then comes with the completion, one request instead of two. While
// the poll loop has a poll out, that poll serves the worker instead.
func (r *runner) reserveNext(attempts []uuid.UUID) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.pollParked || r.fatal != nil || time.Now().Before(r.nextRefusedUntil) {
		return 0
	}
	n := 0
	for _, id := range attempts {
		if _, held := r.leases[id]; held {
			n++
		}
	}
	r.nextReserved += n
	return n
}

// nextAnswered frees the completed attempts' slots for the leases their
// call brought, starts those, then gives the reservation back and wakes
// the poll loop for whatever is still free.
func (r *runner) nextAnswered(completed []uuid.UUID, leases []apiclient.Lease, n int, sent time.Time) {
	r.mu.Lock()
	for _, id := range completed {
		delete(r.leases, id) // its task's release finds it gone
	}
	r.mu.Unlock()
	r.startLeases(leases, sent)
	r.mu.Lock()
	r.nextReserved -= n
	r.mu.Unlock()
	notify(r.slotFree)
}

func (r *runner) nextRefused() {
	r.mu.Lock()
	r.nextRefusedUntil = time.Now().Add(nextRefusedFor)
	r.mu.Unlock()
	r.log.Info("the gateway refused leases with completions; polling for them instead", "for", nextRefusedFor.String())
}

func (r *runner) acquire(ctx context.Context, p *pollRequest) ([]apiclient.Lease, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Duration(*p.body.WaitSeconds)*time.Second+pollMargin)
	defer cancel()
	resp, err := r.w.client.AcquireLeasesWithResponse(ctx, &apiclient.AcquireLeasesParams{IdempotencyKey: &p.key}, p.body)
	if err != nil {
		return nil, fmt.Errorf("acquire leases: %w", err)
	}
	if err := checkResponse("acquire leases", resp.HTTPResponse, resp.Body); err != nil {
		return nil, err
	}
	if resp.JSON200 == nil {
		return nil, fmt.Errorf("acquire leases: unexpected answer %s", resp.Status())
	}
	return resp.JSON200.Leases, nil
}

// startLeases registers the leases a poll sent at sent and runs each in its
// own goroutine.
func (r *runner) startLeases(leases []apiclient.Lease, sent time.Time) {
	for i := range leases {
		l := &leases[i]
		ls := r.newLease(l, sent)
		r.mu.Lock()
		_, dup := r.leases[ls.id]
		over := len(r.leases) >= r.w.cfg.Slots
		stopping := r.polling.Err() != nil
		if !dup && !over && !stopping {
			r.leases[ls.id] = ls
		}
		r.mu.Unlock()
		switch {
		case dup: // a replayed poll answer for a lease already running
			ls.stop()
		case over:
			// The gateway granted more than asked: give it back at once
			// rather than run more tasks than Slots.
			ls.log.Warn("lease beyond free slots; releasing it")
			r.giveBack(ls, CodeOverCapacity, "the worker has no free slot")
		case stopping:
			// A completion's next lease arrived as the worker began to
			// shut down: another worker should run it.
			ls.log.Info("lease arrived while shutting down; releasing it")
			r.giveBack(ls, CodeWorkerShutdown, "the worker is shutting down")
		default:
			ls.log.Info("lease acquired", "attempt_number", ls.task.AttemptNumber,
				"max_attempts", ls.task.MaxAttempts, "lease_ttl", ls.expiresAt.Sub(sent).String())
			r.tasks.Go(func() { r.runTask(ls) })
		}
	}
	if len(leases) > 0 {
		notify(r.hbWake)
	}
}

// giveBack ends a lease the worker will not run with a retryable
// cancellation, so that the task is leasable again at once.
func (r *runner) giveBack(ls *lease, code, message string) {
	r.tasks.Go(func() {
		defer ls.stop()
		r.complete(ls, apiclient.CompleteRequest{Outcome: apiclient.AttemptOutcomeCancelled, Error: &apiclient.AttemptError{
			Code: code, Message: new(message), Retryable: new(true),
		}})
	})
}

func (r *runner) newLease(l *apiclient.Lease, sent time.Time) *lease {
	s := &l.Task
	task := &LeasedTask{
		ID:             s.Id,
		AttemptID:      l.AttemptId,
		Type:           string(s.TaskType),
		OrganizationID: s.OrganizationId,
		ScanID:         s.ScanId,
		ScanJobID:      s.ScanJobId,
		Payload:        s.Payload,
		AttemptNumber:  s.AttemptNumber,
		MaxAttempts:    s.MaxAttempts,
	}
	if l.Secrets != nil {
		task.Secrets = *l.Secrets
	}
	ttl := seconds(l.LeaseTtlSeconds)
	ls := &lease{
		rt:        r,
		id:        l.AttemptId,
		token:     l.LeaseToken,
		task:      task,
		renewedAt: sent,
		expiresAt: sent.Add(ttl),
		interval:  heartbeatInterval(seconds(l.HeartbeatIntervalSeconds), ttl),
		log: r.log.With("attempt_id", l.AttemptId, "task_id", s.Id,
			"task_type", s.TaskType, "organization_id", s.OrganizationId),
	}
	task.lease = ls
	ls.results = newResultSender(ls.id, r.w.cfg.ResultBatchSize, maxResultBatchBytes, r.resultDeliverer(ls))

	ctx, cancel := context.WithCancelCause(r.base)
	ls.ctx, ls.cancel, ls.stop = ctx, cancel, func() { cancel(context.Canceled) }
	if budget, ok := attemptBudget(s); ok {
		dctx, dcancel := context.WithDeadlineCause(ctx, sent.Add(budget), ErrAttemptDeadline)
		ls.ctx, ls.stop = dctx, func() { dcancel(); cancel(context.Canceled) }
	}
	return ls
}
