package server

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/store"
)

// fakeLookup counts database lookups; the identity it returns can be
// changed between calls.
type fakeLookup struct {
	calls    atomic.Int64
	identity atomic.Pointer[store.WorkerIdentity]
	// during runs inside the lookup, as if a change raced with it.
	during func()
}

func (f *fakeLookup) lookup(context.Context, string) (store.WorkerIdentity, error) {
	f.calls.Add(1)
	if f.during != nil {
		f.during()
	}
	return *f.identity.Load(), nil
}

func newTestCache(t *testing.T, id store.WorkerIdentity, listening *atomic.Bool) (*identityCache, *fakeLookup) {
	t.Helper()
	f := &fakeLookup{}
	f.identity.Store(&id)
	return newIdentityCache(f.lookup, listening.Load, time.Hour), f
}

func TestIdentityCache(t *testing.T) {
	worker := uuid.New()
	current := store.WorkerIdentity{ID: worker, Enabled: true, Current: true}
	var listening atomic.Bool
	listening.Store(true)
	ctx := t.Context()

	t.Run("a current certificate is looked up once", func(t *testing.T) {
		c, f := newTestCache(t, current, &listening)
		for range 3 {
			id, err := c.get(ctx, "fp")
			require.NoError(t, err)
			require.Equal(t, worker, id.ID)
		}
		require.EqualValues(t, 1, f.calls.Load())
	})

	t.Run("notices about the worker drop its entries", func(t *testing.T) {
		for _, kind := range []store.WakeupKind{store.WakeWorkerRevoked, store.WakeIdentityChanged, store.WakeWorker} {
			c, f := newTestCache(t, current, &listening)
			_, _ = c.get(ctx, "fp")
			revoked := current
			revoked.Revoked = true
			f.identity.Store(&revoked)
			c.onNotice(store.Wakeup{Kind: kind, Worker: worker})
			id, err := c.get(ctx, "fp")
			require.NoError(t, err)
			require.True(t, id.Revoked, "after notice kind %d the database's answer counts", kind)
			require.EqualValues(t, 2, f.calls.Load())
		}
	})

	t.Run("a capacity notice or another worker's keeps them", func(t *testing.T) {
		c, f := newTestCache(t, current, &listening)
		_, _ = c.get(ctx, "fp")
		c.onNotice(store.Wakeup{Kind: store.WakeCapacity, Worker: worker})
		c.onNotice(store.Wakeup{Kind: store.WakeWorkerRevoked, Worker: uuid.New()})
		_, _ = c.get(ctx, "fp")
		require.EqualValues(t, 1, f.calls.Load())
	})

	t.Run("revoked workers and previous certificates are never kept", func(t *testing.T) {
		for _, id := range []store.WorkerIdentity{{ID: worker, Revoked: true, Current: true}, {ID: worker, Enabled: true}} {
			c, f := newTestCache(t, id, &listening)
			_, _ = c.get(ctx, "fp")
			_, _ = c.get(ctx, "fp")
			require.EqualValues(t, 2, f.calls.Load())
		}
	})

	t.Run("a lookup racing with a drop is not kept", func(t *testing.T) {
		c, f := newTestCache(t, current, &listening)
		f.during = func() { c.forgetWorker(worker) }
		_, _ = c.get(ctx, "fp")
		f.during = nil
		_, _ = c.get(ctx, "fp")
		require.EqualValues(t, 2, f.calls.Load())
	})

	t.Run("without LISTEN every request is looked up", func(t *testing.T) {
		var down atomic.Bool
		c, f := newTestCache(t, current, &down)
		_, _ = c.get(ctx, "fp")
		_, _ = c.get(ctx, "fp")
		require.EqualValues(t, 2, f.calls.Load())
	})

	t.Run("a reconnection drops everything", func(t *testing.T) {
		c, f := newTestCache(t, current, &listening)
		_, _ = c.get(ctx, "fp")
		c.forgetAll()
		_, _ = c.get(ctx, "fp")
		require.EqualValues(t, 2, f.calls.Load())
	})
}
