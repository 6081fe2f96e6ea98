package server

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"time"
)

// The security events the audit log records, each one action.
const (
	actionTokenRefused          = "security.token_refused"
	actionCertificateRefused    = "security.certificate_refused"
	actionRevokedWorkerRefused  = "security.revoked_worker_refused"
	actionFencingRejected       = "security.fencing_rejected"
	actionEnrollmentRefused     = "security.enrollment_refused"
	actionEnrollmentRateLimited = "security.enrollment_rate_limited"
)

// securityEvent is one refused request worth an audit row.
type securityEvent struct {
	action string
	// source is the refused peer's source address (see sourceAddress).
	source             string
	actorType, actorID string
	// worker, for refusals of an authenticated worker (fencing), counts
	// them per worker too: workers are registered, so this cannot grow
	// without bound, and the rows keep naming the worker.
	worker  string
	details map[string]any
}

// overflowSource stands for every source address a full throttle no longer
// tells apart.
const overflowSource = "other"

// throttleKey is what refusals are counted by: one kind from one source
// address (and one authenticated worker). Not the port — a new connection
// per attempt must not earn a new row — and not a presented credential,
// which the attacker chooses.
type throttleKey struct{ action, source, worker string }

// throttleWindow is one key's counting window.
type throttleWindow struct {
	started, ends time.Time
	// counted is the refusals since the window's last row.
	counted int
	// lastSource is the latest address counted, for overflow windows.
	lastSource string
}

// securityThrottle keeps a flood of refused requests from becoming a flood
// of audit rows while keeping its size on record. The first refusal of a
// kind from a source address is written at once; the ones after it within
// window are only counted, and when the window ends one row gives their
// number (and a new window starts, so a sustained flood writes one row per
// window); a window that counted nothing ends the key. At most maxSources
// keys are tracked: past that, each kind's refusals from further addresses
// are counted together under the source "other", so many addresses cannot
// grow memory or the log. Counts are written by run when their window ends
// and by close at shutdown; after close, refusals are written one by one.
type securityThrottle struct {
	window     time.Duration
	maxSources int
	// write records one row: with the request's context for a refusal
	// written at once (its request id), with none of a request for a count.
	write func(ctx context.Context, e securityEvent)

	mu      sync.Mutex
	windows map[throttleKey]*throttleWindow
	closed  bool
	// wake tells run that a window opened while none was open.
	wake chan struct{}
}

func newSecurityThrottle(window time.Duration, maxSources int, write func(context.Context, securityEvent)) *securityThrottle {
	return &securityThrottle{window: window, maxSources: max(maxSources, 1), write: write,
		windows: map[throttleKey]*throttleWindow{}, wake: make(chan struct{}, 1)}
}

// record audits a refusal: at once if it opens a window, else by counting.
func (t *securityThrottle) record(ctx context.Context, e securityEvent) {
	now := time.Now()
	first, overflow, ended := t.note(e, now)
	for _, row := range ended {
		t.write(context.Background(), row) // a count row belongs to no one request
	}
	if first {
		e.details = withCount(e, 1)
		if overflow {
			e.details["overflow"] = true
		}
		t.write(ctx, e)
	}
}

// note counts e and says whether it opens a window (and so is written
// now) and whether it was counted under overflowSource; it also returns
// the count row of its key's window if that ended but run has not closed
// it yet.
func (t *securityThrottle) note(e securityEvent, now time.Time) (first, overflow bool, ended []securityEvent) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed || t.window <= 0 {
		return true, false, nil
	}
	key := throttleKey{e.action, e.source, e.worker}
	w, ok := t.windows[key]
	if !ok && len(t.windows) >= t.maxSources {
		key, overflow = throttleKey{e.action, overflowSource, ""}, true
		w, ok = t.windows[key]
	}
	if ok && !now.Before(w.ends) {
		if row, counted := t.endLocked(key, w, now); counted {
			ended = append(ended, row)
		} else {
			ok = false
		}
	}
	if ok {
		w.counted++
		w.lastSource = e.source
		return false, overflow, ended
	}
	if len(t.windows) == 0 {
		select {
		case t.wake <- struct{}{}:
		default:
		}
	}
	t.windows[key] = &throttleWindow{started: now, ends: now.Add(t.window), lastSource: e.source}
	return true, overflow, ended
}

// endLocked ends key's window: with nothing counted the key is forgotten;
// otherwise it returns the count row and opens the next window.
func (t *securityThrottle) endLocked(key throttleKey, w *throttleWindow, now time.Time) (row securityEvent, counted bool) {
	if w.counted == 0 {
		delete(t.windows, key)
		return securityEvent{}, false
	}
	row = countRow(key, w, now)
	*w = throttleWindow{started: now, ends: now.Add(t.window)}
	return row, true
}

// countRow is the audit row for the refusals a window counted.
func countRow(key throttleKey, w *throttleWindow, now time.Time) securityEvent {
	span := now.Sub(w.started)
	if span >= time.Second {
		span = span.Round(time.Second)
	} else {
		span = span.Round(time.Millisecond)
	}
	details := map[string]any{
		"source_address": key.source,
		"kind":           kindOf(key.action),
		"count":          w.counted,
		"window_seconds": now.Sub(w.started).Seconds(),
		"summary":        fmt.Sprintf("%d refusals in the last %s", w.counted, span),
	}
	if key.source == overflowSource {
		details["overflow"] = true
		details["last_source_address"] = w.lastSource
	}
	row := securityEvent{action: key.action, source: key.source, actorType: "anonymous", actorID: key.source, details: details}
	if key.worker != "" {
		row.actorType, row.actorID, row.worker = "worker", key.worker, key.worker
	}
	return row
}

// due ends the windows that have ended and returns their count rows and how
// long until the next one ends (0 when none is open).
func (t *securityThrottle) due(now time.Time) (rows []securityEvent, next time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var earliest time.Time
	for key, w := range t.windows {
		if !now.Before(w.ends) {
			if row, counted := t.endLocked(key, w, now); counted {
				rows = append(rows, row)
			} else {
				continue
			}
		}
		if earliest.IsZero() || w.ends.Before(earliest) {
			earliest = w.ends
		}
	}
	if !earliest.IsZero() {
		next = max(earliest.Sub(now), time.Millisecond)
	}
	return rows, next
}

// close returns the count rows of every open window; refusals after it are
// written one by one.
func (t *securityThrottle) close(now time.Time) []securityEvent {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
	var rows []securityEvent
	for key, w := range t.windows {
		if w.counted > 0 {
			rows = append(rows, countRow(key, w, now))
		}
	}
	clear(t.windows)
	return rows
}

// run writes count rows as windows end, and the pending ones when ctx ends.
// It sleeps while no window is open.
func (t *securityThrottle) run(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		rows, next := t.due(time.Now())
		for _, row := range rows {
			t.write(ctx, row)
		}
		if next > 0 {
			timer.Reset(next)
		}
		select {
		case <-ctx.Done():
			// The counts must reach the log even though the replica stops.
			flushCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			for _, row := range t.close(time.Now()) {
				t.write(flushCtx, row)
			}
			cancel()
			return
		case <-timer.C:
		case <-t.wake:
		}
	}
}

// withCount is e's details for the row of a single refusal.
func withCount(e securityEvent, n int) map[string]any {
	details := make(map[string]any, len(e.details)+3)
	for k, v := range e.details {
		details[k] = v
	}
	details["source_address"] = e.source
	details["kind"] = kindOf(e.action)
	details["count"] = n
	return details
}

func kindOf(action string) string { return strings.TrimPrefix(action, "security.") }

// sourceAddress is what refusals are counted against: the peer's IPv4
// address, or its IPv6 /64 — one host or customer usually holds a whole
// /64, and counting single IPv6 addresses would let it spread its refusals
// over 2^64 keys. The port is left out: every new connection has a new one.
func sourceAddress(remoteAddr string) string {
	addr, err := netip.ParseAddrPort(remoteAddr)
	if err != nil {
		return remoteAddr // not ip:port (a listener of another kind): use it whole
	}
	ip := addr.Addr().Unmap().WithZone("")
	if ip.Is4() {
		return ip.String()
	}
	return netip.PrefixFrom(ip, 64).Masked().String()
}
