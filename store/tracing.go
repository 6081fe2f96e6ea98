package store

import (
	"context"
	"strings"

	"github.com/exaring/otelpgx"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
)

// NewQueryTracer traces the pool's work with otelpgx: one client span per
// query, batch, prepare, connect and pool acquire, under the span in the
// call's context (a call outside any recording span makes none). It never
// records query arguments (lease tokens, secrets): otelpgx records them only
// when asked with WithIncludeQueryParameters, which the store never passes.
// Metrics stay with the gateway's own Prometheus registry.
func NewQueryTracer(provider trace.TracerProvider) *otelpgx.Tracer {
	return otelpgx.NewTracer(
		otelpgx.WithTracerProvider(provider),
		otelpgx.WithMeterProvider(noop.NewMeterProvider()),
		otelpgx.WithSpanNameFunc(queryOperation),
	)
}

// queryOperation names a span by its statement's first keyword (SELECT,
// WITH, UPDATE…), without a trailing semicolon: "BEGIN;" opens the warm-up
// script, and a span name is the operation, not the text.
func queryOperation(sql string) string {
	op := otelpgx.SQLOperationName(context.Background(), sql)
	if op = strings.TrimRight(op, ";"); op == "" {
		return "UNKNOWN" // otelpgx's word for a statement without one
	}
	return op
}
