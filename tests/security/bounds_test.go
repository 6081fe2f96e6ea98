package security

import (
	"fmt"
	"math"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/server/api"
	"github.com/worker-gateway/gateway/tests/harness"
)

// PostgreSQL's integer columns: int4 unless the spec says int64 (bigint);
// int64 values are kept to JSON's exact integers (2^53-1), which bigint
// holds too.
const (
	maxInt4       = math.MaxInt32
	maxJSONInt64  = 1<<53 - 1
	minInt4       = math.MinInt32
	minJSONInt64  = -(1<<53 - 1)
	boundsExample = "every integer in openapi.yaml needs minimum and maximum that PostgreSQL can hold"
)

// TestEveryIntegerInTheSpecIsBounded walks every schema of openapi.yaml —
// parameters, request bodies, responses and components, through
// properties, items and compositions — and fails on an integer without
// both bounds or with bounds its PostgreSQL column cannot hold. An
// unbounded integer reaches PostgreSQL and fails there as a 500 (int4
// overflow), instead of a 400 from the validator.
func TestEveryIntegerInTheSpecIsBounded(t *testing.T) {
	t.Parallel()
	spec, err := api.GetSpec()
	require.NoError(t, err)
	var problems []string
	seen := map[*openapi3.Schema]bool{}
	var walk func(where string, ref *openapi3.SchemaRef)
	walk = func(where string, ref *openapi3.SchemaRef) {
		if ref == nil || ref.Value == nil || seen[ref.Value] {
			return
		}
		s := ref.Value
		seen[s] = true
		if s.Type.Is("integer") {
			lo, hi := float64(minInt4), float64(maxInt4)
			if s.Format == "int64" {
				lo, hi = minJSONInt64, maxJSONInt64
			}
			switch {
			case s.Min == nil || s.Max == nil:
				problems = append(problems, where+": no minimum or maximum")
			case *s.Min < lo || *s.Max > hi:
				problems = append(problems, fmt.Sprintf("%s: bounds [%v, %v] outside [%v, %v]", where, *s.Min, *s.Max, lo, hi))
			}
		}
		for name, p := range s.Properties {
			walk(where+"."+name, p)
		}
		walk(where+"[]", s.Items)
		for i, sub := range append(append(append(openapi3.SchemaRefs{}, s.AllOf...), s.OneOf...), s.AnyOf...) {
			walk(fmt.Sprintf("%s/%d", where, i), sub)
		}
		if s.AdditionalProperties.Schema != nil {
			walk(where+"{}", s.AdditionalProperties.Schema)
		}
	}
	for name, s := range spec.Components.Schemas {
		walk("#/components/schemas/"+name, s)
	}
	for name, p := range spec.Components.Parameters {
		walk("#/components/parameters/"+name, p.Value.Schema)
	}
	for path, item := range spec.Paths.Map() {
		for method, op := range item.Operations() {
			where := method + " " + path
			for _, p := range append(item.Parameters, op.Parameters...) {
				walk(where+" ?"+p.Value.Name, p.Value.Schema)
			}
			if op.RequestBody != nil {
				for ct, mt := range op.RequestBody.Value.Content {
					walk(where+" body "+ct, mt.Schema)
				}
			}
			for code, resp := range op.Responses.Map() {
				for ct, mt := range resp.Value.Content {
					walk(where+" "+code+" "+ct, mt.Schema)
				}
				for name, h := range resp.Value.Headers {
					walk(where+" "+code+" header "+name, h.Value.Schema)
				}
			}
		}
	}
	sort.Strings(problems)
	require.Empty(t, problems, boundsExample)
}

// TestIntegerParametersPastTheirBoundsAre400 sends, for every integer query
// parameter of every bearer route, its maximum plus one and one past
// PostgreSQL's int4: the validator answers 400, never 500. It found
// GET /v1/tasks/{id}/logs?attempt=2147483648 answering 500.
func TestIntegerParametersPastTheirBoundsAre400(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	spec, err := api.GetSpec()
	require.NoError(t, err)
	client := g.HTTPClient(nil)
	checked := 0
	for path, item := range spec.Paths.Map() {
		for method, op := range item.Operations() {
			if !requiresScheme(spec, op, "bearerAuth") {
				continue
			}
			for _, p := range append(item.Parameters, op.Parameters...) {
				pv := p.Value
				if pv.In != "query" || pv.Schema == nil || !pv.Schema.Value.Type.Is("integer") || pv.Schema.Value.Max == nil {
					continue
				}
				for _, v := range []string{fmt.Sprintf("%.0f", *pv.Schema.Value.Max+1), "2147483648", "99999999999999999999"} {
					u := g.URL + fillPath(path) + "?" + url.Values{pv.Name: {v}}.Encode()
					req, err := http.NewRequest(method, u, nil)
					require.NoError(t, err)
					req.Header.Set("Authorization", "Bearer "+g.AdminToken)
					res, err := client.Do(req)
					require.NoError(t, err)
					res.Body.Close()
					require.Equal(t, http.StatusBadRequest, res.StatusCode, "%s %s ?%s=%s", method, path, pv.Name, v)
					require.Equal(t, "application/problem+json", res.Header.Get("Content-Type"))
					checked++
				}
			}
		}
	}
	require.NotZero(t, checked)
}

// requiresScheme reports whether an operation takes the security scheme:
// its own requirements, or the document's when it names none.
func requiresScheme(spec *openapi3.T, op *openapi3.Operation, scheme string) bool {
	reqs := spec.Security
	if op.Security != nil {
		reqs = *op.Security
	}
	for _, r := range reqs {
		if _, ok := r[scheme]; ok {
			return true
		}
	}
	return false
}

// fillPath puts fresh ids into a path template.
func fillPath(path string) string {
	for {
		i := strings.IndexByte(path, '{')
		if i < 0 {
			return path
		}
		j := strings.IndexByte(path[i:], '}')
		path = path[:i] + uuid.New().String() + path[i+j+1:]
	}
}
