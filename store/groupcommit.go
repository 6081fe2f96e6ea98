package store

import (
	"context"
	"errors"
	"sync"
	"time"
)

// CompletionBatcher group-commits completions: completions that arrive while
// an earlier group is being written wait for it to finish and are then
// written together by CompleteAttempts, in one transaction. Nothing waits on
// a timer: an idle gateway writes each completion at once, a busy one writes
// them in groups as large as the load makes them (up to maxGroup), so one
// commit (and its flush to disk) serves many requests. Each completion still
// gets its own fenced answer.
type CompletionBatcher struct {
	store    *Store
	queue    chan *pendingCompletion
	maxGroup int
	timeout  time.Duration

	closeOnce sync.Once
	closed    chan struct{} // Close was called
	stopped   chan struct{} // the writers have returned
	writers   sync.WaitGroup
}

type pendingCompletion struct {
	params CompleteParams
	answer chan CompleteOutcome
}

// NewCompletionBatcher starts writers goroutines, each writing one group at a
// time: up to writers groups are in flight at once, each on its own
// connection. timeout bounds one group's transaction (a caller that gives up
// earlier does not cancel the others' work).
func NewCompletionBatcher(s *Store, writers, maxGroup int, timeout time.Duration) *CompletionBatcher {
	b := &CompletionBatcher{
		store:    s,
		queue:    make(chan *pendingCompletion, maxGroup*writers),
		maxGroup: maxGroup,
		timeout:  timeout,
		closed:   make(chan struct{}),
		stopped:  make(chan struct{}),
	}
	for range writers {
		b.writers.Go(b.write)
	}
	return b
}

// ErrBatcherClosed is returned for a completion submitted after Close.
var ErrBatcherClosed = errors.New("completion batcher closed")

// Complete ends one attempt as CompleteAttempt would, in the next group.
func (b *CompletionBatcher) Complete(ctx context.Context, p CompleteParams) (CompleteResult, error) {
	out := b.CompleteAll(ctx, []CompleteParams{p})
	return out[0].Result, out[0].Err
}

// CompleteAll ends several attempts, each answered on its own. They join the
// next groups together with other callers' completions.
func (b *CompletionBatcher) CompleteAll(ctx context.Context, ps []CompleteParams) []CompleteOutcome {
	out := make([]CompleteOutcome, len(ps))
	pending := make([]*pendingCompletion, len(ps))
	for i, p := range ps {
		pending[i] = &pendingCompletion{params: p, answer: make(chan CompleteOutcome, 1)}
		select {
		case b.queue <- pending[i]:
		case <-b.closed:
			pending[i] = nil
			out[i].Err = ErrBatcherClosed
		case <-ctx.Done():
			pending[i] = nil
			out[i].Err = ctx.Err()
		}
	}
	for i, pc := range pending {
		if pc == nil {
			continue
		}
		select {
		case out[i] = <-pc.answer:
		case <-b.stopped:
			// Queued in the instant Close drained the queue: unwritten.
			select {
			case out[i] = <-pc.answer:
			default:
				out[i].Err = ErrBatcherClosed
			}
		case <-ctx.Done():
			// The completion may still be written; a retry is answered
			// with its outcome as a replay.
			out[i].Err = ctx.Err()
		}
	}
	return out
}

// write takes whatever completions are queued (waiting only for the first)
// and writes them as one group, until Close.
func (b *CompletionBatcher) write() {
	group := make([]*pendingCompletion, 0, b.maxGroup)
	params := make([]CompleteParams, 0, b.maxGroup)
	for {
		group, params = group[:0], params[:0]
		select {
		case pc := <-b.queue:
			group = append(group, pc)
		case <-b.closed:
			b.drain()
			return
		}
	fill:
		for len(group) < b.maxGroup {
			select {
			case pc := <-b.queue:
				group = append(group, pc)
			default:
				break fill
			}
		}
		for _, pc := range group {
			params = append(params, pc.params)
		}
		ctx, cancel := context.WithTimeout(context.Background(), b.timeout)
		out := b.store.CompleteAttempts(ctx, params)
		cancel()
		for i, pc := range group {
			pc.answer <- out[i]
		}
	}
}

// drain answers completions still queued at Close.
func (b *CompletionBatcher) drain() {
	for {
		select {
		case pc := <-b.queue:
			pc.answer <- CompleteOutcome{Err: ErrBatcherClosed}
		default:
			return
		}
	}
}

// Close stops the writers after the groups in flight are written.
func (b *CompletionBatcher) Close() {
	b.closeOnce.Do(func() {
		close(b.closed)
		b.writers.Wait()
		close(b.stopped)
	})
}
