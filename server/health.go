package server

import (
	"context"
	"time"

	"github.com/worker-gateway/gateway/migrations"
	"github.com/worker-gateway/gateway/server/api"
)

// GetHealth answers while the process serves HTTP.
func (h *handlers) GetHealth(context.Context, api.GetHealthRequestObject) (api.GetHealthResponseObject, error) {
	return api.GetHealth200JSONResponse{Status: api.Ok}, nil
}

// GetReadiness checks the database, the schema version and the LISTEN
// connection.
func (h *handlers) GetReadiness(ctx context.Context, _ api.GetReadinessRequestObject) (api.GetReadinessResponseObject, error) {
	ready, checks := h.readiness(ctx)
	if !ready {
		return api.GetReadiness503JSONResponse{Status: api.Unavailable, Checks: &checks}, nil
	}
	return api.GetReadiness200JSONResponse{Status: api.Ok, Checks: &checks}, nil
}

// readinessTimeout bounds the readiness check: a database that does not
// answer (down, partitioned, pool exhausted) makes /readyz answer 503 within
// it rather than hang until the load balancer's own timeout.
const readinessTimeout = 2 * time.Second

// readiness checks the database (one query, which also reads the schema
// version) and the LISTEN connection.
func (s *Server) readiness(ctx context.Context) (bool, map[string]string) {
	checks := map[string]string{"database": "ok", "schema": "ok", "listen": "ok"}
	ready := true
	ctx, cancel := context.WithTimeout(ctx, readinessTimeout)
	defer cancel()
	var version int64
	if err := s.pool.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM schema_migrations WHERE NOT dirty`).Scan(&version); err != nil {
		checks["database"], checks["schema"], ready = "unreachable", "unknown", false
	} else if latest, err := migrations.Latest(); err != nil || uint(version) < latest {
		checks["schema"], ready = "behind", false
	} else if uint(version) > latest {
		// Migrated past what this binary knows: a newer schema may change
		// the rules its statements must keep (000012 moved the leasable
		// tasks into a queue this binary would not fill), so it must not
		// take traffic.
		checks["schema"], ready = "ahead", false
	}
	if !s.hub.Connected() {
		checks["listen"], ready = "disconnected", false
	}
	return ready, checks
}
