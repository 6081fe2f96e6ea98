package server

import (
	"context"
	"time"

	"github.com/worker-gateway/gateway/server/api"
	"github.com/worker-gateway/gateway/store"
)

// Stats windows when the caller gives none, and how many failures are listed.
const (
	defaultLeaseWindow   = time.Minute
	defaultFailureWindow = 15 * time.Minute
	recentFailures       = 10
)

// GetStats is the operators' overview: readers and up, scoped like every
// listing.
func (h *handlers) GetStats(ctx context.Context, req api.GetStatsRequestObject) (api.GetStatsResponseObject, error) {
	tenant := tenantFrom(ctx)
	leaseWindow, failureWindow := defaultLeaseWindow, defaultFailureWindow
	if p := req.Params.LeaseWindowSeconds; p != nil {
		leaseWindow = time.Duration(*p) * time.Second
	}
	if p := req.Params.FailureWindowSeconds; p != nil {
		failureWindow = time.Duration(*p) * time.Second
	}
	st, err := h.store.Stats(ctx, tenant, store.StatsParams{
		OnlineWindow: h.onlineWindow(), LeaseWindow: leaseWindow, FailureWindow: failureWindow, RecentFailures: recentFailures,
	})
	if err != nil {
		return nil, err
	}
	return api.GetStats200JSONResponse(toStats(st)), nil
}

func toStats(st store.Stats) api.Stats {
	leaseSeconds := int(st.LeaseWindow / time.Second)
	out := api.Stats{
		Queue: mapSlice(st.Queue, func(d store.QueueDepth) api.QueueDepth {
			return api.QueueDepth{OrganizationId: d.OrganizationID, State: api.TaskState(d.State), Count: d.Count}
		}),
		Workers: api.WorkerCapacity{Online: st.WorkersOnline, Total: st.WorkersTotal, Capacity: st.Capacity, ActiveAttempts: st.ActiveAttempts},
		Leases:  api.LeaseRate{WindowSeconds: leaseSeconds, Count: st.Leases, PerSecond: float64(st.Leases) / float64(max(leaseSeconds, 1))},
		Failures: api.FailureSummary{
			WindowSeconds: int(st.FailureWindow / time.Second),
			Count:         st.Failures,
			Recent: mapSlice(st.RecentFailures, func(f store.RecentFailure) api.RecentFailure {
				return api.RecentFailure{
					TaskId: f.TaskID, AttemptId: f.AttemptID, OrganizationId: f.OrganizationID, TaskType: api.TaskType(f.TaskType),
					AttemptNumber: f.AttemptNumber, Status: api.AttemptStatus(f.Status),
					ErrorCode: nonEmpty(f.ErrorCode), ErrorMessage: nonEmpty(f.ErrorMessage), FinishedAt: f.FinishedAt,
				}
			}),
		},
	}
	return out
}
