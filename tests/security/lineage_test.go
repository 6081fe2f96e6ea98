package security

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/worker-gateway/gateway/store"
	"github.com/worker-gateway/gateway/tests/harness"
	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

// mint creates a token through the API with the given client (its parent)
// and requires success.
func mint(t *testing.T, parent *apiclient.ClientWithResponses, req apiclient.CreateApiTokenRequest) *apiclient.CreatedApiToken {
	t.Helper()
	res, err := parent.CreateApiTokenWithResponse(context.Background(), req)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, res.StatusCode(), string(res.Body))
	return res.JSON201
}

func problemCode(t *testing.T, body []byte) string {
	t.Helper()
	var p struct {
		Code string `json:"code"`
	}
	require.NoError(t, json.Unmarshal(body, &p), string(body))
	return p.Code
}

func scopes(s ...apiclient.TokenScope) []apiclient.TokenScope { return s }

const (
	admin    = apiclient.TokenScope("admin")
	producer = apiclient.TokenScope("producer")
	reader   = apiclient.TokenScope("reader")
)

// The red-team finding: a 60-second admin token minted a token that never
// expired. A child now inherits its parent's expiry, and asking for a
// later one is refused.
func TestLineageChildExpiresNoLaterThanParent(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	sixty := 60
	parent := mint(t, g.Control, apiclient.CreateApiTokenRequest{Name: "short-lived", Scopes: scopes(admin), ExpiresInSeconds: &sixty})
	require.NotNil(t, parent.ApiToken.ExpiresAt)
	require.NotNil(t, parent.ApiToken.ParentTokenId, "minted by the harness's admin token")
	asParent := g.ControlClient(t, parent.Token)

	child := mint(t, asParent, apiclient.CreateApiTokenRequest{Name: "child", Scopes: scopes(admin)})
	require.NotNil(t, child.ApiToken.ExpiresAt, "a child of an expiring token expires")
	require.False(t, child.ApiToken.ExpiresAt.After(*parent.ApiToken.ExpiresAt), "the child expires no later than its parent")
	require.True(t, child.ApiToken.ExpiresAt.Equal(*parent.ApiToken.ExpiresAt), "a child naming no expiry inherits its parent's")
	require.Equal(t, parent.ApiToken.Id, *child.ApiToken.ParentTokenId)

	grandchild := mint(t, g.ControlClient(t, child.Token), apiclient.CreateApiTokenRequest{Name: "grandchild", Scopes: scopes(reader)})
	require.True(t, grandchild.ApiToken.ExpiresAt.Equal(*parent.ApiToken.ExpiresAt))
	require.Equal(t, child.ApiToken.Id, *grandchild.ApiToken.ParentTokenId)

	hour := 3600
	res, err := asParent.CreateApiTokenWithResponse(context.Background(),
		apiclient.CreateApiTokenRequest{Name: "outliving", Scopes: scopes(reader), ExpiresInSeconds: &hour})
	require.NoError(t, err)
	require.Equal(t, http.StatusForbidden, res.StatusCode(), string(res.Body))
	require.Equal(t, "token-exceeds-parent", problemCode(t, res.Body))
	require.Equal(t, "application/problem+json", res.HTTPResponse.Header.Get("Content-Type"))

	// What the store holds agrees with what the API said.
	var outliving int
	require.NoError(t, g.Pool.QueryRow(context.Background(), `
		SELECT count(*) FROM api_tokens c JOIN api_tokens p ON c.parent_token_id = p.id
		WHERE (c.expires_at IS NULL AND p.expires_at IS NOT NULL) OR c.expires_at > p.expires_at`).Scan(&outliving))
	require.Zero(t, outliving, "no token outlives its parent")

	// A parent without expiry may still give its child one. That parent,
	// the harness's admin token, was made by the store as `gateway admin`
	// makes them: it has no parent and keeps working.
	day := 86400
	bounded := mint(t, g.Control, apiclient.CreateApiTokenRequest{Name: "day", Scopes: scopes(producer), ExpiresInSeconds: &day})
	require.NotNil(t, bounded.ApiToken.ExpiresAt)
	list, err := g.Control.ListApiTokensWithResponse(context.Background())
	require.NoError(t, err)
	for _, tok := range list.JSON200.Items {
		if tok.Id == *bounded.ApiToken.ParentTokenId {
			require.Nil(t, tok.ParentTokenId, "a bootstrap token has no parent")
			require.Nil(t, tok.ExpiresAt)
		}
	}
}

func TestLineageOrganizationBoundedByParent(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	orgA, orgB := g.NewOrganization(t, "a"), g.NewOrganization(t, "b")
	orgAdmin := mint(t, g.Control, apiclient.CreateApiTokenRequest{Name: "a admin", Scopes: scopes(admin), OrganizationId: &orgA})
	asOrgAdmin := g.ControlClient(t, orgAdmin.Token)

	child := mint(t, asOrgAdmin, apiclient.CreateApiTokenRequest{Name: "a producer", Scopes: scopes(producer)})
	require.Equal(t, orgA, *child.ApiToken.OrganizationId, "a child of an organization's token is of that organization")

	res, err := asOrgAdmin.CreateApiTokenWithResponse(context.Background(),
		apiclient.CreateApiTokenRequest{Name: "b producer", Scopes: scopes(producer), OrganizationId: &orgB})
	require.NoError(t, err)
	require.Equal(t, http.StatusNotFound, res.StatusCode(), "another organization is not even named: %s", res.Body)
}

// Only admin tokens may call createApiToken, and admin implies every scope,
// so a wider scope can only be asked of the store directly; it refuses it
// there too.
func TestLineageScopesBoundedByParent(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	ctx := context.Background()
	org := g.NewOrganization(t, "acme")
	_, producerID, err := g.Store.CreateAPIToken(ctx, store.EveryOrganization(), store.CreateAPITokenParams{Name: "producer", Permissions: []string{"producer"}, OrganizationID: &org})
	require.NoError(t, err)

	_, _, err = g.Store.CreateAPIToken(ctx, store.EveryOrganization(), store.CreateAPITokenParams{Name: "wider", Permissions: []string{"admin"}, ParentID: &producerID})
	var bounds *store.TokenBoundsError
	require.True(t, errors.As(err, &bounds), "admin is wider than producer: %v", err)
	_, _, err = g.Store.CreateAPIToken(ctx, store.EveryOrganization(), store.CreateAPITokenParams{Name: "reader", Permissions: []string{"reader"}, ParentID: &producerID})
	require.True(t, errors.As(err, &bounds), "producer does not imply reader: %v", err)

	_, narrowID, err := g.Store.CreateAPIToken(ctx, store.EveryOrganization(), store.CreateAPITokenParams{Name: "same", Permissions: []string{"producer"}, ParentID: &producerID})
	require.NoError(t, err)
	narrow, err := g.Store.GetAPIToken(ctx, store.EveryOrganization(), narrowID)
	require.NoError(t, err)
	require.Equal(t, org, *narrow.OrganizationID, "it inherits the parent's organization")

	// An admin parent implies producer and reader.
	_, adminID, err := g.Store.CreateAPIToken(ctx, store.EveryOrganization(), store.CreateAPITokenParams{Name: "admin", Permissions: []string{"admin"}})
	require.NoError(t, err)
	_, _, err = g.Store.CreateAPIToken(ctx, store.EveryOrganization(), store.CreateAPITokenParams{Name: "both", Permissions: []string{"producer", "reader"}, ParentID: &adminID})
	require.NoError(t, err)
}

func TestLineageRevokingParentRevokesDescendants(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	ctx := context.Background()
	parent := mint(t, g.Control, apiclient.CreateApiTokenRequest{Name: "parent", Scopes: scopes(admin)})
	asParent := g.ControlClient(t, parent.Token)
	child := mint(t, asParent, apiclient.CreateApiTokenRequest{Name: "child", Scopes: scopes(admin)})
	asChild := g.ControlClient(t, child.Token)
	grandchild := mint(t, asChild, apiclient.CreateApiTokenRequest{Name: "grandchild", Scopes: scopes(reader)})
	sibling := mint(t, g.Control, apiclient.CreateApiTokenRequest{Name: "unrelated", Scopes: scopes(reader)})

	listTasks := func(token string) *apiclient.ListTasksResponse {
		res, err := g.ControlClient(t, token).ListTasksWithResponse(ctx, &apiclient.ListTasksParams{})
		require.NoError(t, err)
		return res
	}
	for _, tok := range []string{parent.Token, child.Token, grandchild.Token, sibling.Token} {
		require.Equal(t, http.StatusOK, listTasks(tok).StatusCode())
	}

	res, err := g.Control.RevokeApiTokenWithResponse(ctx, parent.ApiToken.Id)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))

	for name, tok := range map[string]string{"parent": parent.Token, "child": child.Token, "grandchild": grandchild.Token} {
		got := listTasks(tok)
		require.Equal(t, http.StatusUnauthorized, got.StatusCode(), "the %s is revoked", name)
		require.Equal(t, "unauthenticated", problemCode(t, got.Body))
	}
	require.Equal(t, http.StatusOK, listTasks(sibling.Token).StatusCode(), "a token outside the tree keeps working")

	list, err := g.Control.ListApiTokensWithResponse(ctx)
	require.NoError(t, err)
	for _, tok := range list.JSON200.Items {
		switch tok.Id {
		case parent.ApiToken.Id, child.ApiToken.Id, grandchild.ApiToken.Id:
			require.True(t, tok.Revoked, tok.Name)
			require.NotNil(t, tok.RevokedAt, tok.Name)
		case sibling.ApiToken.Id:
			require.False(t, tok.Revoked)
		}
	}

	// The cascade is audited with its size.
	action, target := "api_token.revoke", parent.ApiToken.Id.String()
	events, err := g.Control.ListAuditEventsWithResponse(ctx, &apiclient.ListAuditEventsParams{Action: &action, TargetId: &target})
	require.NoError(t, err)
	require.Len(t, events.JSON200.Items, 1)
	var details struct {
		DescendantsRevoked int `json:"descendants_revoked"`
	}
	require.NoError(t, json.Unmarshal(*events.JSON200.Items[0].Details, &details))
	require.Equal(t, 2, details.DescendantsRevoked)

	// A revoked token mints nothing.
	again, err := asChild.CreateApiTokenWithResponse(ctx, apiclient.CreateApiTokenRequest{Name: "late", Scopes: scopes(reader)})
	require.NoError(t, err)
	require.Equal(t, http.StatusUnauthorized, again.StatusCode())
}

// Minting under a token while it is revoked leaves no live descendant:
// every child either committed before the cascade (and is revoked with it)
// or is refused.
func TestLineageRevocationRacesMinting(t *testing.T) {
	t.Parallel()
	g := harness.Start(t)
	ctx := context.Background()
	parent := mint(t, g.Control, apiclient.CreateApiTokenRequest{Name: "parent", Scopes: scopes(admin)})
	asParent := g.ControlClient(t, parent.Token)

	var wg sync.WaitGroup
	start := make(chan struct{})
	for range 16 {
		wg.Go(func() {
			<-start
			res, err := asParent.CreateApiTokenWithResponse(ctx, apiclient.CreateApiTokenRequest{Name: "racer", Scopes: scopes(admin)})
			if err != nil || res.StatusCode() != http.StatusCreated {
				return
			}
			// Grandchildren too, while they can.
			_, _ = g.ControlClient(t, res.JSON201.Token).CreateApiTokenWithResponse(ctx,
				apiclient.CreateApiTokenRequest{Name: "racer child " + uuid.NewString()[:4], Scopes: scopes(reader)})
		})
	}
	close(start)
	res, err := g.Control.RevokeApiTokenWithResponse(ctx, parent.ApiToken.Id)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode())
	wg.Wait()

	var live int
	require.NoError(t, g.Pool.QueryRow(ctx, `
		WITH RECURSIVE tree AS (
			SELECT id FROM api_tokens WHERE parent_token_id = $1
			UNION SELECT c.id FROM api_tokens c JOIN tree ON c.parent_token_id = tree.id)
		SELECT count(*) FROM api_tokens WHERE id IN (SELECT id FROM tree) AND revoked_at IS NULL`,
		parent.ApiToken.Id).Scan(&live))
	require.Zero(t, live, "no descendant of a revoked token is live")
}
