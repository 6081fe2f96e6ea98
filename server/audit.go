package server

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/google/uuid"

	"github.com/worker-gateway/gateway/problem"
	"github.com/worker-gateway/gateway/server/api"
	"github.com/worker-gateway/gateway/store"
)

// audit declares the audit record of the control-plane change the handler
// makes next with the returned context: the store writes it in that
// change's own transaction, before COMMIT (store.WithAudit), so a crash
// leaves both or neither. What only the change knows (the id it created,
// the organization of what an id names, a count) the store fills in.
// Declare it just before the changing call, not before reads.
func (s *Server) audit(ctx context.Context, action, targetType, targetID string, org *uuid.UUID, details map[string]any) context.Context {
	actorType, actorID := "anonymous", ""
	if st := authFrom(ctx); st.principal != nil {
		actorType, actorID = "token", st.principal.TokenID.String()
	} else if st.worker != nil {
		actorType, actorID = "worker", st.worker.ID.String()
	}
	return s.auditAs(ctx, actorType, actorID, action, targetType, targetID, org, details)
}

// auditAs is audit with the actor named.
func (s *Server) auditAs(ctx context.Context, actorType, actorID, action, targetType, targetID string, org *uuid.UUID, details map[string]any) context.Context {
	ctx = store.WithAudit(ctx, store.AuditEvent{ActorType: actorType, ActorID: actorID, Action: action,
		TargetType: targetType, TargetID: targetID, OrganizationID: org, RequestID: requestIDFrom(ctx)}, details)
	if d, ok := ctx.Value(auditDeclaredKey{}).(*auditDeclared); ok {
		d.records = append(d.records, auditRecord{action: action, ctx: ctx})
	}
	return ctx
}

type auditDeclaredKey struct{}

// auditDeclared is the audit records a request's handler declared.
type auditDeclared struct{ records []auditRecord }

type auditRecord struct {
	action string
	ctx    context.Context
}

// auditGuard logs, as an error, an operation that succeeded although a
// record it declared was written by no transaction: its change went
// around inTx (TestEveryControlPlaneChangeIsAudited fails for it too).
func (s *Server) auditGuard(f api.StrictHandlerFunc, operationID string) api.StrictHandlerFunc {
	return func(ctx context.Context, w http.ResponseWriter, r *http.Request, request any) (any, error) {
		declared := &auditDeclared{}
		res, err := f(context.WithValue(ctx, auditDeclaredKey{}, declared), w, r, request)
		if err == nil {
			for _, rec := range declared.records {
				if _, done := store.AuditWritten(rec.ctx); !done {
					s.logger.Error("audit record not written in the change's transaction", "operation", operationID,
						"action", rec.action, "request_id", requestIDFrom(ctx))
				}
			}
		}
		return res, err
	}
}

// recordAudit writes an audit event in a transaction of its own: for what
// changes nothing of the control plane (security events, throttled, and
// console sign-ins). A failure is logged, not turned into a failed request.
func (s *Server) recordAudit(ctx context.Context, actorType, actorID, action, targetType, targetID string, org *uuid.UUID, details map[string]any) {
	raw, _ := json.Marshal(details)
	if details == nil {
		raw = nil
	}
	e := store.AuditEvent{ActorType: actorType, ActorID: actorID, Action: action, TargetType: targetType, TargetID: targetID,
		OrganizationID: org, RequestID: requestIDFrom(ctx), Details: raw}
	if err := s.store.RecordAudit(context.WithoutCancel(ctx), e); err != nil {
		s.logger.Error("audit event not recorded", "action", action, "request_id", e.RequestID, "error", err.Error())
	}
}

// security audits a refused request through the throttle: the source
// address and a count go into every row.
func (s *Server) security(ctx context.Context, action, actorType, actorID string, details map[string]any) {
	if actorType == "" {
		actorType = "anonymous"
	}
	e := securityEvent{action: action, source: sourceAddressFrom(ctx), actorType: actorType, actorID: actorID, details: details}
	if e.actorID == "" {
		e.actorID = e.source
	}
	if action == actionFencingRejected {
		e.worker = actorID
	}
	s.securityEvents.record(ctx, e)
}

// securityProblem audits the refusals that matter to security: unknown or
// revoked certificates, refused tokens and fencing rejections.
func (s *Server) securityProblem(r *http.Request, p *Problem) {
	ctx := r.Context()
	switch p.Code {
	case problem.CertificateUnknown, problem.CertificateExpired:
		s.security(ctx, actionCertificateRefused, "anonymous", fingerprintOf(r), map[string]any{"code": p.Code})
	case problem.WorkerRevoked:
		s.security(ctx, actionRevokedWorkerRefused, "worker", fingerprintOf(r), nil)
	case problem.Unauthenticated:
		s.security(ctx, actionTokenRefused, "anonymous", "", map[string]any{"path": r.URL.Path})
	case problem.LeaseLost:
		if w := authFrom(ctx).worker; w != nil {
			s.security(ctx, actionFencingRejected, "worker", w.ID.String(), map[string]any{"path": r.URL.Path})
		}
	}
}

func encodeAuditCursor(id int64) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(id, 10)))
}

func decodeAuditCursor(s string) (int64, error) {
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(string(raw), 10, 64)
}
