package main

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestLogFormat(t *testing.T) {
	for _, c := range []struct {
		format string
		json   bool
	}{{"auto", true}, {"", true}, {"json", true}, {"text", false}} {
		var buf bytes.Buffer
		slog.New(newLogHandler(&buf, c.format, slog.LevelInfo)).Info("hello", "request_id", "r1")
		var m map[string]any
		isJSON := json.Unmarshal(buf.Bytes(), &m) == nil
		require.Equal(t, c.json, isJSON, "format %q (a buffer is no terminal): %s", c.format, buf.String())
		if !isJSON {
			require.True(t, strings.Contains(buf.String(), "msg=hello request_id=r1"), buf.String())
		}
	}
	var f logFormatFlag
	require.Error(t, f.Set("yaml"))
	require.NoError(t, f.Set("text"))
	require.Equal(t, "text", f.String())
}

func TestLogFormatFlagFromEnvironment(t *testing.T) {
	t.Setenv("GATEWAY_LOG_FORMAT", "xml")
	_, errOut, code := runCLI(t, "serve", "-database-url", "postgres://x", "-tls-cert", "c", "-tls-key", "k")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "auto, json or text")
}
