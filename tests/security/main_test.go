// Package security holds the checks that keep the red-team findings fixed:
// the permission matrix generated from openapi.yaml, the cost of refused
// requests, audit throttling, token lineage, integer bounds, enrollment
// limits, follow caps, response headers, who hears webhook events (one
// emitter) and an audit row for every control-plane change. Every check
// runs against a real gateway (TLS, HTTP, PostgreSQL).
package security

import (
	"testing"

	"github.com/worker-gateway/gateway/tests/harness"
)

// TestMain gives this binary its own PostgreSQL cluster; each test clones a
// fresh database from it.
func TestMain(m *testing.M) { harness.Main(m) }
