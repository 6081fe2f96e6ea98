package groupcommit

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"
)

// blockingWriter is a group committer's write that records each group and
// holds it until released, so a test can abandon requests at a known point.
type blockingWriter struct {
	mu      sync.Mutex
	written [][]int
	started chan []int    // each group, as its write begins
	release chan struct{} // one receive lets one write finish
}

func newBlockingWriter() *blockingWriter {
	return &blockingWriter{started: make(chan []int, 16), release: make(chan struct{})}
}

func (w *blockingWriter) write(_ context.Context, group []int) []int {
	w.mu.Lock()
	w.written = append(w.written, slices.Clone(group))
	w.mu.Unlock()
	w.started <- slices.Clone(group)
	<-w.release
	out := make([]int, len(group))
	for i, p := range group {
		out[i] = p * 10
	}
	return out
}

// TestCommitterAbandonedRequests: a request whose caller gave up while
// it was queued is never written; one whose caller gave up while its group
// was being written is handed, with its result, to abandoned — nothing it
// produced is left without an owner.
func TestCommitterAbandonedRequests(t *testing.T) {
	w := newBlockingWriter()
	type handed struct{ param, result int }
	abandonedCh := make(chan handed, 4)
	g := New(Options[int, int]{Writers: 1, MaxGroup: 8, Timeout: time.Minute,
		Abandoned: func(_ context.Context, p, r int) { abandonedCh <- handed{p, r} }}, w.write)
	defer g.Close()

	// 1 is being written and its caller gives up meanwhile.
	ctx1, cancel1 := context.WithCancel(context.Background())
	done1 := make(chan error, 1)
	go func() { _, errs := g.Submit(ctx1, []int{1}); done1 <- errs[0] }()
	if got := <-w.started; !slices.Equal(got, []int{1}) {
		t.Fatalf("first group %v, want [1]", got)
	}
	// 2 queues behind it and its caller gives up before it is written.
	ctx2, cancel2 := context.WithCancel(context.Background())
	done2 := make(chan error, 1)
	go func() { _, errs := g.Submit(ctx2, []int{2}); done2 <- errs[0] }()
	waitUntil(t, func() bool { return len(g.queue) == 1 })
	cancel1()
	cancel2()
	if err := <-done1; !errors.Is(err, context.Canceled) {
		t.Fatalf("caller 1 got %v, want context.Canceled", err)
	}
	if err := <-done2; !errors.Is(err, context.Canceled) {
		t.Fatalf("caller 2 got %v, want context.Canceled", err)
	}
	// 3 is submitted by a caller who waits for it.
	done3 := make(chan []int, 1)
	go func() { out, _ := g.Submit(context.Background(), []int{3}); done3 <- out }()
	waitUntil(t, func() bool { return len(g.queue) == 2 })

	w.release <- struct{}{} // the group of 1 finishes
	if h := <-abandonedCh; h != (handed{1, 10}) {
		t.Fatalf("abandoned got %+v, want {1 10}", h)
	}
	if got := <-w.started; !slices.Equal(got, []int{3}) {
		t.Fatalf("second group %v, want [3]: the abandoned 2 is not written", got)
	}
	w.release <- struct{}{}
	if out := <-done3; !slices.Equal(out, []int{30}) {
		t.Fatalf("caller 3 got %v, want [30]", out)
	}
	select {
	case h := <-abandonedCh:
		t.Fatalf("abandoned called again with %+v", h)
	default:
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if !slices.EqualFunc(w.written, [][]int{{1}, {3}}, slices.Equal) {
		t.Fatalf("groups written %v, want [[1] [3]]", w.written)
	}
}

// waitUntil polls cond; the committer's queue has no other signal.
func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 10 s")
		}
		time.Sleep(time.Millisecond)
	}
}
