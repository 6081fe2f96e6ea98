// Package groupcommit writes requests in groups, so that one transaction and
// one commit (with its flush to disk) serve many callers: the store's
// completion, heartbeat and acquisition batchers are built on it.
package groupcommit

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// Committer writes requests in groups: requests that arrive while an
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
type Committer[P, R any] struct {
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

// ErrClosed is returned for a request submitted after Close.
var ErrClosed = errors.New("group committer closed")

// Options sizes a Committer.
type Options[P, R any] struct {
	// Writers is how many groups may be in flight at once, each on its own
	// connection.
	Writers int
	// MaxGroup bounds one group.
	MaxGroup int
	// Timeout bounds one group's transaction (a caller that gives up
	// earlier does not cancel the others' work).
	Timeout time.Duration
	// Abandoned, when set, receives each request whose caller gave up
	// while its group was being written, with what the write produced.
	Abandoned func(ctx context.Context, p P, r R)
}

// New starts opts.Writers goroutines, each writing one group at a time with
// write, which answers each request of its group on its own.
func New[P, R any](opts Options[P, R], write func(context.Context, []P) []R) *Committer[P, R] {
	g := &Committer[P, R]{
		write:     write,
		abandoned: opts.Abandoned,
		queue:     make(chan *pending[P, R], opts.MaxGroup*opts.Writers),
		maxGroup:  opts.MaxGroup,
		timeout:   opts.Timeout,
		closed:    make(chan struct{}),
		stopped:   make(chan struct{}),
	}
	for range opts.Writers {
		g.writers.Go(g.run)
	}
	return g
}

// Submit writes ps in the next groups, together with other callers'
// requests, and returns their answers; ok[i] is false when ps[i] was not
// written (the committer closed, or ctx ended first — it may still be
// written then).
func (g *Committer[P, R]) Submit(ctx context.Context, ps []P) (out []R, errs []error) {
	out, errs = make([]R, len(ps)), make([]error, len(ps))
	queued := make([]*pending[P, R], len(ps))
	for i, p := range ps {
		queued[i] = &pending[P, R]{params: p, answer: make(chan R, 1)}
		select {
		case g.queue <- queued[i]:
		case <-g.closed:
			queued[i], errs[i] = nil, ErrClosed
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
				errs[i] = ErrClosed
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
func (g *Committer[P, R]) run() {
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

// Close stops the writers after the groups in flight are written; requests
// still queued are answered ErrClosed by Submit.
func (g *Committer[P, R]) Close() {
	g.closeOnce.Do(func() {
		close(g.closed)
		g.writers.Wait()
		close(g.stopped)
	})
}
