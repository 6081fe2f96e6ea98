package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// tracingEnabled reads the standard OpenTelemetry variables: traces are
// exported (OTLP over HTTP) when OTEL_TRACES_EXPORTER is otlp, or when it
// is unset and an OTLP endpoint is given. Otherwise nothing is set up at
// all — no provider, no exporter goroutine, no span work per request.
func tracingEnabled(getenv func(string) string) (bool, error) {
	if strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true") {
		return false, nil
	}
	switch exporter := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); exporter {
	case "none":
		return false, nil
	case "":
		if getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
			return false, nil
		}
	case "otlp":
	default:
		return false, fmt.Errorf("OTEL_TRACES_EXPORTER=%s: the gateway exports traces with otlp only (or none)", exporter)
	}
	protocol := getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if protocol == "" {
		protocol = getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	if protocol != "" && protocol != "http/protobuf" {
		return false, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL=%s: the gateway exports OTLP over HTTP only (http/protobuf)", protocol)
	}
	return true, nil
}

// startTracing builds the tracer provider the OTEL_* variables ask for:
// nil when tracing is off. The exporter, sampler (OTEL_TRACES_SAMPLER),
// endpoint, headers and resource (OTEL_SERVICE_NAME,
// OTEL_RESOURCE_ATTRIBUTES) come from the environment as the SDK reads
// them. shutdown flushes the spans still queued.
func startTracing(ctx context.Context, getenv func(string) string, logger *slog.Logger) (provider trace.TracerProvider, shutdown func(context.Context) error, err error) {
	on, err := tracingEnabled(getenv)
	if err != nil || !on {
		return nil, func(context.Context) error { return nil }, err
	}
	exporter, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("OTLP trace exporter: %w", err)
	}
	// Later detectors win: the environment names the service when it says.
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", "worker-gateway")),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(),
	)
	if err != nil {
		return nil, nil, fmt.Errorf("trace resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exporter), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		logger.Warn("tracing", "error", err.Error())
	}))
	logger.Info("tracing: exporting spans with OTLP over HTTP")
	return tp, tp.Shutdown, nil
}
