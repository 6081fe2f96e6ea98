package server

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/problem"
	"github.com/worker-gateway/gateway/store"
)

// TestDatabaseGoneIsA503 pins how errors of a database that went away
// reach the client: a pooled connection closed by a PostgreSQL restart
// (what pgx returns for the next use of it, even a COMMIT) is 503 with
// Retry-After, never a 500; a client that gave up is not a server error.
func TestDatabaseGoneIsA503(t *testing.T) {
	closed := fmt.Errorf("acquire leases: commit: %w", pgconn.ErrConnClosed)
	p := problemFor(closed)
	require.Equal(t, http.StatusServiceUnavailable, p.Status)
	require.Equal(t, problem.Unavailable, p.Code)
	require.Positive(t, p.RetryAfter)

	// A replica that closed its group committers (shutting down) asks for
	// a retry, elsewhere.
	p = problemFor(fmt.Errorf("complete: %w", store.ErrBatcherClosed))
	require.Equal(t, http.StatusServiceUnavailable, p.Status)
	require.Positive(t, p.RetryAfter)

	p = problemFor(fmt.Errorf("renew leases: %w", context.Canceled))
	require.Equal(t, statusClientClosedRequest, p.Status)
	require.Less(t, p.Status, http.StatusInternalServerError)
}
