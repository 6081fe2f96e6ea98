package server

import (
	"context"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/worker-gateway/gateway/store"
)

// identityCache remembers which worker a certificate fingerprint belongs to,
// so a worker's hot-path requests (poll, heartbeat, complete) do not each
// start with a database lookup.
//
// It never decides anything the database does not also check: every worker
// write is fenced in SQL on the worker and its lease, and a revocation ends
// the worker's leases in its own transaction, so a stale entry could at
// worst let a revoked worker's request reach a statement that then refuses
// it. The cache keeps even that window closed in practice:
//   - entries are used only while this replica's LISTEN connection is up;
//     every notice about a worker's identity (revoked, certificates changed,
//     enabled or disabled) drops its entries, and a reconnection, after
//     which notices may have been missed, drops them all;
//   - the replica that makes such a change drops the entries at once itself;
//   - a lookup that started before a drop is not stored (generation check);
//   - only current certificates of unrevoked workers are stored, for at most
//     ttl; a renewal's previous certificate is looked up every time.
type identityCache struct {
	lookup  func(ctx context.Context, fingerprint string) (store.WorkerIdentity, error)
	usable  func() bool // the LISTEN connection is up
	ttl     time.Duration
	maxSize int

	mu         sync.Mutex
	generation uint64
	entries    map[string]cachedIdentity
}

type cachedIdentity struct {
	identity store.WorkerIdentity
	expires  time.Time
}

func newIdentityCache(lookup func(context.Context, string) (store.WorkerIdentity, error), usable func() bool, ttl time.Duration) *identityCache {
	return &identityCache{lookup: lookup, usable: usable, ttl: ttl, maxSize: 100_000, entries: map[string]cachedIdentity{}}
}

// get resolves a fingerprint, from the cache when it may.
func (c *identityCache) get(ctx context.Context, fingerprint string) (store.WorkerIdentity, error) {
	if c.ttl <= 0 || !c.usable() {
		return c.lookup(ctx, fingerprint)
	}
	now := time.Now()
	c.mu.Lock()
	e, ok := c.entries[fingerprint]
	generation := c.generation
	c.mu.Unlock()
	if ok && now.Before(e.expires) {
		return e.identity, nil
	}
	id, err := c.lookup(ctx, fingerprint)
	if err != nil || id.Revoked || !id.Current {
		return id, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.generation == generation {
		if len(c.entries) >= c.maxSize {
			clear(c.entries) // rare; a bound, not a policy
		}
		c.entries[fingerprint] = cachedIdentity{identity: id, expires: now.Add(c.ttl)}
	}
	return id, nil
}

// forgetWorker drops every entry of a worker.
func (c *identityCache) forgetWorker(worker uuid.UUID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.generation++
	for fp, e := range c.entries {
		if e.identity.ID == worker {
			delete(c.entries, fp)
		}
	}
}

// forgetAll drops every entry.
func (c *identityCache) forgetAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.generation++
	clear(c.entries)
}

// onNotice drops what a database notice makes stale.
func (c *identityCache) onNotice(w store.Wakeup) {
	switch w.Kind {
	case store.WakeWorker, store.WakeWorkerRevoked, store.WakeIdentityChanged:
		c.forgetWorker(w.Worker)
	}
}
