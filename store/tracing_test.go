package store_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/worker-gateway/gateway/store"
	"github.com/worker-gateway/gateway/store/storetest"
)

// TestQueryTracerNeverRecordsArguments: a query, a batch and a transaction
// with a secret argument make client spans under the caller's span, named by
// their operation, and no attribute holds the argument.
func TestQueryTracerNeverRecordsArguments(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	recorder := tracetest.NewSpanRecorder()
	provider := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recorder))
	pool, err := store.OpenPool(ctx, storetest.NewDatabase(t), func(cfg *pgxpool.Config) {
		cfg.ConnConfig.Tracer = store.NewQueryTracer(provider)
	})
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	const secret = "wgs_secret-argument-never-in-a-span"
	ctx, parent := provider.Tracer("test").Start(ctx, "request")
	var got string
	require.NoError(t, pool.QueryRow(ctx, "SELECT $1::text", secret).Scan(&got))
	require.Equal(t, secret, got)
	b := &pgx.Batch{}
	b.Queue("SELECT length($1::text)", secret)
	require.NoError(t, pool.SendBatch(ctx, b).Close())
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "SELECT $1::text", secret)
		return err
	}))
	parent.End()

	names := map[string]bool{}
	for _, s := range recorder.Ended() {
		if s.SpanKind() != trace.SpanKindClient {
			continue
		}
		names[s.Name()] = true
		require.Equal(t, parent.SpanContext().TraceID(), s.SpanContext().TraceID(), "span %q is in the caller's trace", s.Name())
		for _, a := range s.Attributes() {
			require.NotContains(t, a.Value.String(), secret, "span %q attribute %s holds an argument", s.Name(), a.Key)
		}
		require.False(t, strings.HasSuffix(s.Name(), ";"), "span name %q", s.Name())
	}
	for _, want := range []string{"SELECT", "BEGIN", "COMMIT"} {
		require.True(t, names[want], "a %s span among %v", want, names)
	}
}

// TestQueryTracerNeedsAParentSpan: work outside any traced request or
// iteration makes no spans (no root span per statement).
func TestQueryTracerNeedsAParentSpan(t *testing.T) {
	t.Parallel()
	recorder := tracetest.NewSpanRecorder()
	provider := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recorder))
	pool, err := store.OpenPool(t.Context(), storetest.NewDatabase(t), func(cfg *pgxpool.Config) {
		cfg.ConnConfig.Tracer = store.NewQueryTracer(provider)
	})
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	_, err = pool.Exec(context.WithoutCancel(t.Context()), "SELECT 1")
	require.NoError(t, err)
	require.Empty(t, recorder.Ended())
}
