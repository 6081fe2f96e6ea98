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

// readiness checks the database (the query that reads the schema
// version) and the LISTEN connection.
func (s *Server) readiness(ctx context.Context) (bool, map[string]string) {
	checks := map[string]string{"database": "ok", "schema": "ok", "listen": "ok"}
	ready := true
	ctx, cancel := context.WithTimeout(ctx, readinessTimeout)
	defer cancel()
	if ok, state, err := s.schemaServable(ctx); err != nil {
		checks["database"], checks["schema"], ready = "unreachable", "unknown", false
	} else if !ok {
		checks["schema"], ready = state, false
	}
	if !s.hub.Connected() {
		checks["listen"], ready = "disconnected", false
	}
	return ready, checks
}

// schemaServable applies the readiness window (package migrations): this
// release serves on a schema at or past its own expand version, dirty
// while a newer file is applied, until a contract step removes what it
// reads. The contract table exists once a contract step has run.
func (s *Server) schemaServable(ctx context.Context) (bool, string, error) {
	var expand int64
	var dirty, contracts bool
	if err := s.pool.QueryRow(ctx, `SELECT coalesce(max(version), 0), coalesce(bool_or(dirty), false),
	        to_regclass('`+migrations.ContractTable+`') IS NOT NULL FROM schema_migrations`).Scan(&expand, &dirty, &contracts); err != nil {
		return false, "", err
	}
	var contracted int64
	if contracts {
		if err := s.pool.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM `+migrations.ContractTable).Scan(&contracted); err != nil {
			return false, "", err
		}
	}
	latest, err := migrations.Latest()
	if err != nil {
		return false, "unknown", nil //nolint:nilerr // an unreadable embedded list: not ready, the database is fine
	}
	ok, state := migrations.Servable(latest, uint(expand), dirty, uint(contracted)) //nolint:gosec // versions are small
	return ok, state, nil
}
