package store

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/worker-gateway/gateway/problem"
	"github.com/worker-gateway/gateway/store/internal/core"
)

// APITokenPrefix marks gateway API tokens so they are recognisable in
// configuration and in secret scanners.
const APITokenPrefix = "wgt_"

// Principal is an authenticated control-plane caller.
type Principal struct {
	TokenID        uuid.UUID
	Permissions    []string
	OrganizationID *uuid.UUID
}

// HashToken is how secrets are stored: only their SHA-256.
func HashToken(token string) []byte {
	sum := sha256.Sum256([]byte(token))
	return sum[:]
}

// NewSecret returns a random token with the given prefix (256 bits).
func NewSecret(prefix string) (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return prefix + base64.RawURLEncoding.EncodeToString(b), nil
}

// CreateAPITokenParams describes a new API token.
type CreateAPITokenParams struct {
	Name           string
	Permissions    []string
	OrganizationID *uuid.UUID
	ExpiresIn      time.Duration
	// ParentID is the token minting this one (nil for tokens created by the
	// `gateway admin` command). The new token is bounded by it: see
	// CreateAPIToken.
	ParentID *uuid.UUID
}

// TokenBoundsError refuses a token that would outlive or outrank the token
// minting it. Detail is safe to show to that token's holder.
type TokenBoundsError struct{ Detail problem.Text }

func (e *TokenBoundsError) Error() string { return "token exceeds its parent: " + string(e.Detail) }

// tokenLineageLock serialises revocation cascades against the minting of
// children (see RevokeAPIToken). Both are rare; minting takes it shared.
const tokenLineageLock = 0x746f6b656e5f6c6e // "token_ln"

// CreateAPIToken stores a new token's hash and returns the token, which is
// never retrievable again. With a parent, the new token is bounded by it in
// the same transaction: its permissions are a subset of the parent's (admin
// implies producer and reader), its organization is the parent's when the
// parent has one, and it expires no later than the parent: it inherits the
// parent's expiry when it asks for none, and asking for a later one is a
// *TokenBoundsError rather than a silent clamp, so the caller learns the
// token will not live as long as it asked. A caller scoped to one
// organization mints tokens of that organization only.
func (s *Store) CreateAPIToken(ctx context.Context, tenant Tenant, p CreateAPITokenParams) (token string, id uuid.UUID, err error) {
	if org := tenant.Organization(); org != nil {
		if p.OrganizationID != nil && *p.OrganizationID != *org {
			return "", uuid.Nil, ErrNotFound
		}
		p.OrganizationID = org
	}
	token, err = NewSecret(APITokenPrefix)
	if err != nil {
		return "", uuid.Nil, err
	}
	var expires *float64
	if p.ExpiresIn > 0 {
		v := p.ExpiresIn.Seconds()
		expires = &v
	}
	err = s.inTx(ctx, "create api token", func(tx pgx.Tx) error {
		var inherited *time.Time
		if p.ParentID != nil {
			var err error
			if inherited, err = boundByParent(ctx, tx, &p, expires); err != nil {
				return err
			}
		}
		if err := tx.QueryRow(ctx, `
			INSERT INTO api_tokens (name, token_hash, scopes, organization_id, expires_at, parent_token_id)
			VALUES ($1, $2, $3, $4, coalesce($7::timestamptz, now() + make_interval(secs => $5::float8)), $6)
			RETURNING id`,
			p.Name, HashToken(token), p.Permissions, p.OrganizationID, expires, p.ParentID, inherited).Scan(&id); err != nil {
			return err
		}
		core.AuditTarget(ctx, id, p.OrganizationID)
		return nil
	})
	if core.IsForeignKeyViolation(err) {
		return "", uuid.Nil, fmt.Errorf("%w: organization", ErrNotFound)
	}
	if err != nil {
		return "", uuid.Nil, fmt.Errorf("create api token: %w", err)
	}
	return token, id, nil
}

// boundByParent checks a new token against its live parent, fills in the
// parent's organization, and returns the parent's expiry when the token
// inherits it (it asked for none). It holds the lineage lock shared until the transaction
// ends, so a revocation of the parent either sees the new child or commits
// first and makes this refuse it.
func boundByParent(ctx context.Context, tx pgx.Tx, p *CreateAPITokenParams, expiresIn *float64) (inherited *time.Time, err error) {
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock_shared($1)`, int64(tokenLineageLock)); err != nil {
		return nil, fmt.Errorf("lock token lineage: %w", err)
	}
	var (
		permissions []string
		org         *uuid.UUID
		expiresAt   *time.Time
		outlives    bool
		leftSecs    int64
	)
	// The database's clock decides, as for every expiry.
	err = tx.QueryRow(ctx, `
		SELECT scopes, organization_id, expires_at,
			coalesce(now() + make_interval(secs => $2::float8) > expires_at, false),
			coalesce(floor(extract(epoch FROM expires_at - now()))::bigint, 0)
		FROM api_tokens
		WHERE id = $1 AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())`,
		*p.ParentID, expiresIn).Scan(&permissions, &org, &expiresAt, &outlives, &leftSecs)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrParentTokenInactive
	}
	if err != nil {
		return nil, fmt.Errorf("read parent token: %w", err)
	}
	if !slices.Contains(permissions, "admin") {
		for _, sc := range p.Permissions {
			if !slices.Contains(permissions, sc) {
				return nil, &TokenBoundsError{Detail: problem.Text(fmt.Sprintf("scope %q is not one of the minting token's scopes %v", sc, permissions))}
			}
		}
	}
	if org != nil {
		if p.OrganizationID != nil && *p.OrganizationID != *org {
			return nil, &TokenBoundsError{Detail: "the minting token is limited to another organization"}
		}
		p.OrganizationID = org
	}
	if outlives {
		return nil, &TokenBoundsError{Detail: problem.Text(fmt.Sprintf(
			"expires_in_seconds would outlive the minting token, which expires at %s: ask for at most %d seconds, or give none to inherit its expiry",
			expiresAt.UTC().Format(time.RFC3339), max(leftSecs, 0)))}
	}
	if expiresIn == nil {
		return expiresAt, nil
	}
	return nil, nil
}

// AuthenticateToken resolves a bearer token to its principal; unknown,
// revoked and expired tokens are ErrNotFound alike.
func (s *Store) AuthenticateToken(ctx context.Context, token string) (Principal, error) {
	var p Principal
	var stale bool
	err := s.pool.QueryRow(ctx, `
		SELECT id, scopes, organization_id, last_used_at IS NULL OR last_used_at < now() - interval '1 minute'
		FROM api_tokens
		WHERE token_hash = $1 AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())`,
		HashToken(token)).Scan(&p.TokenID, &p.Permissions, &p.OrganizationID, &stale)
	if errors.Is(err, pgx.ErrNoRows) {
		return Principal{}, ErrNotFound
	}
	if err != nil {
		return Principal{}, fmt.Errorf("authenticate token: %w", err)
	}
	if stale {
		// Recorded at most once a minute so authentication stays read-only.
		if _, err := s.pool.Exec(ctx, `UPDATE api_tokens SET last_used_at = now() WHERE id = $1`, p.TokenID); err != nil {
			return Principal{}, fmt.Errorf("touch api token: %w", err)
		}
	}
	return p, nil
}

// APIToken is an API token's metadata (never the token).
type APIToken struct {
	ID             uuid.UUID
	Name           string
	Permissions    []string
	OrganizationID *uuid.UUID
	CreatedAt      time.Time
	ExpiresAt      *time.Time
	RevokedAt      *time.Time
	LastUsedAt     *time.Time
	// ParentID is the token that minted it (nil: made by `gateway admin`).
	ParentID *uuid.UUID
}

const apiTokenColumns = `id, name, scopes, organization_id, created_at, expires_at, revoked_at, last_used_at, parent_token_id`

func scanAPIToken(row pgx.Row) (APIToken, error) {
	var t APIToken
	err := row.Scan(&t.ID, &t.Name, &t.Permissions, &t.OrganizationID, &t.CreatedAt, &t.ExpiresAt, &t.RevokedAt, &t.LastUsedAt, &t.ParentID)
	return t, err
}

// GetAPIToken returns a token's metadata if the scope covers it.
func (s *Store) GetAPIToken(ctx context.Context, tenant Tenant, id uuid.UUID) (APIToken, error) {
	t, err := scanAPIToken(s.pool.QueryRow(ctx, `SELECT `+apiTokenColumns+` FROM api_tokens
		WHERE id = $1 AND `+core.InTenant("organization_id", "$2"), id, tenant.Arg()))
	if errors.Is(err, pgx.ErrNoRows) {
		return APIToken{}, ErrNotFound
	}
	return t, err
}

// ListAPITokens lists tokens the scope covers, newest first.
func (s *Store) ListAPITokens(ctx context.Context, tenant Tenant) ([]APIToken, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+apiTokenColumns+` FROM api_tokens
		WHERE `+core.InTenant("organization_id", "$1")+` ORDER BY created_at DESC, id DESC`, tenant.Arg())
	if err != nil {
		return nil, fmt.Errorf("list api tokens: %w", err)
	}
	tokens, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (APIToken, error) { return scanAPIToken(r) })
	if err != nil {
		return nil, fmt.Errorf("list api tokens: %w", err)
	}
	return tokens, nil
}

// RevokeAPIToken revokes a token the scope covers, and with it every token
// it minted, recursively (children, grandchildren…), in the same
// transaction: they all stop working at once. descendants counts the
// descendants this call revoked (not those revoked before).
//
// It holds the lineage lock exclusively before it reads the tree, so a
// child being minted concurrently (which holds it shared) is either
// committed and seen here, or refused afterwards because its parent is
// revoked: no descendant escapes.
func (s *Store) RevokeAPIToken(ctx context.Context, tenant Tenant, id uuid.UUID) (t APIToken, descendants int64, err error) {
	err = s.inTx(ctx, "revoke api token", func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(tokenLineageLock)); err != nil {
			return fmt.Errorf("lock token lineage: %w", err)
		}
		var err error
		t, err = scanAPIToken(tx.QueryRow(ctx, `UPDATE api_tokens SET revoked_at = coalesce(revoked_at, now())
			WHERE id = $1 AND `+core.InTenant("organization_id", "$2")+` RETURNING `+apiTokenColumns, id, tenant.Arg()))
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return err
		}
		// Descendants of an organization's token are of that organization
		// (CreateAPIToken), so the scope needs no check here.
		tag, err := tx.Exec(ctx, `
			WITH RECURSIVE descendants AS (
				SELECT id FROM api_tokens WHERE parent_token_id = $1
				UNION
				SELECT c.id FROM api_tokens c JOIN descendants d ON c.parent_token_id = d.id
			)
			UPDATE api_tokens SET revoked_at = now()
			WHERE id IN (SELECT id FROM descendants) AND revoked_at IS NULL`, id)
		if err != nil {
			return fmt.Errorf("revoke descendants: %w", err)
		}
		descendants = tag.RowsAffected()
		core.AuditTarget(ctx, t.ID, t.OrganizationID)
		core.AuditDetail(ctx, "descendants_revoked", descendants)
		return nil
	})
	if err != nil {
		return APIToken{}, 0, err
	}
	return t, descendants, nil
}
