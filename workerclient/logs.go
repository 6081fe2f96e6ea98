package workerclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/worker-gateway/gateway/problem"
	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

// Attempt logs: LeasedTask.Log returns a writer that buffers what the handler
// writes and appends it to the attempt's log with POST /v1/attempts/{id}/logs,
// in chunks that each carry their byte offset in the log. One goroutine per
// attempt sends the chunks, one at a time and in order; writes only append to
// a bounded buffer, so they never wait for the gateway.

const (
	// logChunkMax bounds one chunk's data (bytes of UTF-8).
	logChunkMax = 64 << 10
	// logChunkMin is as small as a chunk gets when the gateway answers 413.
	logChunkMin = 1 << 10
	// logBufferMax bounds what an attempt's log keeps in memory: the
	// unsent bytes, the chunk in flight and the acknowledged bytes kept
	// for a resend.
	logBufferMax = 1 << 20
	// logRetainMax is how much acknowledged data is kept, so that a
	// gateway that asks for data again (log-offset-mismatch behind what it
	// acknowledged) can be given it.
	logRetainMax = logChunkMax
	// logPendingMax bounds the unsent bytes.
	logPendingMax = logBufferMax - logChunkMax - logRetainMax
	// logDropAtLeast: when the buffer overflows, at least this much of its
	// oldest data is dropped at once, so that a handler writing small lines
	// to an unreachable gateway does not move the buffer on every write.
	logDropAtLeast = 128 << 10
	// logFlushInterval: buffered output is sent at least this often.
	logFlushInterval = time.Second
	// logFinishWindow bounds the final flush after the handler returned,
	// which delays the completion.
	logFinishWindow = 10 * time.Second
	// logMaxConflicts: after this many offset mismatches in a row without
	// progress, the log is given up.
	logMaxConflicts = 8
)

// Log returns the attempt's log: what the handler writes to it is sent to the
// gateway and kept with the attempt (GET /v1/tasks/{id}/logs), for the task's
// owner to read. It is the same writer on every call, safe for concurrent
// use, and never fails: outside a Worker, and once the log is closed, writes
// are discarded.
//
// Output is buffered and sent in chunks of at most 64 KiB, cut between
// characters, whenever 64 KiB are buffered and at least every second; the
// runtime sends what is left after the handler returns, whatever its result,
// before it completes the attempt. Invalid UTF-8 is replaced with U+FFFD.
// Writes never wait for the gateway: while it cannot be reached, at most
// 1 MiB is kept and the oldest output beyond that is dropped, leaving a
// marker in the log. Once the gateway reports that the attempt's log reached
// its cap, further output is discarded.
func (t *LeasedTask) Log() io.Writer {
	if t.sink != nil {
		return t.sink.Log()
	}
	if t.lease == nil || t.lease.rt == nil {
		return io.Discard
	}
	return t.lease.rt.openLog(t.lease)
}

// logAnswer is the part of a LogAppendResult the writer acts upon.
type logAnswer struct {
	next      int64 // the offset the next chunk must start at
	truncated bool
}

// logOffsetError is a log-offset-mismatch answer: the gateway expects the
// next chunk at expected.
type logOffsetError struct {
	expected int64
	err      error
}

func (e *logOffsetError) Error() string { return e.err.Error() }
func (e *logOffsetError) Unwrap() error { return e.err }

// logSendFunc sends one chunk once. It returns a *logOffsetError for an offset
// mismatch and an error wrapping ErrLeaseLost when no more can be sent.
type logSendFunc func(ctx context.Context, offset int64, data []byte) (logAnswer, error)

// logWriter is one attempt's log. Its fields from mu on are guarded by mu.
type logWriter struct {
	send     logSendFunc
	log      *slog.Logger
	chunkMax *atomic.Int64 // shared by the runtime's attempts: shrinks on 413
	interval time.Duration

	stopped atomic.Bool   // nothing more is sent: writes are discarded at once
	wake    chan struct{} // a full chunk is buffered
	closing chan struct{} // closed by close: flush everything, then end
	done    chan struct{} // closed when run returns

	mu        sync.Mutex
	pending   []byte // valid UTF-8 not yet cut into a chunk
	partial   []byte // the incomplete character a write ended with
	inflight  []byte // the chunk being sent at offset next, nil for none
	next      int64  // the offset of inflight, or of pending when none
	retained  []byte // acknowledged data just before next
	dropped   int64  // bytes dropped since the last marker
	conflicts int    // offset mismatches in a row
	closed    bool
}

func newLogWriter(send logSendFunc, log *slog.Logger, chunkMax *atomic.Int64) *logWriter {
	if chunkMax == nil {
		chunkMax = new(atomic.Int64)
	}
	if chunkMax.Load() == 0 {
		chunkMax.Store(logChunkMax)
	}
	return &logWriter{
		send:     send,
		log:      log,
		chunkMax: chunkMax,
		interval: logFlushInterval,
		wake:     make(chan struct{}, 1),
		closing:  make(chan struct{}),
		done:     make(chan struct{}),
	}
}

// Write buffers p. It never blocks on the gateway and never fails.
func (w *logWriter) Write(p []byte) (int, error) {
	n := len(p)
	if n == 0 || w.stopped.Load() {
		return n, nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed || w.stopped.Load() {
		return n, nil
	}
	// A write larger than the buffer keeps only its end (from a character
	// start), and drops everything buffered before it.
	if len(p) > logPendingMax {
		cut := len(p) - logPendingMax
		for cut < len(p) && !utf8.RuneStart(p[cut]) {
			cut++
		}
		w.drop(int64(cut + len(w.partial) + len(w.pending)))
		w.pending, w.partial = nil, nil
		p = p[cut:]
	}
	w.appendValid(p, false)
	w.trim()
	if len(w.pending) >= int(w.chunkMax.Load()) {
		notify(w.wake)
	}
	return n, nil
}

// appendValid appends p (after the partial character kept from the last
// write) to pending, with invalid UTF-8 replaced by U+FFFD. Unless final, an
// incomplete character at the end is kept for the next write. w.mu is held.
func (w *logWriter) appendValid(p []byte, final bool) {
	if len(w.partial) > 0 {
		p = append(w.partial, p...)
		w.partial = nil
	}
	if utf8.Valid(p) {
		w.pending = append(w.pending, p...)
		return
	}
	for len(p) > 0 {
		r, size := utf8.DecodeRune(p)
		if r == utf8.RuneError && size <= 1 {
			if !final && !utf8.FullRune(p) {
				w.partial = append([]byte(nil), p...) // at most utf8.UTFMax-1 bytes
				return
			}
			w.pending = utf8.AppendRune(w.pending, utf8.RuneError)
			p = p[1:]
			continue
		}
		w.pending = append(w.pending, p[:size]...)
		p = p[size:]
	}
}

// trim drops the oldest pending bytes beyond logPendingMax. w.mu is held.
func (w *logWriter) trim() {
	over := len(w.pending) - logPendingMax
	if over <= 0 {
		return
	}
	n := min(max(over, logDropAtLeast), len(w.pending))
	for n < len(w.pending) && !utf8.RuneStart(w.pending[n]) {
		n++
	}
	w.drop(int64(n))
	w.pending = append(make([]byte, 0, len(w.pending)-n+logDropAtLeast), w.pending[n:]...)
}

// drop counts n bytes dropped; the next chunk starts with a marker. w.mu is
// held.
func (w *logWriter) drop(n int64) {
	if n <= 0 {
		return
	}
	if w.dropped == 0 {
		w.log.Warn("attempt log: the gateway is not keeping up; dropping the oldest buffered output")
	}
	w.dropped += n
}

func dropMarker(n int64) string {
	return "[workerclient: " + strconv.FormatInt(n, 10) + " bytes of this log were dropped]\n"
}

func lostMarker(n int64) string {
	return "[workerclient: " + strconv.FormatInt(n, 10) + " bytes of this log were lost]\n"
}

// cut makes the next chunk from pending, or returns false when nothing is
// pending. w.mu is held.
func (w *logWriter) cut() bool {
	if len(w.pending) == 0 && w.dropped == 0 {
		return false
	}
	limit := int(w.chunkMax.Load())
	var chunk []byte
	if w.dropped > 0 {
		chunk = append(chunk, dropMarker(w.dropped)...)
		w.dropped = 0
	}
	n := min(len(w.pending), max(limit-len(chunk), 0))
	if n < len(w.pending) {
		for n > 0 && !utf8.RuneStart(w.pending[n]) {
			n--
		}
	}
	w.inflight = append(chunk, w.pending[:n]...)
	w.pending = w.pending[n:]
	if len(w.pending) == 0 {
		w.pending = nil // let the buffer go
	}
	return true
}

// requeue puts the chunk in flight back in front of pending, to be cut again.
// w.mu is held.
func (w *logWriter) requeue() {
	if w.inflight != nil {
		w.pending = append(w.inflight, w.pending...)
		w.inflight = nil
	}
}

// acknowledged records that the gateway stored the chunk in flight and
// expects the next one at ans.next. w.mu is held.
func (w *logWriter) acknowledged(ans logAnswer) {
	w.retained = append(w.retained, w.inflight...)
	if over := len(w.retained) - logRetainMax; over > 0 {
		w.retained = append([]byte(nil), w.retained[over:]...)
	}
	w.next += int64(len(w.inflight))
	w.inflight = nil
	w.conflicts = 0
	if ans.next != w.next {
		w.resync(ans.next)
	}
}

// resync continues the log where the gateway expects it, at expected. The
// chunk in flight, if any, has been requeued. w.mu is held.
func (w *logWriter) resync(expected int64) {
	switch {
	case expected > w.next:
		// The gateway already has data we have not seen acknowledged (an
		// answer was lost): skip what it has.
		skip := expected - w.next
		n := int(min(skip, int64(len(w.pending))))
		for n < len(w.pending) && !utf8.RuneStart(w.pending[n]) {
			n++ // a chunk never ends inside a character: neither does skipping
		}
		w.retained = append(w.retained, w.pending[:n]...)
		if over := len(w.retained) - logRetainMax; over > 0 {
			w.retained = append([]byte(nil), w.retained[over:]...)
		}
		w.pending = w.pending[n:]
		w.log.Debug("attempt log: the gateway is ahead; skipping what it has", "bytes", skip)
	case expected < w.next:
		back := w.next - expected
		if back <= int64(len(w.retained)) {
			i := len(w.retained) - int(back)
			for i < len(w.retained) && !utf8.RuneStart(w.retained[i]) {
				i++
			}
			w.pending = append(append([]byte(nil), w.retained[i:]...), w.pending...)
			w.retained = w.retained[:len(w.retained)-int(back)]
			w.log.Debug("attempt log: the gateway is behind; resending", "bytes", back)
		} else {
			lost := back - int64(len(w.retained))
			w.log.Warn("attempt log: the gateway is behind further than what is kept; continuing where it is",
				"lost_bytes", lost, "expected_offset", expected)
			requeued := append([]byte(lostMarker(lost)), w.retained...)
			w.pending = append(requeued, w.pending...)
			w.retained = nil
		}
	}
	w.next = expected
}

// stop ends sending: the rest of the log is discarded. w.mu is held.
func (w *logWriter) stop() {
	w.stopped.Store(true)
	w.pending, w.partial, w.inflight, w.retained = nil, nil, nil, nil
	w.dropped = 0
}

// run sends the log until close, or until ctx ends. It returns once
// everything written before close was sent (or given up).
func (w *logWriter) run(ctx context.Context) {
	defer close(w.done)
	ticker := time.NewTicker(w.interval)
	defer ticker.Stop()
	for {
		final := false
		select {
		case <-ctx.Done():
			return
		case <-w.wake:
		case <-ticker.C:
		case <-w.closing:
			final = true
		}
		w.sendPending(ctx)
		if final || ctx.Err() != nil {
			return
		}
	}
}

// sendPending sends chunks until nothing is pending, sending stops, or ctx
// ends. Each chunk is retried on its own (transport errors, 429, 5xx);
// an offset mismatch or a 413 changes what is sent next, without waiting.
func (w *logWriter) sendPending(ctx context.Context) {
	policy := callRetry.withLog(func(err error, delay time.Duration) {
		w.log.Debug("attempt log: sending failed; retrying", "error", err, "retry_in", delay.String())
	})
	more := true
	for more {
		err := retry(ctx, policy, func(ctx context.Context) error {
			w.mu.Lock()
			if w.stopped.Load() || (w.inflight == nil && !w.cut()) {
				w.mu.Unlock()
				more = false
				return nil
			}
			offset, data := w.next, w.inflight
			w.mu.Unlock()

			ans, err := w.send(ctx, offset, data)

			w.mu.Lock()
			defer w.mu.Unlock()
			var offErr *logOffsetError
			var apiErr *APIError
			switch {
			case err == nil:
				w.acknowledged(ans)
				if ans.truncated {
					w.log.Info("attempt log: the gateway's cap for this attempt's log was reached; further output is dropped")
					w.stop()
				}
			case ctx.Err() != nil:
				return err // the chunk stays in flight
			case errors.Is(err, ErrLeaseLost):
				w.stop()
			case errors.As(err, &offErr):
				w.conflicts++
				if w.conflicts > logMaxConflicts {
					w.log.Warn("attempt log: the gateway keeps refusing the log's offsets; giving up", "error", err)
					w.stop()
					break
				}
				w.requeue()
				w.resync(offErr.expected)
			case errors.As(err, &apiErr) && apiErr.Status == http.StatusRequestEntityTooLarge && len(data) > logChunkMin:
				// The gateway accepts smaller chunks than this: from now on,
				// cut them smaller (the chunk was not stored, so it may change).
				smaller := int64(max(len(data)/2, logChunkMin))
				if smaller < w.chunkMax.Load() {
					w.chunkMax.Store(smaller)
				}
				w.log.Warn("attempt log: chunk too large for the gateway; sending smaller chunks", "bytes", smaller)
				w.requeue()
			case !isTransient(err) || errors.Is(err, errLogGone):
				w.log.Warn("attempt log: the gateway refused the log; dropping the rest", "error", err)
				w.stop()
			default:
				return err // retried
			}
			return nil
		})
		if err != nil {
			return // ctx ended
		}
	}
}

// errLogGone: the gateway will never accept this log (revoked worker).
var errLogGone = errors.New("workerclient: attempt log refused")

// start runs the sender in the background until close.
func (w *logWriter) start(ctx context.Context) {
	go w.run(ctx)
}

// close stops accepting writes and returns once the sender has sent what was
// written (or given up, or ctx ended: cancel ctx to cut the final flush).
func (w *logWriter) close() {
	w.mu.Lock()
	if !w.closed {
		w.closed = true
		if len(w.partial) > 0 && !w.stopped.Load() {
			w.appendValid(nil, true)
		}
		close(w.closing)
	}
	w.mu.Unlock()
	<-w.done
}

// ---- the runtime's side: one attempt's log ----

// openLog returns ls's log writer, starting it on first use.
func (r *runner) openLog(ls *lease) io.Writer {
	ls.logMu.Lock()
	defer ls.logMu.Unlock()
	if ls.logs != nil {
		return ls.logs
	}
	if ls.logsClosed {
		return io.Discard
	}
	w := newLogWriter(r.logSender(ls), ls.log, &r.w.logChunkMax)
	ctx, cancel := context.WithCancelCause(r.base)
	// A lost lease ends the log at once (a retry may be sleeping).
	stop := context.AfterFunc(ls.ctx, func() {
		if r.isLost(ls) {
			cancel(ErrLeaseLost)
		}
	})
	ls.logs, ls.logsCancel = w, func() { stop(); cancel(context.Canceled) }
	w.start(ctx)
	return w
}

// finishLogs sends what the handler left in its log, for at most
// logFinishWindow, and ends the log.
func (r *runner) finishLogs(ls *lease) {
	ls.logMu.Lock()
	w, cancel := ls.logs, ls.logsCancel
	ls.logsClosed = true
	ls.logMu.Unlock()
	if w == nil {
		return
	}
	t := time.AfterFunc(logFinishWindow, cancel)
	w.close()
	t.Stop()
	cancel()
	w.mu.Lock()
	unsent := len(w.pending) + len(w.inflight)
	w.mu.Unlock()
	if unsent > 0 && !r.isLost(ls) {
		ls.log.Warn("attempt log: could not send the end of the log", "unsent_bytes", unsent)
	}
}

// logSender sends ls's log chunks, applying the lease state each answer
// reports as a heartbeat answer would be applied (renewing nothing).
func (r *runner) logSender(ls *lease) logSendFunc {
	return func(ctx context.Context, offset int64, data []byte) (logAnswer, error) {
		if r.isLost(ls) {
			return logAnswer{}, fmt.Errorf("workerclient: attempt log: %w", ErrLeaseLost)
		}
		ctx, cancel := context.WithTimeout(ctx, callTimeout)
		defer cancel()
		sent := time.Now()
		resp, err := r.w.client.AppendLogsWithResponse(ctx, ls.id, &apiclient.AppendLogsParams{LeaseToken: ls.token},
			apiclient.LogChunk{Offset: offset, Data: string(data)})
		if err != nil {
			return logAnswer{}, fmt.Errorf("append log: %w", err)
		}
		if err := checkResponse("append log", resp.HTTPResponse, resp.Body); err != nil {
			var apiErr *APIError
			if !errors.As(err, &apiErr) {
				return logAnswer{}, err
			}
			switch {
			case isRevoked(err):
				r.revoked(err)
				return logAnswer{}, fmt.Errorf("%w: %w", errLogGone, err)
			case apiErr.Code == problem.LeaseLost:
				ls.log.Warn("the gateway refused the attempt's log: lease lost")
				r.markLost(ls)
				return logAnswer{}, fmt.Errorf("%w: %w", ErrLeaseLost, err)
			case apiErr.Code == problem.LogOffsetMismatch:
				if expected, ok := problemExpectedOffset(resp.Body); ok {
					return logAnswer{}, &logOffsetError{expected: expected, err: err}
				}
			}
			return logAnswer{}, err
		}
		if resp.JSON200 == nil {
			return logAnswer{}, fmt.Errorf("append log: unexpected answer %s", resp.Status())
		}
		res := resp.JSON200
		r.applyStatus(ls, &apiclient.LeaseStatus{
			AttemptId: ls.id, State: res.LeaseState, LeaseTtlSeconds: res.LeaseTtlSeconds,
			CancelRequested: res.LeaseState == stateCancelRequested,
		}, sent, false)
		return logAnswer{next: res.NextOffset, truncated: res.Truncated}, nil
	}
}

// problemExpectedOffset reads expected_offset from a log-offset-mismatch
// problem.
func problemExpectedOffset(body []byte) (int64, bool) {
	var p struct {
		ExpectedOffset *int64 `json:"expected_offset"`
	}
	if err := json.Unmarshal(body, &p); err != nil || p.ExpectedOffset == nil || *p.ExpectedOffset < 0 {
		return 0, false
	}
	return *p.ExpectedOffset, true
}
