package server

import (
	"context"
	"encoding/json"
	"time"

	"github.com/google/uuid"

	"github.com/worker-gateway/gateway/server/api"
	"github.com/worker-gateway/gateway/store"
)

// handlers implements the generated strict-server interface. Expected
// failures are returned as errors and turned into problems by one function,
// problemFor; handlers never write error bodies themselves.
type handlers struct{ *Server }

var _ api.StrictServerInterface = (*handlers)(nil)

// The conversions below map store types to the contract's types.

func ptr[T any](v T) *T { return &v }

func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func secondsOf(d time.Duration) float64 { return max(d.Seconds(), 0) }

func optSecondsOf(d *time.Duration) *float64 {
	if d == nil {
		return nil
	}
	return ptr(secondsOf(*d))
}

func jsonOrEmpty(b json.RawMessage) json.RawMessage {
	if len(b) == 0 {
		return json.RawMessage(`{}`)
	}
	return b
}

// heartbeatInterval is how often a worker should renew a lease of the given
// duration: a third of it, at most the configured interval.
func (s *Server) heartbeatInterval(leaseDuration time.Duration) float64 {
	if leaseDuration <= 0 {
		return s.cfg.HeartbeatInterval.Seconds()
	}
	return min(leaseDuration/3, s.cfg.HeartbeatInterval).Seconds()
}

func (s *Server) toLease(l store.Lease) api.Lease {
	t := l.Task
	return api.Lease{
		AttemptId:                l.AttemptID,
		LeaseToken:               l.LeaseToken,
		LeaseExpiresAt:           l.LeaseExpiresAt,
		LeaseTtlSeconds:          secondsOf(l.LeaseTTL),
		HeartbeatIntervalSeconds: s.heartbeatInterval(l.LeaseDuration),
		Task: api.TaskSnapshot{
			Id:                         t.ID,
			TaskType:                   api.TaskType(t.Type),
			OrganizationId:             t.OrganizationID,
			ScanId:                     t.ScanID,
			ScanJobId:                  t.ScanJobID,
			Payload:                    jsonOrEmpty(t.Payload),
			AttemptNumber:              t.AttemptNumber,
			MaxAttempts:                t.MaxAttempts,
			ExecutionDeadlineAt:        t.ExecutionDeadlineAt,
			ExecutionDeadlineInSeconds: optSecondsOf(t.ExecutionDeadlineIn),
			AttemptDeadlineAt:          t.AttemptDeadlineAt,
			AttemptDeadlineInSeconds:   optSecondsOf(t.AttemptDeadlineIn),
		},
	}
}

func (s *Server) toLeaseStatus(st store.LeaseStatus) api.LeaseStatus {
	out := api.LeaseStatus{
		AttemptId:       st.AttemptID,
		State:           api.LeaseState(st.State),
		CancelRequested: st.State == store.LeaseCancelRequested,
		LeaseTtlSeconds: secondsOf(st.LeaseTTL),
	}
	if st.State != store.LeaseLost {
		out.LeaseExpiresAt = ptr(st.LeaseExpiresAt)
		out.HeartbeatIntervalSeconds = ptr(s.heartbeatInterval(st.LeaseDuration))
	}
	return out
}

func toTask(t store.Task) api.Task {
	out := api.Task{
		Id:                    t.ID,
		TaskType:              api.TaskType(t.TaskType),
		OrganizationId:        t.OrganizationID,
		ScanId:                t.ScanID,
		ScanJobId:             t.ScanJobID,
		State:                 api.TaskState(t.State),
		Priority:              t.Priority,
		Payload:               jsonOrEmpty(t.Payload),
		RequiredCapabilities:  jsonOrEmpty(t.RequiredCapabilities),
		AttemptCount:          t.AttemptCount,
		MaxAttempts:           t.MaxAttempts,
		AvailableAt:           t.AvailableAt,
		ExecutionDeadlineAt:   t.ExecutionDeadlineAt,
		LeaseDurationSeconds:  t.LeaseDurationSeconds,
		AttemptTimeoutSeconds: t.AttemptTimeoutSeconds,
		CancelRequestedAt:     t.CancelRequestedAt,
		CompletedAt:           t.CompletedAt,
		LastErrorCode:         nonEmpty(t.LastErrorCode),
		LastError:             nonEmpty(t.LastError),
		CreatedAt:             t.CreatedAt,
		UpdatedAt:             t.UpdatedAt,
		Trigger:               toTrigger(t.Trigger),
		LabelSelector:         toAPISelector(t.LabelSelector),
		PinnedWorkerId:        t.PinnedWorkerID,
	}
	if t.PendingReason != "" {
		out.PendingReason = ptr(api.PendingReason(t.PendingReason))
	}
	return out
}

func toAttempt(a store.Attempt) api.Attempt {
	return api.Attempt{
		Id:             a.ID,
		TaskId:         a.TaskID,
		WorkerId:       a.WorkerID,
		AttemptNumber:  a.AttemptNumber,
		Status:         api.AttemptStatus(a.Status),
		LeaseExpiresAt: a.LeaseExpiresAt,
		StartedAt:      a.StartedAt,
		RunningAt:      a.RunningAt,
		FinishedAt:     a.FinishedAt,
		ErrorCode:      nonEmpty(a.ErrorCode),
		ErrorMessage:   nonEmpty(a.ErrorMessage),
	}
}

func toWorker(w store.Worker) api.Worker {
	orgs := w.OrganizationIDs
	if orgs == nil {
		orgs = []uuid.UUID{}
	}
	return api.Worker{
		Id:                     w.ID,
		Name:                   w.Name,
		WorkerType:             api.WorkerType(w.WorkerType),
		Enabled:                w.Enabled,
		Revoked:                w.RevokedAt != nil,
		RevokedAt:              w.RevokedAt,
		RevocationReason:       nonEmpty(w.RevocationReason),
		CertificateFingerprint: nonEmpty(w.CertificateFingerprint),
		CertificateSubject:     nonEmpty(w.CertificateSubject),
		CertificateExpiresAt:   w.CertificateExpiresAt,
		SoftwareVersion:        nonEmpty(w.SoftwareVersion),
		ProtocolVersion:        nonEmpty(w.ProtocolVersion),
		Capabilities:           jsonOrEmpty(w.Capabilities),
		Labels:                 labelsOrEmpty(w.Labels),
		MaxConcurrentTasks:     w.MaxConcurrentTasks,
		LastSeenAt:             w.LastSeenAt,
		Online:                 w.Online,
		ActiveAttempts:         w.ActiveAttempts,
		OrganizationIds:        orgs,
		OwnerOrganizationId:    w.OwnerOrganizationID,
		CreatedAt:              w.CreatedAt,
	}
}

// labelsOrEmpty answers a worker without labels with {} rather than null.
func labelsOrEmpty(labels map[string]string) api.Labels {
	if labels == nil {
		return api.Labels{}
	}
	return labels
}

func toAssignment(a store.Assignment) api.Assignment {
	return api.Assignment{
		OrganizationId:    a.OrganizationID,
		WorkerId:          a.WorkerID,
		Enabled:           a.Enabled,
		AssignedAt:        a.AssignedAt,
		Revoked:           a.RevokedAt != nil,
		RevokedAt:         a.RevokedAt,
		RevocationReason:  nonEmpty(a.RevocationReason),
		CancelledAttempts: ptr(a.CancelledAttempts),
	}
}

func encodeCursor(c *store.Cursor) *string {
	if c == nil {
		return nil
	}
	return ptr(c.Encode())
}

// readPage is the start of every listing a reader may see: the caller's
// organization scope, then the page position and size.
func readPage(ctx context.Context, cursor *string, limit *int) (store.Tenant, *store.Cursor, int, error) {
	tenant := tenantFrom(ctx)
	after, n, err := pageParams(cursor, limit)
	return tenant, after, n, err
}

// pageParams decodes a cursor and applies the default page size.
func pageParams(cursor *string, limit *int) (*store.Cursor, int, error) {
	n := 50
	if limit != nil {
		n = *limit
	}
	if cursor == nil || *cursor == "" {
		return nil, n, nil
	}
	c, err := store.DecodeCursor(*cursor)
	return c, n, err
}

// mapSlice converts a page of store rows to the contract's items (never a
// nil slice: the contract's lists are arrays).
func mapSlice[T, A any](rows []T, convert func(T) A) []A {
	out := make([]A, 0, len(rows))
	for _, r := range rows {
		out = append(out, convert(r))
	}
	return out
}
