package services

import (
	"context"
	"log/slog"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// tracerName is the instrumentation scope of the services' spans.
const tracerName = "github.com/worker-gateway/gateway/server/services"

// Unit is what a service needs to log and trace its work as its own unit:
// its name, a logger that says it, and a tracer. Services embed it.
type Unit struct {
	name   string
	logger *slog.Logger
	tracer trace.Tracer
}

// NewUnit names a service; its logs carry service=name. A nil provider
// traces nothing.
func NewUnit(name string, logger *slog.Logger, provider trace.TracerProvider) Unit {
	if logger == nil {
		logger = slog.Default()
	}
	if provider == nil {
		provider = noop.NewTracerProvider()
	}
	return Unit{name: name, logger: logger.With("service", name), tracer: provider.Tracer(tracerName)}
}

// Name is the service's name.
func (u Unit) Name() string { return u.name }

// Logger logs as the service.
func (u Unit) Logger() *slog.Logger { return u.logger }

// Iteration starts one iteration of the service's work (a pass, a claim):
// a span of its own, the root of a new trace, named after the service, so
// that the queries it runs are traced together and apart from whatever
// request woke it. End the span when the iteration ends.
func (u Unit) Iteration(ctx context.Context) (context.Context, trace.Span) {
	return u.tracer.Start(ctx, u.name, trace.WithNewRoot(), trace.WithSpanKind(trace.SpanKindInternal))
}
