package store

import (
	"context"
	"strings"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// QueryTracer makes one client span per query (pgx.QueryTracer) under the
// span in the query's context. Written here rather than taken from
// exaring/otelpgx: the store needs one span per query and nothing else, and
// must never record arguments (lease tokens, secrets) — twenty lines keep
// both in sight and add no dependency beyond the OpenTelemetry API.
type QueryTracer struct {
	tracer trace.Tracer
}

// NewQueryTracer traces queries with provider's tracer.
func NewQueryTracer(provider trace.TracerProvider) *QueryTracer {
	return &QueryTracer{tracer: provider.Tracer("github.com/worker-gateway/gateway/store")}
}

// TraceQueryStart opens the span; its name is the statement's first
// keyword, its db.query.text the SQL without arguments.
func (t *QueryTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	ctx, _ = t.tracer.Start(ctx, "pgx "+queryOperation(data.SQL), trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(
			attribute.String("db.system.name", "postgresql"),
			attribute.String("db.operation.name", queryOperation(data.SQL)),
			attribute.String("db.query.text", data.SQL),
		))
	return ctx
}

// TraceQueryEnd closes the span, marking it failed on an error.
func (t *QueryTracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryEndData) {
	span := trace.SpanFromContext(ctx)
	if data.Err != nil {
		span.RecordError(data.Err)
		span.SetStatus(codes.Error, "query failed")
	} else {
		span.SetAttributes(attribute.Int64("db.response.returned_rows", data.CommandTag.RowsAffected()))
	}
	span.End()
}

// queryOperation is the statement's first keyword (SELECT, WITH, UPDATE…).
func queryOperation(sql string) string {
	sql = strings.TrimSpace(sql)
	for strings.HasPrefix(sql, "--") {
		_, rest, _ := strings.Cut(sql, "\n")
		sql = strings.TrimSpace(rest)
	}
	op, _, _ := strings.Cut(sql, " ")
	op, _, _ = strings.Cut(op, "\n")
	if op == "" {
		return "query"
	}
	return strings.ToUpper(op)
}
