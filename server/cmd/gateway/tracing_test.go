package main

import (
	"context"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

func envOf(vars map[string]string) func(string) string {
	return func(name string) string { return vars[name] }
}

func TestTracingFollowsTheOTELVariables(t *testing.T) {
	for _, c := range []struct {
		name    string
		env     map[string]string
		on      bool
		failure bool
	}{
		{name: "nothing set", env: nil},
		{name: "endpoint", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, on: true},
		{name: "traces endpoint", env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, on: true},
		{name: "exporter otlp", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, on: true},
		{name: "exporter none wins", env: map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}},
		{name: "sdk disabled", env: map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}},
		{name: "other exporter", env: map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, failure: true},
		{name: "grpc", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, failure: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			on, err := tracingEnabled(envOf(c.env))
			if c.failure {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, c.on, on)
		})
	}
}

func TestTracingOffInstallsNothing(t *testing.T) {
	provider, shutdown, err := startTracing(context.Background(), envOf(nil), slog.Default())
	require.NoError(t, err)
	require.Nil(t, provider)
	require.NoError(t, shutdown(context.Background()))
	_, isSDK := otel.GetTracerProvider().(*sdktrace.TracerProvider)
	require.False(t, isSDK, "no global tracer provider installed")
}
