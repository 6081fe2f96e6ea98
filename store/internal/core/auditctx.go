package core

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"sync"

	"github.com/google/uuid"
)

// Audit rows of control-plane changes are written in the change's own
// transaction, so a crash leaves both or neither. The caller (an HTTP
// handler, a CLI command) declares the record before it calls the verb
// (WithAudit); every verb's transaction goes through InTx, which writes the
// declared record just before COMMIT. What only the change knows — the id
// of what it created, a count — the verb adds inside its transaction
// (AuditTarget, AuditDetail). A verb that changed nothing (an idempotent
// replay) drops the record (AuditSkip).

type auditKey struct{}

// pendingAudit is the record a context carries to the next transaction.
type pendingAudit struct {
	mu      sync.Mutex
	event   AuditEvent
	details map[string]any
	// each gives every batch of a batched verb (InBatches) a row of its
	// own (auditBatch), instead of one row for the call.
	each    bool
	skip    bool
	written bool
}

// WithAudit returns ctx carrying the audit record of the change the store
// makes with it: the first transaction run with ctx that commits writes it.
// details is merged into the record's details.
func WithAudit(ctx context.Context, e AuditEvent, details map[string]any) context.Context {
	return context.WithValue(ctx, auditKey{}, &pendingAudit{event: e, details: maps.Clone(details)})
}

// WithAuditEach is WithAudit for a call that commits in batches: each
// committed transaction writes its own row.
func WithAuditEach(ctx context.Context, e AuditEvent, details map[string]any) context.Context {
	ctx = WithAudit(ctx, e, details)
	ctx.Value(auditKey{}).(*pendingAudit).each = true
	return ctx
}

// auditBatch gives one batch of a call declared WithAuditEach its own copy
// of the record, so that each committed batch writes a row with its own
// details, and an empty batch (AuditSkip) drops only its own.
func auditBatch(ctx context.Context) context.Context {
	p := pendingAuditOf(ctx)
	if p == nil || !p.each {
		return ctx
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return context.WithValue(ctx, auditKey{}, &pendingAudit{event: p.event, details: maps.Clone(p.details)})
}

// AuditWritten reports whether ctx declared an audit record and whether a
// committed transaction wrote it (or the verb dropped it as no change).
func AuditWritten(ctx context.Context) (declared, done bool) {
	p, _ := ctx.Value(auditKey{}).(*pendingAudit)
	if p == nil {
		return false, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return true, p.written || p.skip
}

func pendingAuditOf(ctx context.Context) *pendingAudit {
	p, _ := ctx.Value(auditKey{}).(*pendingAudit)
	return p
}

// AuditTarget names what a change created, known only inside its
// transaction; org fills the record's organization when it had none.
func AuditTarget(ctx context.Context, id uuid.UUID, org *uuid.UUID) {
	if p := pendingAuditOf(ctx); p != nil {
		p.mu.Lock()
		p.event.TargetID = id.String()
		if p.event.OrganizationID == nil && org != nil {
			o := *org
			p.event.OrganizationID = &o
		}
		p.mu.Unlock()
	}
}

// AuditWorkerActor names the worker a change was made by and to, for a
// worker known only inside the transaction (enrollment: the token names it).
func AuditWorkerActor(ctx context.Context, worker uuid.UUID) {
	if p := pendingAuditOf(ctx); p != nil {
		p.mu.Lock()
		p.event.ActorType, p.event.ActorID = "worker", worker.String()
		p.event.TargetType, p.event.TargetID = "worker", worker.String()
		p.mu.Unlock()
	}
}

// AuditTokenActor names the API token a change was made by and to, known
// only inside the transaction (a console sign-in: the token it exchanges).
func AuditTokenActor(ctx context.Context, token uuid.UUID, org *uuid.UUID) {
	if p := pendingAuditOf(ctx); p != nil {
		p.mu.Lock()
		p.event.ActorType, p.event.ActorID = "token", token.String()
		p.event.TargetType, p.event.TargetID = "api_token", token.String()
		if p.event.OrganizationID == nil && org != nil {
			o := *org
			p.event.OrganizationID = &o
		}
		p.mu.Unlock()
	}
}

// AuditDetail adds what the change decided to the record's details.
func AuditDetail(ctx context.Context, key string, value any) {
	if p := pendingAuditOf(ctx); p != nil {
		p.mu.Lock()
		if p.details == nil {
			p.details = map[string]any{}
		}
		p.details[key] = value
		p.mu.Unlock()
	}
}

// AuditSkip drops the record: the call changed nothing (a replay).
func AuditSkip(ctx context.Context) {
	if p := pendingAuditOf(ctx); p != nil {
		p.mu.Lock()
		p.skip = true
		p.mu.Unlock()
	}
}

// writePendingAudit writes ctx's record in tx, before its COMMIT, and
// reports whether it did; the caller marks it written once COMMIT succeeds.
func writePendingAudit(ctx context.Context, ex Executor) (bool, error) {
	p := pendingAuditOf(ctx)
	if p == nil {
		return false, nil
	}
	p.mu.Lock()
	e, skip := p.event, p.skip || p.written
	details := maps.Clone(p.details)
	p.mu.Unlock()
	if skip {
		return false, nil
	}
	if len(details) > 0 {
		raw, err := json.Marshal(details)
		if err != nil {
			return false, fmt.Errorf("audit details: %w", err)
		}
		e.Details = raw
	}
	if err := InsertAudit(ctx, ex, e); err != nil {
		return false, err
	}
	return true, nil
}

// auditCommitted marks ctx's record written after its transaction committed.
func auditCommitted(ctx context.Context) {
	if p := pendingAuditOf(ctx); p != nil {
		p.mu.Lock()
		p.written = true
		p.mu.Unlock()
	}
}
