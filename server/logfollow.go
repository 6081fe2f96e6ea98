package server

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/worker-gateway/gateway/problem"
	"github.com/worker-gateway/gateway/store"
)

// Following a log (GET /v1/tasks/{id}/logs?follow=true) used to re-read the
// database every 200 ms for every follower. Now the followers of one
// attempt on a replica share one reader goroutine: it reads the attempt's
// new log bytes once and every follower answers from what it read. It
// starts with the first follower and stops when the last one leaves.
//
// It reads when woken by an append or a completion on this replica (free:
// no query, no NOTIFY) and otherwise polls with back-off, 200 ms growing to
// 2 s while nothing arrives, which bounds how late it sees an append made
// through another replica. A NOTIFY on every append was not added: it would
// serialise every log append's commit on PostgreSQL's notify queue lock, a
// cost paid by every worker for the sake of a few operators.
const (
	followMinInterval = 200 * time.Millisecond
	followMaxInterval = 2 * time.Second
	// followReadBytes bounds one shared read; followBufferBytes what a
	// reader keeps for its followers. A follower behind what it keeps
	// reads the database itself, once, and then catches up.
	followReadBytes   = 256 << 10
	followBufferBytes = 256 << 10
)

// logFollowers is one replica's shared log readers and its follow limits.
type logFollowers struct {
	store  *store.Store
	logger *slog.Logger

	mu    sync.Mutex
	tails map[uuid.UUID]*logTail
	// perToken and total count follow requests in progress.
	perToken map[uuid.UUID]int
	total    int

	// waiting counts followers waiting on a shared reader (tests, metrics);
	// readers counts the readers, so that appends skip the lock when no log
	// is followed.
	waiting atomic.Int64
	readers atomic.Int64
}

func newLogFollowers(st *store.Store, logger *slog.Logger) *logFollowers {
	return &logFollowers{store: st, logger: logger, tails: map[uuid.UUID]*logTail{}, perToken: map[uuid.UUID]int{}}
}

// acquire admits one follow request of a token, or refuses it with 429
// past FollowsPerToken for the token or MaxFollows for the replica.
func (f *logFollowers) acquire(token uuid.UUID, limits Limits) (release func(), err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if limits.MaxFollows > 0 && f.total >= limits.MaxFollows {
		p := newProblem(http.StatusTooManyRequests, problem.TooManyRequests, "the gateway has too many log follows open; retry later")
		p.RetryAfter = 1
		return nil, p
	}
	if limits.FollowsPerToken > 0 && f.perToken[token] >= limits.FollowsPerToken {
		p := newProblem(http.StatusTooManyRequests, problem.CapacityExceeded, "this API token has too many log follows open")
		p.RetryAfter = 1
		return nil, p
	}
	f.total++
	f.perToken[token]++
	return func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.total--
		if f.perToken[token]--; f.perToken[token] == 0 {
			delete(f.perToken, token)
		}
	}, nil
}

// Waiting is the number of followers waiting on shared readers.
func (f *logFollowers) Waiting() int { return int(f.waiting.Load()) }

// Readers is the number of running shared readers.
func (f *logFollowers) Readers() int { return int(f.readers.Load()) }

// poke makes the attempt's reader, if any, read now: its log grew or it
// ended on this replica.
func (f *logFollowers) poke(attempt uuid.UUID) {
	if f.readers.Load() == 0 {
		return
	}
	f.mu.Lock()
	t := f.tails[attempt]
	f.mu.Unlock()
	if t != nil {
		select {
		case t.poke <- struct{}{}:
		default:
		}
	}
}

// logTail is the shared reader of one attempt's log and what it has read.
type logTail struct {
	attempt uuid.UUID
	refs    int // guarded by logFollowers.mu
	poke    chan struct{}
	stop    chan struct{}

	mu sync.Mutex
	// buf holds the log from start; start+len(buf) is where the next read
	// begins.
	start     int64
	buf       []byte
	stored    int64
	truncated bool
	// ended: the attempt ended and buf reaches the end of its log.
	ended bool
	// read: at least one read succeeded (the fields above are known).
	read bool
	// changed is closed, and replaced, whenever the fields above change.
	changed chan struct{}
}

// join registers a follower of attempt, starting the attempt's reader at
// offset if none runs. offset must not be past the stored log, so that a
// follower before a reader's start always finds stored bytes there to read
// itself. The follower must leave.
func (f *logFollowers) join(attempt uuid.UUID, offset int64) *logTail {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := f.tails[attempt]
	if t == nil {
		t = &logTail{attempt: attempt, poke: make(chan struct{}, 1), stop: make(chan struct{}),
			start: offset, changed: make(chan struct{})}
		f.tails[attempt] = t
		f.readers.Add(1)
		go f.run(t)
	}
	t.refs++
	return t
}

// leave unregisters a follower; the last one stops the reader.
func (f *logFollowers) leave(t *logTail) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if t.refs--; t.refs == 0 {
		delete(f.tails, t.attempt)
		f.readers.Add(-1)
		close(t.stop)
	}
}

// run is the attempt's one reader: it reads at once, then whenever poked
// or its back-off interval passes, until the last follower leaves. Once the
// attempt ended and everything is read it only waits to be stopped.
func (f *logFollowers) run(t *logTail) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-t.stop
		cancel()
	}()
	interval := followMinInterval
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-t.stop:
			return
		case <-t.poke:
		case <-timer.C:
		}
		grew, ended, err := t.readNew(ctx, f.store)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			f.logger.Warn("shared log reader: read failed; retrying", "attempt_id", t.attempt.String(), "error", err.Error())
		case ended:
			<-t.stop
			return
		}
		if grew {
			interval = followMinInterval
		} else {
			interval = min(interval*2, followMaxInterval)
		}
		timer.Reset(interval)
	}
}

// readNew reads what the attempt's log gained since the last read and
// wakes the followers.
func (t *logTail) readNew(ctx context.Context, st *store.Store) (grew, ended bool, err error) {
	for {
		t.mu.Lock()
		next := t.start + int64(len(t.buf))
		t.mu.Unlock()
		// One read serves followers of any organization; each one's
		// scope was checked (ReadTaskLog) before it joined this tail.
		got, err := st.ReadLogTail(ctx, store.EveryOrganization(), t.attempt, next, followReadBytes)
		if err != nil {
			return grew, false, err
		}
		t.mu.Lock()
		t.buf = append(t.buf, got.Data...)
		if over := len(t.buf) - followBufferBytes; over > 0 {
			t.buf = append([]byte(nil), t.buf[over:]...)
			t.start += int64(over)
		}
		more := len(got.Data) == followReadBytes && t.start+int64(len(t.buf)) < got.Stored
		t.stored, t.truncated, t.read = got.Stored, got.Truncated, true
		t.ended = !got.Active && !more
		ended = t.ended
		grew = grew || len(got.Data) > 0
		close(t.changed)
		t.changed = make(chan struct{})
		t.mu.Unlock()
		if !more {
			return grew, ended, nil
		}
	}
}

// followRead is what a follower gets from a shared reader.
type followRead struct {
	data      []byte
	truncated bool
	complete  bool
	// direct: the follower's offset is before what the reader keeps; it
	// must read the database itself.
	direct bool
	// timedOut: nothing came before the follower's wait ended.
	timedOut bool
}

// wait blocks until the shared reader has log from offset (at most limit
// bytes of it), or the attempt ended, or done is closed.
func (f *logFollowers) wait(ctx context.Context, t *logTail, offset, limit int64, done <-chan struct{}) followRead {
	f.waiting.Add(1)
	defer f.waiting.Add(-1)
	for {
		t.mu.Lock()
		changed := t.changed
		if t.read {
			next := t.start + int64(len(t.buf))
			switch {
			case offset < t.start:
				t.mu.Unlock()
				return followRead{direct: true}
			case offset < next:
				data := t.buf[offset-t.start : min(next, offset+limit)-t.start]
				r := followRead{data: data, truncated: t.truncated, complete: t.ended && offset+int64(len(data)) >= t.stored}
				t.mu.Unlock()
				return r
			case t.ended:
				r := followRead{truncated: t.truncated, complete: true}
				t.mu.Unlock()
				return r
			}
		}
		t.mu.Unlock()
		select {
		case <-changed:
		case <-done:
			return followRead{timedOut: true}
		case <-ctx.Done():
			return followRead{timedOut: true}
		}
	}
}
