package server

import (
	"container/heap"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/worker-gateway/gateway/store"
)

// Hub is one replica's registry of waiting long-polls. A waiting poll holds
// no database connection and runs no query: it sleeps on its channel until
// the hub wakes it (a NOTIFY arrived, a timer for a future available_at
// fired, shutdown) or its wait ends.
//
// The hub wakes only as many waiters as could win the announced tasks: an
// organization's notice of n new tasks wakes waiters serving it, in arrival
// order, until their free slots add up to n. A woken waiter that then leases
// nothing, while a due task is still queued, passes the notice on to the
// next one (Forward), so a waiter that cannot take the task (say, missing a
// capability) never strands it. A notice passed on visits each worker once:
// a task no waiting worker can take ends the chain instead of cycling
// through the waiters until their polls end.
//
// Missed wake-ups are impossible by construction: a poll reads the hub's
// sequence number before its acquisition transaction, and registering with
// that number wakes it at once if a notice for its organizations or worker
// arrived in between.
type Hub struct {
	mu       sync.Mutex
	seq      uint64
	byOrg    map[uuid.UUID][]*Waiter
	byWorker map[uuid.UUID][]*Waiter
	orgSeq   map[uuid.UUID]uint64
	// turns holds, per organization, the workers its current notice has
	// woken (reset by each new notice), so passing it on skips them.
	turns     map[uuid.UUID]map[uuid.UUID]struct{}
	workerSeq map[uuid.UUID]uint64
	// capacitySeq is per worker, for notices that only concern its polls
	// waiting for a free slot.
	capacitySeq map[uuid.UUID]uint64
	timers      timerHeap
	timer       *time.Timer
	closed      chan struct{}
	closeOnce   sync.Once
	waiting     atomic.Int64
	connected   atomic.Bool
	// connects counts LISTEN (re)connections, for tests and metrics.
	connects atomic.Int64
}

// Waiter is one registered long-poll.
type Waiter struct {
	worker uuid.UUID
	orgs   []uuid.UUID
	slots  int // tasks it may take now; 0 = waits only for its worker's wake-ups
	c      chan struct{}
	// woken is the sequence of the notice that woke it, for Forward.
	woken uint64
	// signalledAt is when the hub signalled it (wake latency metric); set
	// before the signal, so the woken poll reads it safely.
	signalledAt time.Time
}

// SignalledAt is when the hub last signalled the waiter (zero if never).
// Read it only after receiving from C.
func (w *Waiter) SignalledAt() time.Time { return w.signalledAt }

// C is closed-or-signalled when the waiter should try again.
func (w *Waiter) C() <-chan struct{} { return w.c }

// NewHub returns an empty hub.
func NewHub() *Hub {
	return &Hub{
		byOrg:       map[uuid.UUID][]*Waiter{},
		byWorker:    map[uuid.UUID][]*Waiter{},
		orgSeq:      map[uuid.UUID]uint64{},
		turns:       map[uuid.UUID]map[uuid.UUID]struct{}{},
		workerSeq:   map[uuid.UUID]uint64{},
		capacitySeq: map[uuid.UUID]uint64{},
		closed:      make(chan struct{}),
	}
}

// Seq is the hub's current notice sequence; read it before acquiring.
func (h *Hub) Seq() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.seq
}

// Closed is closed when the replica shuts down: every waiter returns.
func (h *Hub) Closed() <-chan struct{} { return h.closed }

// Close answers every waiter at once and stops the timer (shutdown).
func (h *Hub) Close() {
	h.closeOnce.Do(func() {
		close(h.closed)
		h.StopTimers()
	})
}

// Waiting is the number of registered waiters.
func (h *Hub) Waiting() int { return int(h.waiting.Load()) }

// Connected reports whether the LISTEN connection feeding the hub is up.
func (h *Hub) Connected() bool { return h.connected.Load() }

// Register adds a waiter for a worker serving orgs with slots free. If a
// notice for any of them arrived after sinceSeq, the waiter is signalled at
// once. The caller must Unregister it when done.
func (h *Hub) Register(worker uuid.UUID, orgs []uuid.UUID, slots int, sinceSeq uint64) *Waiter {
	w := &Waiter{worker: worker, orgs: orgs, slots: slots, c: make(chan struct{}, 1)}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.waiting.Add(1)
	missed := h.workerSeq[worker] > sinceSeq || (slots == 0 && h.capacitySeq[worker] > sinceSeq)
	h.byWorker[worker] = append(h.byWorker[worker], w)
	if slots > 0 {
		for _, o := range orgs {
			h.byOrg[o] = append(h.byOrg[o], w)
			missed = missed || h.orgSeq[o] > sinceSeq
		}
	}
	if missed {
		w.woken = h.seq
		h.signal(w)
	}
	return w
}

// Unregister removes a waiter (woken or not).
func (h *Hub) Unregister(w *Waiter) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.remove(w)
}

func (h *Hub) remove(w *Waiter) {
	if removeWaiter(h.byWorker, w.worker, w) {
		h.waiting.Add(-1)
	}
	for _, o := range w.orgs {
		removeWaiter(h.byOrg, o, w)
	}
}

func removeWaiter(m map[uuid.UUID][]*Waiter, key uuid.UUID, w *Waiter) bool {
	list := m[key]
	for i, x := range list {
		if x == w {
			list = append(list[:i], list[i+1:]...)
			if len(list) == 0 {
				delete(m, key)
			} else {
				m[key] = list
			}
			return true
		}
	}
	return false
}

// signal wakes a waiter and removes it, so one notice wakes it once.
func (h *Hub) signal(w *Waiter) {
	if len(w.c) == 0 {
		w.signalledAt = time.Now()
	}
	select {
	case w.c <- struct{}{}:
	default:
	}
	h.remove(w)
}

// Notify applies one wake-up from the LISTEN connection.
func (h *Hub) Notify(n store.Wakeup) {
	switch n.Kind {
	case store.WakeOrganization:
		h.WakeOrganization(n.Organization, n.Count)
	case store.WakeOrganizationAt:
		h.WakeOrganizationAfter(n.Organization, n.Delay)
	case store.WakeWorker, store.WakeWorkerRevoked:
		h.WakeWorker(n.Worker)
	case store.WakeCapacity:
		h.WakeCapacity(n.Worker)
	}
}

// WakeOrganization wakes waiters serving org until their free slots cover
// count tasks.
func (h *Hub) WakeOrganization(org uuid.UUID, count int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seq++
	h.newNoticeLocked(org)
	h.wakeOrgLocked(org, max(count, 1), h.seq)
}

// newNoticeLocked starts organization org's notice h.seq.
func (h *Hub) newNoticeLocked(org uuid.UUID) {
	h.orgSeq[org] = h.seq
	delete(h.turns, org)
}

// wakeOrgLocked wakes waiters of org whose worker has not had a turn at
// notice seq yet, in arrival order, until their free slots cover count.
func (h *Hub) wakeOrgLocked(org uuid.UUID, count int, seq uint64) {
	turns := h.turns[org]
	if turns == nil {
		turns = map[uuid.UUID]struct{}{}
		h.turns[org] = turns
	}
	for count > 0 {
		i := slices.IndexFunc(h.byOrg[org], func(w *Waiter) bool {
			_, had := turns[w.worker]
			return !had
		})
		if i < 0 {
			return
		}
		w := h.byOrg[org][i]
		turns[w.worker] = struct{}{}
		w.woken = seq
		count -= w.slots
		h.signal(w)
	}
}

// Forward passes a notice on after the waiter it woke leased nothing: the
// next waiter of each of its organizations whose worker has not had a turn
// at it gets one. Call it only while a due task is still queued: if another
// poll took the task, there is nothing to pass on.
func (h *Hub) Forward(w *Waiter) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, o := range w.orgs {
		if h.orgSeq[o] == w.woken && w.woken != 0 {
			h.wakeOrgLocked(o, 1, w.woken)
		}
	}
}

// WakeWorker wakes every waiting poll of one worker.
func (h *Hub) WakeWorker(worker uuid.UUID) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seq++
	h.workerSeq[worker] = h.seq
	for _, w := range append([]*Waiter(nil), h.byWorker[worker]...) {
		w.woken = h.seq
		h.signal(w)
	}
}

// WakeCapacity wakes a worker's polls that wait for a free slot; its
// polls that have slots are waiting for tasks, which a freed slot does not
// bring.
func (h *Hub) WakeCapacity(worker uuid.UUID) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seq++
	h.capacitySeq[worker] = h.seq
	for _, w := range append([]*Waiter(nil), h.byWorker[worker]...) {
		if w.slots == 0 {
			w.woken = h.seq
			h.signal(w)
		}
	}
}

// WakeAll wakes every waiter (after the LISTEN connection was re-established
// and notices may have been missed).
func (h *Hub) WakeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seq++
	for worker, list := range h.byWorker {
		h.workerSeq[worker] = h.seq
		for _, w := range append([]*Waiter(nil), list...) {
			w.woken = h.seq
			h.signal(w)
		}
	}
}

// timerSlack delays timer wake-ups slightly so a waiter never looks before
// the database considers the task leasable.
const timerSlack = 5 * time.Millisecond

// WakeOrganizationAfter arms a timer to wake one waiter of org after a delay
// (a retry back-off or a delayed task becoming leasable). Delays are relative
// and measured on the local monotonic clock, so wall-clock skew cannot move
// them.
func (h *Hub) WakeOrganizationAfter(org uuid.UUID, delay time.Duration) {
	if delay <= 0 {
		h.WakeOrganization(org, 1)
		return
	}
	at := time.Now().Add(delay + timerSlack)
	h.mu.Lock()
	defer h.mu.Unlock()
	heap.Push(&h.timers, timerEntry{at: at, org: org})
	h.armLocked()
}

// armLocked points the single timer at the earliest entry.
func (h *Hub) armLocked() {
	if len(h.timers) == 0 {
		return
	}
	d := time.Until(h.timers[0].at)
	if h.timer == nil {
		h.timer = time.AfterFunc(d, h.fireTimers)
		return
	}
	h.timer.Reset(d)
}

func (h *Hub) fireTimers() {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := time.Now()
	for len(h.timers) > 0 && !h.timers[0].at.After(now) {
		e := heap.Pop(&h.timers).(timerEntry)
		h.seq++
		h.newNoticeLocked(e.org)
		h.wakeOrgLocked(e.org, 1, h.seq)
	}
	h.armLocked()
}

// StopTimers stops the hub's timer (shutdown).
func (h *Hub) StopTimers() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.timer != nil {
		h.timer.Stop()
	}
}

type timerEntry struct {
	at  time.Time
	org uuid.UUID
}

type timerHeap []timerEntry

func (t timerHeap) Len() int           { return len(t) }
func (t timerHeap) Less(i, j int) bool { return t[i].at.Before(t[j].at) }
func (t timerHeap) Swap(i, j int)      { t[i], t[j] = t[j], t[i] }
func (t *timerHeap) Push(x any)        { *t = append(*t, x.(timerEntry)) }
func (t *timerHeap) Pop() any {
	old := *t
	e := old[len(old)-1]
	*t = old[:len(old)-1]
	return e
}
