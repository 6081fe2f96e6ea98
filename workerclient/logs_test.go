package workerclient

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/problem"
	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

// ---- the writer on its own, against a fake log store ----

// logSent is one chunk as sent.
type logSent struct {
	offset int64
	data   string
}

// logFault fails one send: with a transport error before or after the store
// took the chunk, or with a problem status.
type logFault struct {
	transport  bool
	afterStore bool
	status     int
	code       string
}

// fakeLogStore keeps one attempt's log the way the gateway does: a chunk is
// appended when it starts at the log's end, accepted again when it repeats
// stored data, and refused with the expected offset otherwise; past the cap
// the rest is dropped and every answer says truncated.
type fakeLogStore struct {
	mu        sync.Mutex
	data      []byte // what is kept
	offset    int64  // where the next chunk must start
	cap       int    // 0: none
	truncated bool
	maxChunk  int // larger chunks are answered 413; 0: none
	down      bool
	faults    []logFault
	sends     []logSent
}

func (s *fakeLogStore) send(_ context.Context, offset int64, data []byte) (logAnswer, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sends = append(s.sends, logSent{offset, string(data)})
	if s.down {
		return logAnswer{}, errors.New("connection refused")
	}
	var f logFault
	if len(s.faults) > 0 {
		f, s.faults = s.faults[0], s.faults[1:]
	}
	if f.transport && !f.afterStore {
		return logAnswer{}, errors.New("connection reset by peer")
	}
	if f.status != 0 {
		return logAnswer{}, &APIError{Op: "append log", Status: f.status, Code: f.code}
	}
	if s.maxChunk > 0 && len(data) > s.maxChunk {
		return logAnswer{}, &APIError{Op: "append log", Status: http.StatusRequestEntityTooLarge, Code: "payload-too-large"}
	}
	ans, err := s.append(offset, data)
	if err == nil && f.transport {
		return logAnswer{}, errors.New("connection reset by peer after the chunk was stored")
	}
	return ans, err
}

func (s *fakeLogStore) append(offset int64, data []byte) (logAnswer, error) {
	end := offset + int64(len(data))
	switch {
	case offset == s.offset:
		if !s.truncated {
			if room := s.cap - len(s.data); s.cap > 0 && len(data) > room {
				s.data, s.truncated = append(s.data, data[:room]...), true
			} else {
				s.data = append(s.data, data...)
			}
		}
		s.offset = end
		return logAnswer{next: end, truncated: s.truncated}, nil
	case end <= s.offset:
		if offset < int64(len(s.data)) {
			have := s.data[offset:min(end, int64(len(s.data)))]
			if !bytes.Equal(have, data[:len(have)]) {
				break
			}
		}
		return logAnswer{next: s.offset, truncated: s.truncated}, nil
	}
	return logAnswer{}, &logOffsetError{expected: s.offset,
		err: &APIError{Op: "append log", Status: http.StatusConflict, Code: problem.LogOffsetMismatch}}
}

// lose makes the store forget everything from offset to on.
func (s *fakeLogStore) lose(to int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.data, s.offset = s.data[:to], int64(to)
}

func (s *fakeLogStore) content() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return string(s.data)
}

func (s *fakeLogStore) sent() []logSent {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]logSent(nil), s.sends...)
}

func (s *fakeLogStore) set(f func(s *fakeLogStore)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(s)
}

// startLog runs a writer against s until the test ends.
func startLog(t *testing.T, s *fakeLogStore) *logWriter {
	w := newLogWriter(s.send, slog.New(slog.DiscardHandler), nil)
	w.start(t.Context())
	return w
}

// settle lets the writer's periodic flush run and finish.
func settle() {
	time.Sleep(logFlushInterval + time.Millisecond)
	synctest.Wait()
}

func write(t *testing.T, w io.Writer, s string) {
	t.Helper()
	n, err := io.WriteString(w, s)
	require.NoError(t, err)
	require.Equal(t, len(s), n)
}

// checkChunks asserts that every chunk holds at most limit bytes of valid
// UTF-8.
func checkChunks(t *testing.T, sends []logSent, limit int) {
	t.Helper()
	for _, c := range sends {
		assert.LessOrEqual(t, len(c.data), limit)
		assert.True(t, utf8.ValidString(c.data), "chunk at %d is cut between characters", c.offset)
	}
}

func TestLogChunksAreCutBetweenCharacters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &fakeLogStore{}
		w := startLog(t, s)
		// 300 KiB of 1- to 4-byte characters, written in pieces that split
		// characters.
		var text strings.Builder
		runes := []string{"a", "é", "€", "😀", "\n"}
		for text.Len() < 300<<10 {
			text.WriteString(runes[rand.IntN(len(runes))])
		}
		all := text.String()
		for rest := all; rest != ""; {
			n := min(len(rest), 1+rand.IntN(5000))
			write(t, w, rest[:n])
			rest = rest[n:]
		}
		w.close()

		assert.Equal(t, all, s.content())
		sends := s.sent()
		checkChunks(t, sends, logChunkMax)
		var at int64
		for _, c := range sends {
			assert.Equal(t, at, c.offset, "chunks follow each other")
			at += int64(len(c.data))
		}
		assert.GreaterOrEqual(t, len(sends), 5, "300 KiB take at least five 64 KiB chunks")
	})
}

func TestLogReplacesInvalidUTF8AndJoinsSplitCharacters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &fakeLogStore{}
		w := startLog(t, s)
		write(t, w, "ok \xff\xfe end ")
		write(t, w, "\xe2\x82") // half of €…
		settle()                // …not sent half
		write(t, w, "\xac\n")
		write(t, w, "\xf0\x9f") // never finished
		w.close()
		assert.Equal(t, "ok \uFFFD\uFFFD end €\n\uFFFD\uFFFD", s.content())
		checkChunks(t, s.sent(), logChunkMax)
	})
}

func TestLogIsFlushedEverySecondAndWhenAChunkFills(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &fakeLogStore{}
		w := startLog(t, s)
		write(t, w, "starting\n")
		time.Sleep(logFlushInterval / 2)
		synctest.Wait()
		assert.Empty(t, s.sent(), "a line is kept for up to a second")
		time.Sleep(logFlushInterval / 2)
		synctest.Wait()
		assert.Equal(t, []logSent{{0, "starting\n"}}, s.sent())

		write(t, w, strings.Repeat("x", logChunkMax)) // fills a chunk: sent at once
		synctest.Wait()
		require.Len(t, s.sent(), 2, "a full chunk is sent without waiting")
		assert.Len(t, s.sent()[1].data, logChunkMax)
		w.close()
		assert.Equal(t, "starting\n"+strings.Repeat("x", logChunkMax), s.content())
	})
}

func TestLogRetriesAChunkWithTheSameOffsetAndData(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &fakeLogStore{faults: []logFault{
			{status: http.StatusServiceUnavailable, code: "unavailable"},
			{transport: true},
			{transport: true, afterStore: true}, // stored, answer lost
		}}
		w := startLog(t, s)
		write(t, w, "line one\n")
		time.Sleep(time.Minute)
		synctest.Wait()
		write(t, w, "line two\n")
		w.close()

		assert.Equal(t, "line one\nline two\n", s.content())
		assert.Equal(t, []logSent{
			{0, "line one\n"}, {0, "line one\n"}, {0, "line one\n"}, {0, "line one\n"},
			{9, "line two\n"},
		}, s.sent(), "every retry repeats the chunk; the repeat of a stored one is accepted once")
	})
}

func TestLogResyncsWhenTheGatewayIsAhead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// The gateway already has the first ten bytes (an answer was lost).
		s := &fakeLogStore{data: []byte("0123456789"), offset: 10}
		w := startLog(t, s)
		write(t, w, "0123456789abcdef")
		w.close()
		assert.Equal(t, "0123456789abcdef", s.content())
		assert.Equal(t, []logSent{{0, "0123456789abcdef"}, {10, "abcdef"}}, s.sent(), "what it has is skipped")
	})
}

func TestLogResendsWhatTheGatewayLostWhenStillKept(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &fakeLogStore{}
		w := startLog(t, s)
		write(t, w, "first line\n")
		settle()
		write(t, w, "second line\n")
		settle()
		s.lose(6) // the gateway lost "line\nsecond line\n"
		write(t, w, "third line\n")
		w.close()

		assert.Equal(t, "first line\nsecond line\nthird line\n", s.content())
		sends := s.sent()
		assert.Equal(t, logSent{23, "third line\n"}, sends[2])
		assert.Equal(t, logSent{6, "line\nsecond line\nthird line\n"}, sends[3], "resent from where the gateway is")
	})
}

func TestLogSkipsAheadWhenWhatTheGatewayLostIsNoLongerKept(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &fakeLogStore{}
		w := startLog(t, s)
		first := strings.Repeat("a", 40<<10) + strings.Repeat("b", 60<<10)
		write(t, w, first)
		settle()
		s.lose(0) // the gateway lost it all
		write(t, w, "tail\n")
		w.close()

		lost := len(first) - logRetainMax
		want := fmt.Sprintf("[workerclient: %d bytes of this log were lost]\n", lost) + first[lost:] + "tail\n"
		got := s.content()
		assert.True(t, want == got, "what is kept is resent after a marker: got %d bytes %q…%q", len(got), got[:min(80, len(got))], got[max(0, len(got)-20):])
		checkChunks(t, s.sent(), logChunkMax)
	})
}

func TestLogStopsOnceTruncated(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &fakeLogStore{cap: 100}
		w := startLog(t, s)
		line := strings.Repeat("x", 79) + "\n"
		write(t, w, line)
		settle()
		write(t, w, line)
		settle()
		require.Len(t, s.sent(), 2)
		assert.True(t, w.stopped.Load(), "the second answer said truncated")

		for range 1000 {
			write(t, w, line) // dropped at once
		}
		w.mu.Lock()
		assert.Empty(t, w.pending, "nothing is buffered after truncation")
		w.mu.Unlock()
		settle()
		w.close()
		assert.Len(t, s.sent(), 2, "nothing is sent after truncation")
		assert.Equal(t, line+line[:20], s.content())
	})
}

func TestLogKeepsAtMostAMebibyteWhileTheGatewayIsDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &fakeLogStore{down: true}
		w := startLog(t, s)
		var last string
		for i := range 40_000 { // ~2.3 MiB
			last = fmt.Sprintf("line %06d of the log, written while the gateway is down\n", i)
			write(t, w, last)
			if i%1000 == 0 {
				time.Sleep(time.Second) // the sender retries meanwhile
				w.mu.Lock()
				kept := len(w.pending) + len(w.inflight) + len(w.retained)
				w.mu.Unlock()
				require.LessOrEqual(t, kept, logBufferMax)
			}
		}
		w.mu.Lock()
		kept := len(w.pending) + len(w.inflight) + len(w.retained)
		w.mu.Unlock()
		assert.LessOrEqual(t, kept, logBufferMax)
		assert.Greater(t, kept, logBufferMax/2)

		s.set(func(s *fakeLogStore) { s.down = false })
		time.Sleep(time.Minute)
		w.close()
		got := s.content()
		assert.True(t, strings.HasPrefix(got, "line 000000 "), "the chunk in flight is delivered as it was")
		assert.Contains(t, got, " bytes of this log were dropped]\n", "a marker says where output was dropped")
		assert.True(t, strings.HasSuffix(got, last), "the newest output is kept")
		assert.LessOrEqual(t, len(got), logBufferMax+100)
		checkChunks(t, s.sent(), logChunkMax)
	})
}

func TestLogChunksShrinkWhenTheGatewayRefusesTheirSize(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &fakeLogStore{maxChunk: 20 << 10}
		w := startLog(t, s)
		text := strings.Repeat("0123456789abcdef", 100<<10/16)
		write(t, w, text)
		w.close()
		assert.Equal(t, text, s.content())
		assert.Equal(t, int64(16<<10), w.chunkMax.Load())
	})
}

func TestLogGivesUpOnRefusal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &fakeLogStore{faults: []logFault{{status: http.StatusNotFound, code: "not-found"}}}
		w := startLog(t, s)
		write(t, w, "a\n")
		settle()
		write(t, w, "b\n")
		w.close()
		assert.Len(t, s.sent(), 1, "a refusal is not retried")
		assert.True(t, w.stopped.Load())
	})
}

// ---- through the runtime ----

// fakeLogs serves POST /v1/attempts/{id}/logs on a fakeGateway, one
// fakeLogStore per attempt, answering with the lease's state.
type fakeLogs struct {
	g *fakeGateway

	mu         sync.Mutex
	stores     map[uuid.UUID]*fakeLogStore
	afterClose int // appends that arrived after the attempt's completion
}

func newFakeLogs(g *fakeGateway) *fakeLogs {
	f := &fakeLogs{g: g, stores: map[uuid.UUID]*fakeLogStore{}}
	g.mux.HandleFunc("POST /v1/attempts/{id}/logs", f.handle)
	return f
}

func (f *fakeLogs) store(id uuid.UUID) *fakeLogStore {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stores[id] == nil {
		f.stores[id] = &fakeLogStore{}
	}
	return f.stores[id]
}

func (f *fakeLogs) handle(w http.ResponseWriter, r *http.Request) {
	id := uuid.MustParse(r.PathValue("id"))
	var chunk apiclient.LogChunk
	f.g.decode(r, &chunk)
	f.g.mu.Lock()
	st := f.g.status(id, r.Header.Get("Lease-Token"))
	done := len(f.g.completes[id]) > 0
	f.g.mu.Unlock()
	if done {
		f.mu.Lock()
		f.afterClose++
		f.mu.Unlock()
	}
	if st.State == "lost" || done {
		writeProblem(w, http.StatusConflict, "lease-lost")
		return
	}
	ans, err := f.store(id).send(r.Context(), chunk.Offset, []byte(chunk.Data))
	var offErr *logOffsetError
	if errors.As(err, &offErr) {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusConflict)
		fmt.Fprintf(w, `{"type":"about:blank","title":"Conflict","status":409,"code":"log-offset-mismatch","expected_offset":%d}`, offErr.expected)
		return
	}
	require.NoError(f.g.t, err)
	writeJSON(w, apiclient.LogAppendResult{NextOffset: ans.next, Truncated: ans.truncated, LeaseState: st.State, LeaseTtlSeconds: st.LeaseTtlSeconds})
}

func TestTaskLogIsSentBeforeTheCompletionWhateverTheOutcome(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newFakeGateway(t)
		f := newFakeLogs(g)
		w := g.runtime(Config{Slots: 2, Handler: func(ctx context.Context, task *LeasedTask) error {
			log := task.Log()
			assert.Same(t, log, task.Log(), "one writer per attempt")
			fmt.Fprintf(log, "probing %s\n", task.Payload)
			time.Sleep(3 * time.Second) // a periodic flush meanwhile
			fmt.Fprintf(log, "found %d ports\n", 2)
			if string(task.Payload) == `"fail"` {
				return errors.New("target unreachable")
			}
			return nil
		}})
		stop := runInBackground(t.Context(), w)
		ok, failing := g.enqueue(`"ok"`), g.enqueue(`"fail"`)
		waitFor(t, time.Minute, func() bool {
			return len(g.completionsOf(ok.AttemptId)) == 1 && len(g.completionsOf(failing.AttemptId)) == 1
		})
		require.NoError(t, stop())

		assert.Equal(t, "probing \"ok\"\nfound 2 ports\n", f.store(ok.AttemptId).content())
		assert.Equal(t, "probing \"fail\"\nfound 2 ports\n", f.store(failing.AttemptId).content())
		assert.Len(t, f.store(ok.AttemptId).sent(), 2, "one periodic flush, one final")
		assert.Zero(t, f.afterClose, "the log is flushed before the completion")
		assert.Equal(t, apiclient.AttemptOutcomeFailed, g.completionsOf(failing.AttemptId)[0].req.Outcome)
	})
}

func TestTaskLogAnswerReportingCancellationCancelsTheHandler(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newFakeGateway(t)
		f := newFakeLogs(g)
		started := make(chan struct{})
		causes := make(chan error, 1)
		w := g.runtime(Config{Handler: func(ctx context.Context, task *LeasedTask) error {
			close(started)
			fmt.Fprintln(task.Log(), "working")
			<-ctx.Done()
			causes <- context.Cause(ctx)
			fmt.Fprintln(task.Log(), "cancelled; cleaning up")
			return ctx.Err()
		}})
		g.interval = 3600 // no heartbeat tells it first
		stop := runInBackground(t.Context(), w)
		l := g.enqueue(`{}`)
		<-started
		g.setState(l.AttemptId, "cancel_requested")
		require.ErrorIs(t, <-causes, ErrCancelRequested)
		waitFor(t, time.Minute, func() bool { return len(g.completionsOf(l.AttemptId)) == 1 })
		require.NoError(t, stop())

		assert.Equal(t, apiclient.AttemptOutcomeCancelled, g.completionsOf(l.AttemptId)[0].req.Outcome)
		assert.Equal(t, "working\ncancelled; cleaning up\n", f.store(l.AttemptId).content(),
			"a cancelled attempt's log is still flushed")
	})
}

func TestTaskLogLeaseLostCancelsTheHandlerAndStopsTheLog(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newFakeGateway(t)
		f := newFakeLogs(g)
		started := make(chan struct{})
		causes := make(chan error, 1)
		w := g.runtime(Config{Handler: func(ctx context.Context, task *LeasedTask) error {
			close(started)
			fmt.Fprintln(task.Log(), "working")
			<-ctx.Done()
			causes <- context.Cause(ctx)
			fmt.Fprintln(task.Log(), "never sent")
			return nil
		}})
		g.interval = 3600
		stop := runInBackground(t.Context(), w)
		l := g.enqueue(`{}`)
		<-started
		g.setState(l.AttemptId, "lost")
		require.ErrorIs(t, <-causes, ErrLeaseLost)
		time.Sleep(time.Minute)
		require.NoError(t, stop())

		assert.Empty(t, g.completionsOf(l.AttemptId))
		assert.Empty(t, f.store(l.AttemptId).content())
		assert.Len(t, f.store(l.AttemptId).sent(), 0, "the lease-lost answer came before the store")
	})
}

func TestTaskLogOutsideARuntimeDiscards(t *testing.T) {
	t.Parallel()
	task := &LeasedTask{}
	n, err := task.Log().Write([]byte("x"))
	assert.Equal(t, 1, n)
	assert.NoError(t, err)
}
