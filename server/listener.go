package server

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/worker-gateway/gateway/store"
)

// runListener holds the replica's one LISTEN connection and feeds the hub.
// Waiting on a notification is a blocking socket read: an idle replica runs
// no query. When the connection drops it reconnects with backoff and then
// does one catch-up pass — waking every waiter and re-arming timers for
// future available_at — since notices sent while it was away are lost.
func (s *Server) runListener(ctx context.Context, databaseURL string) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := s.listenOnce(ctx, databaseURL)
		s.hub.connected.Store(false)
		if ctx.Err() != nil {
			return
		}
		s.logger.Warn("LISTEN connection lost; reconnecting", "error", err.Error())
		sleep := time.Duration(rand.Int64N(int64(backoff))) + backoff/2
		select {
		case <-ctx.Done():
			return
		case <-time.After(sleep):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

func (s *Server) listenOnce(ctx context.Context, databaseURL string) error {
	conn, err := pgx.Connect(ctx, databaseURL)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{store.NotifyChannel}.Sanitize()); err != nil {
		return err
	}
	s.hub.connected.Store(true)
	s.hub.connects.Add(1)
	if err := s.catchUp(ctx); err != nil {
		return err
	}
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		w, err := store.ParseWakeup(n.Payload)
		if err != nil {
			s.logger.Warn("ignoring malformed wake-up", "error", err.Error())
			continue
		}
		s.identities.onNotice(w)
		s.services.Wake(w)
		s.hub.Notify(w)
	}
}

// catchUp runs after every (re)connection: notices may have been missed.
func (s *Server) catchUp(ctx context.Context) error {
	s.identities.forgetAll()
	s.hub.WakeAll()
	s.services.CatchUp()
	delays, err := s.store.NextLeasableIn(ctx)
	if err != nil {
		return err
	}
	for org, d := range delays {
		s.hub.WakeOrganizationAfter(org, d)
	}
	return nil
}
