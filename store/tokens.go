package store

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// APITokenPrefix marks gateway API tokens so they are recognisable in
// configuration and in secret scanners.
const APITokenPrefix = "wgt_"

// Principal is an authenticated control-plane caller.
type Principal struct {
	TokenID        uuid.UUID
	Scopes         []string
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
	Scopes         []string
	OrganizationID *uuid.UUID
	ExpiresIn      time.Duration
}

// CreateAPIToken stores a new token's hash and returns the token, which is
// never retrievable again.
func (s *Store) CreateAPIToken(ctx context.Context, p CreateAPITokenParams) (token string, id uuid.UUID, err error) {
	token, err = NewSecret(APITokenPrefix)
	if err != nil {
		return "", uuid.Nil, err
	}
	var expires *float64
	if p.ExpiresIn > 0 {
		v := p.ExpiresIn.Seconds()
		expires = &v
	}
	err = s.pool.QueryRow(ctx, `
		INSERT INTO api_tokens (name, token_hash, scopes, organization_id, expires_at)
		VALUES ($1, $2, $3, $4, now() + make_interval(secs => $5::float8)) RETURNING id`,
		p.Name, HashToken(token), p.Scopes, p.OrganizationID, expires).Scan(&id)
	if isForeignKeyViolation(err) {
		return "", uuid.Nil, fmt.Errorf("%w: organization", ErrNotFound)
	}
	if err != nil {
		return "", uuid.Nil, fmt.Errorf("create api token: %w", err)
	}
	return token, id, nil
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
		HashToken(token)).Scan(&p.TokenID, &p.Scopes, &p.OrganizationID, &stale)
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
	Scopes         []string
	OrganizationID *uuid.UUID
	CreatedAt      time.Time
	ExpiresAt      *time.Time
	RevokedAt      *time.Time
	LastUsedAt     *time.Time
}

const apiTokenColumns = `id, name, scopes, organization_id, created_at, expires_at, revoked_at, last_used_at`

func scanAPIToken(row pgx.Row) (APIToken, error) {
	var t APIToken
	err := row.Scan(&t.ID, &t.Name, &t.Scopes, &t.OrganizationID, &t.CreatedAt, &t.ExpiresAt, &t.RevokedAt, &t.LastUsedAt)
	return t, err
}

// GetAPIToken returns a token's metadata if the scope covers it.
func (s *Store) GetAPIToken(ctx context.Context, scope Scope, id uuid.UUID) (APIToken, error) {
	t, err := scanAPIToken(s.pool.QueryRow(ctx, `SELECT `+apiTokenColumns+` FROM api_tokens
		WHERE id = $1 AND ($2::uuid IS NULL OR organization_id = $2)`, id, scope.Organization))
	if errors.Is(err, pgx.ErrNoRows) {
		return APIToken{}, ErrNotFound
	}
	return t, err
}

// ListAPITokens lists tokens the scope covers, newest first.
func (s *Store) ListAPITokens(ctx context.Context, scope Scope) ([]APIToken, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+apiTokenColumns+` FROM api_tokens
		WHERE $1::uuid IS NULL OR organization_id = $1 ORDER BY created_at DESC, id DESC`, scope.Organization)
	if err != nil {
		return nil, fmt.Errorf("list api tokens: %w", err)
	}
	tokens, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (APIToken, error) { return scanAPIToken(r) })
	if err != nil {
		return nil, fmt.Errorf("list api tokens: %w", err)
	}
	return tokens, nil
}

// RevokeAPIToken revokes a token the scope covers; it stops working at once.
func (s *Store) RevokeAPIToken(ctx context.Context, scope Scope, id uuid.UUID) (APIToken, error) {
	t, err := scanAPIToken(s.pool.QueryRow(ctx, `UPDATE api_tokens SET revoked_at = coalesce(revoked_at, now())
		WHERE id = $1 AND ($2::uuid IS NULL OR organization_id = $2) RETURNING `+apiTokenColumns, id, scope.Organization))
	if errors.Is(err, pgx.ErrNoRows) {
		return APIToken{}, ErrNotFound
	}
	return t, err
}
