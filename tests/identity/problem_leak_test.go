package identity

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/problem"
	"github.com/worker-gateway/gateway/tests/harness"
)

// TestProblemHidesDatabaseErrorText makes PostgreSQL refuse a write with a
// message of its own: a real gateway answers with its own text, and the
// database's message (which could name tables, values or other tenants'
// data) never reaches the client.
func TestProblemHidesDatabaseErrorText(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	ctx := context.Background()
	const secret = "s3cr3t-database-text"
	_, err := g.Pool.Exec(ctx, `
		CREATE FUNCTION refuse_organization() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF NEW.name LIKE 'data-%' THEN
				RAISE EXCEPTION '`+secret+` %', NEW.name USING ERRCODE = '22023';
			END IF;
			RAISE EXCEPTION '`+secret+` %', NEW.name;
		END $$;
		CREATE TRIGGER refuse_organization BEFORE INSERT ON organizations
			FOR EACH ROW EXECUTE FUNCTION refuse_organization()`)
	require.NoError(t, err)

	for _, tc := range []struct {
		name   string
		status int
		code   string
	}{
		{"internal-org", http.StatusInternalServerError, problem.Internal},
		{"data-org", http.StatusBadRequest, problem.BadRequest}, // a data exception is the request's fault
	} {
		req, err := http.NewRequest(http.MethodPost, g.URL+"/v1/organizations", strings.NewReader(`{"name":"`+tc.name+`"}`))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+g.AdminToken)
		req.Header.Set("Content-Type", "application/json")
		res, err := g.HTTPClient(nil).Do(req)
		require.NoError(t, err)
		raw, err := io.ReadAll(res.Body)
		res.Body.Close()
		require.NoError(t, err)
		require.Equal(t, tc.status, res.StatusCode, string(raw))
		require.Equal(t, "application/problem+json", res.Header.Get("Content-Type"))
		var p struct{ Code, Detail string }
		require.NoError(t, json.Unmarshal(raw, &p))
		require.Equal(t, tc.code, p.Code)
		require.NotEmpty(t, p.Detail)
		require.NotContains(t, string(raw), secret)
		require.NotContains(t, string(raw), "refuse_organization")
		require.NotContains(t, string(raw), "SQLSTATE")
	}
}
