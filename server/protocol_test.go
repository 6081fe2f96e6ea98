package server

import (
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/server/api"
)

// TestProtocolVersionOnlyInPolls: the poll (acquireLeases) is the one
// place the gateway checks a worker's protocol_version, so the contract
// must let no other request announce one — a request body that grew the
// field would skip the check. Read from openapi.yaml: every request body
// with a protocol_version property, at any depth.
func TestProtocolVersionOnlyInPolls(t *testing.T) {
	spec, err := api.GetSpec()
	require.NoError(t, err)
	var carriers []string
	for _, item := range spec.Paths.Map() {
		for _, op := range item.Operations() {
			if op.RequestBody == nil || op.RequestBody.Value == nil {
				continue
			}
			for _, mt := range op.RequestBody.Value.Content {
				if mt.Schema != nil && hasProperty(mt.Schema.Value, "protocol_version", map[*openapi3.Schema]bool{}) {
					carriers = append(carriers, op.OperationID)
				}
			}
		}
	}
	require.Equal(t, []string{"AcquireLeases"}, carriers, "requests that announce a protocol_version (AcquireLeases checks it)")
}

// hasProperty reports whether s or a schema within it has property name.
func hasProperty(s *openapi3.Schema, name string, seen map[*openapi3.Schema]bool) bool {
	if s == nil || seen[s] {
		return false
	}
	seen[s] = true
	if _, ok := s.Properties[name]; ok {
		return true
	}
	var inner []*openapi3.SchemaRef
	for _, p := range s.Properties {
		inner = append(inner, p)
	}
	inner = append(inner, s.Items, s.Not)
	inner = append(append(append(inner, s.AllOf...), s.AnyOf...), s.OneOf...)
	if s.AdditionalProperties.Schema != nil {
		inner = append(inner, s.AdditionalProperties.Schema)
	}
	for _, r := range inner {
		if r != nil && hasProperty(r.Value, name, seen) {
			return true
		}
	}
	return false
}
