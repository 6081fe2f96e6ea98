// Package services is the roof of a gateway replica's background services:
// the sweeper, the schedule timer, the webhook deliverer and the others.
// Each is a Service; the replica's one list of them (server.DefaultServices)
// says which run, the replica's LISTEN connection wakes each by the kinds
// it subscribes to (Subscriber), and Group runs them until shutdown.
// Adding a service is adding an entry to that list: the server's New, Run
// and its listener need no edit.
package services

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/worker-gateway/gateway/store"
)

// Service is one background job of a replica. Run works until ctx ends
// (or returns early, its work done: a start-up step); an error it returns
// is logged, and the other services carry on.
type Service interface {
	Name() string
	Run(ctx context.Context) error
}

// Subscriber is a service woken by the database's wake-ups.
type Subscriber interface {
	Service
	// Subscriptions are the wake-up kinds it reacts to.
	Subscriptions() []store.WakeupKind
	// Wake is called, on the listener's goroutine, for each wake-up of a
	// kind it subscribes to: it must not block.
	Wake(w store.Wakeup)
	// CatchUp is called after every (re)connection of the LISTEN
	// connection, since notices sent while it was down are lost: it must
	// not block.
	CatchUp()
}

// DeadlineWatcher is a service acting on deadlines the database keeps
// (the sweeper: lease expiries, execution deadlines). A write of this
// replica that sets such a deadline tells it, through the group, so that
// it comes sooner than it planned when it must.
type DeadlineWatcher interface {
	Service
	// DueWithin says a deadline was just set that falls due within d: it
	// must not block (it runs on the request path).
	DueWithin(d time.Duration)
}

// GrantCounter is a service counting the leases this replica grants (the
// queue vacuum).
type GrantCounter interface {
	Service
	// Granted counts n leases granted: it must not block (it runs on the
	// request path).
	Granted(n int)
}

// Kicker is a service that can be asked to run a pass now (tests that
// move the database's clock by hand, operators' tools).
type Kicker interface {
	Service
	Kick()
}

// Metered is a service with metrics of its own; the replica registers
// them with its others.
type Metered interface {
	Service
	Collectors() []prometheus.Collector
}

// Group is the services a replica runs, in list order.
type Group struct {
	list   []Service
	logger *slog.Logger
	// byKind is the subscribers of each wake-up kind, in list order.
	byKind      map[store.WakeupKind][]Subscriber
	subscribers []Subscriber
	watchers    []DeadlineWatcher
	counters    []GrantCounter
}

// NewGroup groups the services; nil entries (a service its configuration
// leaves off) are skipped. Two services of one name are refused: the name
// labels their logs and spans.
func NewGroup(logger *slog.Logger, list ...Service) (*Group, error) {
	g := &Group{logger: logger, byKind: map[store.WakeupKind][]Subscriber{}}
	names := map[string]bool{}
	for _, s := range list {
		if s == nil {
			continue
		}
		if names[s.Name()] {
			return nil, errors.New("two background services are named " + s.Name())
		}
		names[s.Name()] = true
		g.list = append(g.list, s)
		if w, ok := s.(DeadlineWatcher); ok {
			g.watchers = append(g.watchers, w)
		}
		if c, ok := s.(GrantCounter); ok {
			g.counters = append(g.counters, c)
		}
		if sub, ok := s.(Subscriber); ok {
			g.subscribers = append(g.subscribers, sub)
			for _, k := range slices.Compact(slices.Sorted(slices.Values(sub.Subscriptions()))) {
				g.byKind[k] = append(g.byKind[k], sub)
			}
		}
	}
	return g, nil
}

// Names lists the services, in order (tests, logs).
func (g *Group) Names() []string {
	names := make([]string, len(g.list))
	for i, s := range g.list {
		names[i] = s.Name()
	}
	return names
}

// Wake hands a wake-up to the services subscribed to its kind.
func (g *Group) Wake(w store.Wakeup) {
	for _, s := range g.byKind[w.Kind] {
		s.Wake(w)
	}
}

// CatchUp tells every subscriber that wake-ups may have been missed.
func (g *Group) CatchUp() {
	for _, s := range g.subscribers {
		s.CatchUp()
	}
}

// DueWithin tells the deadline watchers that a deadline was just set that
// falls due within d.
func (g *Group) DueWithin(d time.Duration) {
	for _, w := range g.watchers {
		w.DueWithin(d)
	}
}

// Granted tells the grant counters that n leases were granted.
func (g *Group) Granted(n int) {
	for _, c := range g.counters {
		c.Granted(n)
	}
}

// Kick asks the named service for a pass now; false when no such service
// runs or it cannot be kicked.
func (g *Group) Kick(name string) bool {
	for _, s := range g.list {
		if k, ok := s.(Kicker); ok && s.Name() == name {
			k.Kick()
			return true
		}
	}
	return false
}

// Collectors are the metrics of every metered service.
func (g *Group) Collectors() []prometheus.Collector {
	var all []prometheus.Collector
	for _, s := range g.list {
		if m, ok := s.(Metered); ok {
			all = append(all, m.Collectors()...)
		}
	}
	return all
}

// Run runs every service, each on its own goroutine, and returns when all
// have returned: after ctx ends, for those that run until then.
func (g *Group) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, s := range g.list {
		wg.Go(func() {
			if err := s.Run(ctx); err != nil && ctx.Err() == nil {
				g.logger.Error("background service stopped", "service", s.Name(), "error", err.Error())
			}
		})
	}
	wg.Wait()
}
