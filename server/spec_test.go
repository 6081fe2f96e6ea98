package server

import (
	"context"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/server/api"
)

// TestContractIsValidOpenAPI31 is the evidence for choosing OpenAPI 3.1.0:
// kin-openapi loads and validates the spec, including the mutualTLS
// security scheme that only 3.1 has, and every operation documents its
// problems.
func TestContractIsValidOpenAPI31(t *testing.T) {
	spec, err := api.GetSpec()
	require.NoError(t, err)
	require.NoError(t, spec.Validate(context.Background()))
	require.Equal(t, "3.1.0", spec.OpenAPI)
	require.Equal(t, "mutualTLS", spec.Components.SecuritySchemes["workerMTLS"].Value.Type)
	for path, item := range spec.Paths.Map() {
		for method, op := range item.Operations() {
			require.NotEmpty(t, op.Summary, "%s %s has a summary", method, path)
			require.NotEmpty(t, op.Description, "%s %s has a description", method, path)
			require.NotNil(t, op.Responses.Default(), "%s %s documents its problems", method, path)
			if op.RequestBody != nil {
				if mt := op.RequestBody.Value.Content["application/json"]; mt != nil {
					require.True(t, mt.Example != nil || len(mt.Examples) > 0 || hasExample(mt.Schema),
						"%s %s has a request example", method, path)
				}
			}
			for code, resp := range op.Responses.Map() {
				if len(code) != 3 || code[0] != '2' || resp.Value == nil {
					continue
				}
				if mt := resp.Value.Content["application/json"]; mt != nil {
					require.True(t, mt.Example != nil || len(mt.Examples) > 0 || hasExample(mt.Schema),
						"%s %s %s has a response example", method, path, code)
				}
			}
		}
	}
}

// hasExample finds an example on a schema, on the first schema it is
// composed of, or on the items of the array a list wraps.
func hasExample(ref *openapi3.SchemaRef) bool {
	if ref == nil || ref.Value == nil {
		return false
	}
	s := ref.Value
	if s.Example != nil || len(s.Examples) > 0 {
		return true
	}
	if len(s.AllOf) > 0 && hasExample(s.AllOf[0]) {
		return true
	}
	for _, prop := range s.Properties {
		if prop.Value != nil && prop.Value.Items != nil && hasExample(prop.Value.Items) {
			return true
		}
	}
	return false
}
