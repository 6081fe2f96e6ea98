// Package webhookwatch is the background service noticing the webhook
// events computed from time (Watcher).
package webhookwatch

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/worker-gateway/gateway/server/services"
	"github.com/worker-gateway/gateway/store"
)

// Name is the service's name (its logs, spans and Server.Services).
const Name = "webhook-watcher"

// slack is added to the computed time a worker goes offline:
// the pass must run after that instant, not at it.
const slack = 250 * time.Millisecond

// retry is the pause after a failed query.
const retry = 2 * time.Second

// Watcher runs store.WatchWebhookConditions: it notices workers
// going offline and organizations left without an eligible worker, states
// computed from time that no write announces. While no target subscribes
// to either event it sleeps until a target changes (WakeWebhooks); while
// one does, it runs when the next seen worker would go offline, and at
// least once per online window (a starved organization is noticed within
// that).
type Watcher struct {
	services.Unit
	store  *store.Store
	logger *slog.Logger
	window func() time.Duration
	signal services.Signal
	// idle is true while it sleeps for lack of subscribers: only then does
	// a WakeWebhooks notice (sent for every new delivery too) wake it.
	idle atomic.Bool
}

// New builds a replica's watcher; window is how recently a worker must
// have been seen to be online.
func New(st *store.Store, window func() time.Duration, u services.Unit) *Watcher {
	return &Watcher{Unit: u, store: st, logger: u.Logger(), window: window, signal: services.NewSignal()}
}

func (w *Watcher) wake(always bool) {
	if !always && !w.idle.Load() {
		return
	}
	w.signal.Notify()
}

// Subscriptions: a target changed (or a delivery was queued).
func (w *Watcher) Subscriptions() []store.WakeupKind {
	return []store.WakeupKind{store.WakeWebhooks}
}

// Wake looks again if it sleeps for lack of subscribers.
func (w *Watcher) Wake(store.Wakeup) { w.wake(false) }

// CatchUp looks again: a change may have been missed.
func (w *Watcher) CatchUp() { w.wake(true) }

// Run watches until ctx ends.
func (w *Watcher) Run(ctx context.Context) error {
	return services.RunPasses(ctx, w.signal, func(ctx context.Context) time.Duration {
		// A target may be created while the pass runs: its notice must
		// not be dropped, so the pass counts as idle until it decides.
		w.idle.Store(true)
		sleep := w.pass(ctx)
		w.idle.Store(sleep == services.SleepUntilWoken)
		return sleep
	})
}

func (w *Watcher) pass(ctx context.Context) time.Duration {
	ctx, span := w.Iteration(ctx)
	defer span.End()
	window := w.window()
	res, err := w.store.WatchWebhookConditions(ctx, window)
	if err != nil {
		if ctx.Err() == nil {
			w.logger.Warn("watching webhook conditions failed; retrying", "error", err.Error())
		}
		return services.Jittered(retry)
	}
	if !res.Subscribed {
		return services.SleepUntilWoken
	}
	sleep := window
	if res.NextIn != nil {
		sleep = min(sleep, max(*res.NextIn, 0)+slack)
	}
	return sleep
}
