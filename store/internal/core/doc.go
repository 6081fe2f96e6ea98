// Package core is what every part of the store stands on: the transaction
// runners (InTx, InPipelinedTx, InBatches: deadlock retry, failpoints
// around COMMIT, the declared audit row written before it, wake-ups sent
// with it), the closed set of error sentinels, the task, attempt and scan
// state machines and the SQL they render to, wake-up payloads, the audit
// context and record, creation idempotency, and the one webhook emitter
// (events.go).
//
// It imports nothing of the store: the lease engine (store/internal/lease)
// and the facade (package store) import it, never the other way
// (depguard's store-core-is-below rule). Callers outside the store reach
// it through the facade's names (store.ErrNotFound is core.ErrNotFound).
package core
