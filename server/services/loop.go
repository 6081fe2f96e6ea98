package services

import (
	"context"
	"time"
)

// Signal wakes a service's loop: any number of Notify calls while a pass
// runs make one more pass, never a queue of them. Notify never blocks, so
// the request path and the listener may call it. The zero Signal is not
// ready: use NewSignal.
type Signal struct{ c chan struct{} }

// NewSignal makes a Signal.
func NewSignal() Signal { return Signal{c: make(chan struct{}, 1)} }

// Notify asks for a pass now.
func (s Signal) Notify() {
	select {
	case s.c <- struct{}{}:
	default:
	}
}

// RunPasses runs pass at once, then again after the sleep it returned
// (SleepUntilWoken: only a signal) or as soon as wake is notified, until
// ctx ends: the loop of every service that works in passes.
func RunPasses(ctx context.Context, wake Signal, pass func(context.Context) time.Duration) error {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for ctx.Err() == nil {
		timer.Reset(pass(ctx))
		select {
		case <-ctx.Done():
		case <-wake.c:
		case <-timer.C:
		}
	}
	return nil
}
