package store

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Statement execution modes and connection poolers.
//
// By default pgx prepares every statement once per connection under a name
// (QueryExecModeCacheStatement) and the pool's connections are warmed with
// the hot statements and their generic plans (WarmConnections): a poll then
// costs no parse and no planning. A pooler in transaction mode, such as
// PgBouncer 1.18, breaks this: a client connection talks to whichever server
// connection is free at each transaction (and, outside a transaction, at
// each Sync), so a statement named on one server connection is missing on
// the next ("prepared statement does not exist") or already exists there
// under a name another client chose. PgBouncer learned protocol-level
// prepared statements only in 1.21.
//
// Behind such a pooler the gateway uses QueryExecModeCacheDescribe: pgx
// describes a statement once per client connection (argument and result
// types, cached), then runs it as Parse, Bind, Execute and Sync in one
// message flight on the unnamed statement, which lives and dies within that
// flight, so whichever server connection gets it has all it needs. Not
// DescribeExec (it describes and executes in two flights, which a pooler
// may send to two server connections), not Exec or SimpleProtocol (they
// guess parameter types from Go types, or interpolate them as text).
//
// Generic plans keep working, because what the hot paths need of them is
// their shape, not their reuse: every hot transaction sets plan_cache_mode
// = force_generic_plan with set_config(…, true), which lasts until that
// transaction ends — on the server connection it ran on, and never beyond.
// PostgreSQL plans an unnamed statement under it like a named one, without
// looking at the parameter values, so the plan (ordered index scans that
// stop early) is the same as with a direct connection. What is lost is the
// plan cache: the statement is parsed and planned on every execution, which
// costs database CPU per request. Session-level settings would be worse
// than slow — they would leak to other clients of the same server
// connection — so the store has none (TestSetConfigIsTransactionLocal).
//
// The mode is chosen by -database-exec-mode (ExecModeAuto by default):
// auto keeps named statements on a direct connection and switches to
// cache_describe behind a pooler, which it recognises by a backend process
// id that does not match the one the connection announced (see
// DetectPooler).

// ExecModeAuto is the -database-exec-mode default: see ChooseExecMode.
const ExecModeAuto = "auto"

// execModes are the modes -database-exec-mode accepts besides auto, by
// pgx's names (those of its default_query_exec_mode URL parameter).
var execModes = map[string]pgx.QueryExecMode{
	"cache_statement": pgx.QueryExecModeCacheStatement,
	"cache_describe":  pgx.QueryExecModeCacheDescribe,
	"describe_exec":   pgx.QueryExecModeDescribeExec,
	"exec":            pgx.QueryExecModeExec,
	"simple_protocol": pgx.QueryExecModeSimpleProtocol,
}

// ExecModeNames lists the accepted -database-exec-mode values, for help.
func ExecModeNames() string {
	return ExecModeAuto + ", cache_statement, cache_describe, describe_exec, exec or simple_protocol"
}

// ValidExecMode reports whether name is a -database-exec-mode value.
func ValidExecMode(name string) bool {
	_, ok := execModes[name]
	return ok || name == ExecModeAuto
}

// ExecModeChoice is the chosen mode and why, for the log.
type ExecModeChoice struct {
	Mode   pgx.QueryExecMode
	Reason string
}

// probeTimeout bounds DetectPooler's one connection.
const probeTimeout = 10 * time.Second

// ChooseExecMode resolves -database-exec-mode for databaseURL. An explicit
// mode wins; with auto, a default_query_exec_mode parameter in the URL
// wins, else the database is probed (DetectPooler). When the probe cannot
// connect, the mode that works with and without a pooler is chosen.
func ChooseExecMode(ctx context.Context, databaseURL, name string) (ExecModeChoice, error) {
	if mode, ok := execModes[name]; ok {
		return ExecModeChoice{mode, "set by -database-exec-mode"}, nil
	}
	if name != ExecModeAuto {
		return ExecModeChoice{}, fmt.Errorf("unknown database exec mode %q (%s)", name, ExecModeNames())
	}
	cfg, err := pgx.ParseConfig(databaseURL)
	if err != nil {
		return ExecModeChoice{}, fmt.Errorf("database url: %w", err)
	}
	if strings.Contains(databaseURL, "default_query_exec_mode") {
		return ExecModeChoice{cfg.DefaultQueryExecMode, "set by the URL's default_query_exec_mode"}, nil
	}
	pooled, err := DetectPooler(ctx, cfg)
	switch {
	case err != nil:
		return ExecModeChoice{pgx.QueryExecModeCacheDescribe, "the database could not be probed for a pooler (" + err.Error() + "); cache_describe works with and without one"}, nil
	case pooled:
		return ExecModeChoice{pgx.QueryExecModeCacheDescribe, "a connection pooler is between the gateway and PostgreSQL: named prepared statements would not survive it"}, nil
	}
	return ExecModeChoice{pgx.QueryExecModeCacheStatement, "direct connection to PostgreSQL"}, nil
}

// DetectPooler reports whether connections of cfg reach PostgreSQL through
// a pooler that hands out server connections of its own (PgBouncer,
// Odyssey, PgCat, Supavisor, RDS Proxy): such a pooler answers the startup
// with a process id and cancel key of its own, while PostgreSQL announces
// the process id of the backend that then serves the connection. A plain
// TCP proxy or load balancer passes PostgreSQL's own through, and named
// statements do work through it. The query is sent in the simple protocol,
// which any pooler passes as is.
func DetectPooler(ctx context.Context, cfg *pgx.ConnConfig) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return false, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var backend uint32
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()", pgx.QueryExecModeSimpleProtocol).Scan(&backend); err != nil {
		return false, err
	}
	return backend != conn.PgConn().PID(), nil
}
