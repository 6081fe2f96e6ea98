package lease

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/worker-gateway/gateway/store/internal/core"
)

// hotStatements are the statements of the worker protocol's hot paths —
// polls, completions, renewals and their wake-ups — each with the plan
// settings its transaction runs it under ("" when it is planned for each
// call).
var hotStatements = []struct{ planSettings, sql string }{
	{core.GenericPlanSQL, touchWorkerSQL},
	{core.GenericPlanSQL, ReplayLeasesSQL},
	{core.GenericPlanSQL, LockAssignmentsSQL},
	{core.GenericPlanSQL, LeaseCandidatesSQL},
	{core.GenericPlanSQL, candidatesSQL},
	{core.GenericPlanSQL, grantSQL},
	{byIDPlanSQL, completeFencedSQL},
	{byIDPlanSQL, moveTasksSQL},
	{"", core.NotifySQL},
	{"", renewSQL},
}

// WarmConnections makes every new connection of a pool ready for the hot
// paths before it serves a request: it prepares hotStatements and makes
// the generic plans of those that use one. On a new connection the first
// use of a hot statement cost 20–50 ms (parsing and planning on the cold
// catalog caches of a new backend), which a request would otherwise pay —
// once per connection, and again whenever the pool replaces one: the tail
// of the wake latency (p99) was made of exactly those. Connections are then
// opened ahead of need (MinConns = MaxConns), in the pool's background, so
// the warm-up is not in a request's way either.
//
// Only with named statements (QueryExecModeCacheStatement): in any other
// mode pgx would still run the statements prepared here by name, which a
// pooler in transaction mode does not keep (see execmode.go), so the
// connections are only opened ahead of need.
func WarmConnections(cfg *pgxpool.Config) {
	cfg.MinConns = cfg.MaxConns
	if cfg.ConnConfig.DefaultQueryExecMode != pgx.QueryExecModeCacheStatement {
		return
	}
	afterConnect := cfg.AfterConnect
	cfg.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
		if afterConnect != nil {
			if err := afterConnect(ctx, conn); err != nil {
				return err
			}
		}
		if err := prepareHotStatements(ctx, conn); err != nil {
			// A schema this binary does not match (readiness reports it)
			// fails here; the connection still serves, and the statements
			// are prepared on first use as without the warm-up.
			if conn.PgConn().TxStatus() != 'I' {
				if _, err := conn.Exec(ctx, "rollback"); err != nil {
					return err
				}
			}
		}
		return nil
	}
}

// prepareHotStatements prepares hotStatements on conn under the names pgx
// uses for them (Prepare with the SQL as its name), then, in a transaction
// with each one's plan settings, has PostgreSQL make its generic plan:
// EXPLAIN EXECUTE plans a prepared statement as an execution would, and the
// plan cache keeps the plan, without running anything.
func prepareHotStatements(ctx context.Context, conn *pgx.Conn) error {
	var script strings.Builder
	script.WriteString("BEGIN;\n")
	for _, st := range hotStatements {
		sd, err := conn.Prepare(ctx, st.sql, st.sql)
		if err != nil {
			return fmt.Errorf("prepare hot statement: %w", err)
		}
		if st.planSettings == "" {
			continue
		}
		// The generic plans come before the by-id ones: those add settings
		// that the generic ones must not be planned under.
		nulls := strings.TrimSuffix(strings.Repeat("NULL, ", len(sd.ParamOIDs)), ", ")
		fmt.Fprintf(&script, "%s;\nEXPLAIN EXECUTE %s(%s);\n", st.planSettings, pgx.Identifier{sd.Name}.Sanitize(), nulls)
	}
	script.WriteString("ROLLBACK;")
	// One round trip: a script of simple statements, none of them kept.
	if _, err := conn.Exec(ctx, script.String(), pgx.QueryExecModeSimpleProtocol); err != nil {
		return fmt.Errorf("plan hot statements: %w", err)
	}
	return nil
}
