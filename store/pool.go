package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	pgxgoogleuuid "github.com/vgarvardt/pgx-google-uuid/v5"
)

// ConfigurePool prepares every connection of a pool for the store: pgx
// learns to send and read uuid.UUID in PostgreSQL's binary format (without
// this it goes through uuid.UUID's driver.Valuer, a string, on every
// parameter — a tenth of the gateway's CPU on the hot paths).
func ConfigurePool(cfg *pgxpool.Config) {
	afterConnect := cfg.AfterConnect
	cfg.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
		pgxgoogleuuid.Register(conn.TypeMap())
		if afterConnect != nil {
			return afterConnect(ctx, conn)
		}
		return nil
	}
}

// OpenPool opens a pool configured by ConfigurePool; configure, when given,
// adjusts the configuration first.
func OpenPool(ctx context.Context, databaseURL string, configure ...func(*pgxpool.Config)) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		return nil, fmt.Errorf("database url: %w", err)
	}
	for _, c := range configure {
		c(cfg)
	}
	ConfigurePool(cfg)
	return pgxpool.NewWithConfig(ctx, cfg)
}
