package server

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/worker-gateway/gateway/server/api"
)

// TestContractIsValidOpenAPI31 is the evidence for choosing OpenAPI 3.1.0:
// kin-openapi loads and validates the spec, including the mutualTLS
// security scheme that only 3.1 has, and every operation documents its
// problems.
func TestContractIsValidOpenAPI31(t *testing.T) {
	spec, err := api.GetSwagger()
	require.NoError(t, err)
	require.NoError(t, spec.Validate(context.Background()))
	require.Equal(t, "3.1.0", spec.OpenAPI)
	require.Equal(t, "mutualTLS", spec.Components.SecuritySchemes["workerMTLS"].Value.Type)
	for path, item := range spec.Paths.Map() {
		for method, op := range item.Operations() {
			require.NotEmpty(t, op.Summary, "%s %s has a summary", method, path)
			require.NotEmpty(t, op.Description, "%s %s has a description", method, path)
			require.NotNil(t, op.Responses.Default(), "%s %s documents its problems", method, path)
		}
	}
}
