package store

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// groupCommitter writes requests in groups: requests that arrive while an
// earlier group is being written wait for it to finish and are then written
// together, in one transaction, by write. Nothing waits on a timer: an idle
// gateway writes each request at once, a busy one writes them in groups as
// large as the load makes them (up to maxGroup), so one commit (and its
// flush to disk) serves many requests. write answers each request on its
// own.
//
// A caller that gives up (its context ends) abandons its request: one still
// queued is dropped unwritten, and one already being written is handed,
// once written, to abandoned (when set) instead of the caller, so that what
// it produced — leases nobody will receive — can be undone at once.
type groupCommitter[P, R any] struct {
	write     func(ctx context.Context, group []P) []R
	abandoned func(ctx context.Context, p P, r R)
	queue     chan *pending[P, R]
	maxGroup  int
	timeout   time.Duration

	closeOnce sync.Once
	closed    chan struct{} // Close was called
	stopped   chan struct{} // the writers have returned
	writers   sync.WaitGroup
}

type pending[P, R any] struct {
	params P
	answer chan R
	// state is waiting until either the writer answers (answered) or the
	// caller gives up (abandoned), whichever comes first.
	state atomic.Int32
}

const (
	waiting int32 = iota
	answered
	abandoned
)

// ErrBatcherClosed is returned for a request submitted after Close.
var ErrBatcherClosed = errors.New("group committer closed")

// newGroupCommitter starts writers goroutines, each writing one group at a
// time: up to writers groups are in flight at once, each on its own
// connection. timeout bounds one group's transaction (a caller that gives up
// earlier does not cancel the others' work). closedAnswer is the answer to
// requests that can no longer be written.
func newGroupCommitter[P, R any](writers, maxGroup int, timeout time.Duration, write func(context.Context, []P) []R) *groupCommitter[P, R] {
	g := &groupCommitter[P, R]{
		write:    write,
		queue:    make(chan *pending[P, R], maxGroup*writers),
		maxGroup: maxGroup,
		timeout:  timeout,
		closed:   make(chan struct{}),
		stopped:  make(chan struct{}),
	}
	for range writers {
		g.writers.Go(g.run)
	}
	return g
}

// submit writes ps in the next groups, together with other callers'
// requests, and returns their answers; ok[i] is false when ps[i] was not
// written (the committer closed, or ctx ended first — it may still be
// written then).
func (g *groupCommitter[P, R]) submit(ctx context.Context, ps []P) (out []R, errs []error) {
	out, errs = make([]R, len(ps)), make([]error, len(ps))
	queued := make([]*pending[P, R], len(ps))
	for i, p := range ps {
		queued[i] = &pending[P, R]{params: p, answer: make(chan R, 1)}
		select {
		case g.queue <- queued[i]:
		case <-g.closed:
			queued[i], errs[i] = nil, ErrBatcherClosed
		case <-ctx.Done():
			queued[i], errs[i] = nil, ctx.Err()
		}
	}
	for i, q := range queued {
		if q == nil {
			continue
		}
		select {
		case out[i] = <-q.answer:
		case <-g.stopped:
			// Queued in the instant Close drained the queue: unwritten.
			select {
			case out[i] = <-q.answer:
			default:
				errs[i] = ErrBatcherClosed
			}
		case <-ctx.Done():
			if q.state.CompareAndSwap(waiting, abandoned) {
				// Dropped if still queued; if being written, its outcome
				// goes to abandoned (a retry of an idempotent request is
				// answered with it as a replay).
				errs[i] = ctx.Err()
				continue
			}
			out[i] = <-q.answer // answered in the same instant
		}
	}
	return out, errs
}

// run takes whatever requests are queued (waiting only for the first) and
// writes them as one group, until Close.
func (g *groupCommitter[P, R]) run() {
	group := make([]*pending[P, R], 0, g.maxGroup)
	params := make([]P, 0, g.maxGroup)
	for {
		group, params = group[:0], params[:0]
		select {
		case q := <-g.queue:
			group = append(group, q)
		case <-g.closed:
			return
		}
	fill:
		for len(group) < g.maxGroup {
			select {
			case q := <-g.queue:
				group = append(group, q)
			default:
				break fill
			}
		}
		live := group[:0]
		for _, q := range group {
			if q.state.Load() != abandoned {
				live = append(live, q)
				params = append(params, q.params)
			}
		}
		group = live
		if len(group) == 0 {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), g.timeout)
		out := g.write(ctx, params)
		cancel()
		for i, q := range group {
			if q.state.CompareAndSwap(waiting, answered) {
				q.answer <- out[i]
			} else if g.abandoned != nil {
				ctx, cancel := context.WithTimeout(context.Background(), g.timeout)
				g.abandoned(ctx, q.params, out[i])
				cancel()
			}
		}
	}
}

// close stops the writers after the groups in flight are written; requests
// still queued are answered ErrBatcherClosed by submit.
func (g *groupCommitter[P, R]) close() {
	g.closeOnce.Do(func() {
		close(g.closed)
		g.writers.Wait()
		close(g.stopped)
	})
}

// CompletionBatcher group-commits completions (CompleteAttempts writes each
// group).
type CompletionBatcher struct {
	g *groupCommitter[CompleteParams, CompleteOutcome]
}

// NewCompletionBatcher starts writers goroutines writing up to maxGroup
// completions per transaction.
func NewCompletionBatcher(s *Store, writers, maxGroup int, timeout time.Duration) *CompletionBatcher {
	return &CompletionBatcher{g: newGroupCommitter(writers, maxGroup, timeout, s.CompleteAttempts)}
}

// Complete ends one attempt as CompleteAttempt would, in the next group.
func (b *CompletionBatcher) Complete(ctx context.Context, p CompleteParams) (CompleteResult, error) {
	out := b.CompleteAll(ctx, []CompleteParams{p})
	return out[0].Result, out[0].Err
}

// CompleteAll ends several attempts, each answered on its own. They join the
// next groups together with other callers' completions.
func (b *CompletionBatcher) CompleteAll(ctx context.Context, ps []CompleteParams) []CompleteOutcome {
	out, errs := b.g.submit(ctx, ps)
	for i, err := range errs {
		if err != nil {
			out[i] = CompleteOutcome{Err: err}
		}
	}
	return out
}

// Close stops the writers after the groups in flight are written.
func (b *CompletionBatcher) Close() { b.g.close() }

// HeartbeatBatcher group-commits heartbeats (RenewLeasesMany writes each
// group).
type HeartbeatBatcher struct {
	g *groupCommitter[RenewParams, RenewOutcome]
}

// NewHeartbeatBatcher starts writers goroutines writing up to maxGroup
// workers' heartbeats per transaction.
func NewHeartbeatBatcher(s *Store, writers, maxGroup int, timeout time.Duration) *HeartbeatBatcher {
	return &HeartbeatBatcher{g: newGroupCommitter(writers, maxGroup, timeout, s.RenewLeasesMany)}
}

// Renew renews one worker's leases as RenewLeases would, in the next group.
func (b *HeartbeatBatcher) Renew(ctx context.Context, p RenewParams) ([]LeaseStatus, error) {
	out, errs := b.g.submit(ctx, []RenewParams{p})
	if errs[0] != nil {
		return nil, errs[0]
	}
	return out[0].Statuses, out[0].Err
}

// Close stops the writers after the groups in flight are written.
func (b *HeartbeatBatcher) Close() { b.g.close() }

// AcquireBatcher group-commits polls' acquisitions (AcquireLeasesMany
// writes each group).
type AcquireBatcher struct {
	g *groupCommitter[AcquireParams, AcquireOutcome]
}

// NewAcquireBatcher starts writers goroutines writing up to maxGroup polls'
// acquisitions per transaction. clock, when set, is read just before each
// group's transaction begins (AcquireResult.Began): a poll that waited for
// the group in flight must not take the wake-ups it missed meanwhile for
// tasks its own transaction might not see. The leases of a poll whose
// caller gave up while its group was written are released at once
// (ReleaseLeases), never left to expire; release, when set, is told how
// many and why it failed.
func NewAcquireBatcher(s *Store, writers, maxGroup int, timeout time.Duration, clock func() uint64,
	release func(n int, err error)) *AcquireBatcher {
	write := func(ctx context.Context, ps []AcquireParams) []AcquireOutcome {
		var began uint64
		if clock != nil {
			began = clock()
		}
		out := s.AcquireLeasesMany(ctx, ps)
		for i := range out {
			out[i].Result.Began = began
		}
		return out
	}
	g := newGroupCommitter(writers, maxGroup, timeout, write)
	g.abandoned = func(ctx context.Context, p AcquireParams, out AcquireOutcome) {
		if len(out.Result.Leases) == 0 {
			return
		}
		n, err := s.ReleaseLeases(ctx, p.WorkerID, out.Result.Leases)
		if release != nil {
			release(n, err)
		}
	}
	return &AcquireBatcher{g: g}
}

// Acquire leases for one poll as AcquireLeases would, in the next group.
func (b *AcquireBatcher) Acquire(ctx context.Context, p AcquireParams) (AcquireResult, error) {
	out, errs := b.g.submit(ctx, []AcquireParams{p})
	if errs[0] != nil {
		return AcquireResult{}, errs[0]
	}
	return out[0].Result, out[0].Err
}

// Close stops the writers after the groups in flight are written.
func (b *AcquireBatcher) Close() { b.g.close() }
