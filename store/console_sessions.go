package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/worker-gateway/gateway/store/internal/core"
)

// ConsoleSessionPrefix marks console session secrets (the cookie's value).
const ConsoleSessionPrefix = "wgs_"

// ConsoleSession is a signed-in console user: the API token it was opened
// with, and when it ends.
type ConsoleSession struct {
	Principal Principal
	ExpiresAt time.Time
}

// CreateConsoleSession exchanges a live API token for a console session of at
// most ttl (never past the token's own expiry) and returns the session's
// secret, which is never retrievable again. The token's expired sessions are
// deleted on the way.
func (s *Store) CreateConsoleSession(ctx context.Context, token string, ttl time.Duration) (secret string, session ConsoleSession, err error) {
	secret, err = NewSecret(ConsoleSessionPrefix)
	if err != nil {
		return "", ConsoleSession{}, err
	}
	err = s.inTx(ctx, "create console session", func(tx pgx.Tx) error {
		p := &session.Principal
		err := tx.QueryRow(ctx, `
			SELECT id, scopes, organization_id,
				least(now() + make_interval(secs => $2::float8), coalesce(expires_at, 'infinity'))
			FROM api_tokens
			WHERE token_hash = $1 AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())`,
			HashToken(token), ttl.Seconds()).Scan(&p.TokenID, &p.Permissions, &p.OrganizationID, &session.ExpiresAt)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("read api token: %w", err)
		}
		if _, err := tx.Exec(ctx, `DELETE FROM console_sessions WHERE token_id = $1 AND expires_at <= now()`, p.TokenID); err != nil {
			return fmt.Errorf("delete expired console sessions: %w", err)
		}
		_, err = tx.Exec(ctx, `INSERT INTO console_sessions (secret_hash, token_id, expires_at) VALUES ($1, $2, $3)`,
			HashToken(secret), p.TokenID, session.ExpiresAt)
		core.AuditTokenActor(ctx, p.TokenID, p.OrganizationID)
		core.AuditDetail(ctx, "expires_at", session.ExpiresAt.UTC())
		return err
	})
	if err != nil {
		return "", ConsoleSession{}, err
	}
	return secret, session, nil
}

// ConsoleSessionBySecret resolves a session's secret. Unknown, expired and
// deleted sessions, and sessions whose token is revoked or expired, are
// ErrNotFound alike.
func (s *Store) ConsoleSessionBySecret(ctx context.Context, secret string) (ConsoleSession, error) {
	var session ConsoleSession
	p := &session.Principal
	err := s.pool.QueryRow(ctx, `
		SELECT t.id, t.scopes, t.organization_id, cs.expires_at
		FROM console_sessions cs JOIN api_tokens t ON t.id = cs.token_id
		WHERE cs.secret_hash = $1 AND cs.expires_at > now()
			AND t.revoked_at IS NULL AND (t.expires_at IS NULL OR t.expires_at > now())`,
		HashToken(secret)).Scan(&p.TokenID, &p.Permissions, &p.OrganizationID, &session.ExpiresAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return ConsoleSession{}, ErrNotFound
	}
	if err != nil {
		return ConsoleSession{}, fmt.Errorf("read console session: %w", err)
	}
	return session, nil
}

// DeleteConsoleSession ends a session (logout); an unknown one is not an
// error.
func (s *Store) DeleteConsoleSession(ctx context.Context, secret string) error {
	return s.inTx(ctx, "delete console session", func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM console_sessions WHERE secret_hash = $1`, HashToken(secret)); err != nil {
			return fmt.Errorf("delete console session: %w", err)
		}
		return nil
	})
}
