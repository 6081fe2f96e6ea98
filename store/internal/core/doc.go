// Package core is what every part of the store stands on: the transaction
// runners (InTx, InPipelinedTx, InBatches: deadlock retry, failpoints
// around COMMIT, the declared audit row written before it, wake-ups sent
// with it), the closed set of error sentinels, the task, attempt and scan
// state machines and the SQL they render to, wake-up payloads, the audit
// context and record, creation idempotency, the one webhook emitter
// (events.go), the Tenant and organization isolation's one SQL predicate
// with the worker visibility rule (tenant.go), the queue's rule (queue.go)
// and the plan settings of the walks (plans.go) — which the lease engine
// and the control plane both need — and the one page helper of every
// listing (listing.go, cursor.go).
//
// It imports nothing of the store: the lease engine (store/internal/lease),
// the control-plane domains (store/internal/secrets, webhooks) and the
// facade (package store) import it, never the other way
// (depguard's store-core-is-below rule). Callers outside the store reach
// it through the facade's names (store.ErrNotFound is core.ErrNotFound).
package core
