package main

import (
	"context"
	"fmt"

	"github.com/worker-gateway/gateway/internal/secretbox"
	"github.com/worker-gateway/gateway/migrations"
	"github.com/worker-gateway/gateway/store"
)

func migrateCommand(a *cli) *command {
	// databaseURL defines the one flag both subcommands take.
	databaseURL := func(fs *flagSet) *string {
		url := fs.String("database-url", "", "PostgreSQL URL")
		fs.alias("database-url", "DATABASE_URL")
		return url
	}
	need := func(url string) error {
		if url == "" {
			return usageError{"migrate needs -database-url or $GATEWAY_DATABASE_URL"}
		}
		return nil
	}
	return &command{name: "migrate", short: "apply or inspect the database schema migrations", sub: []*command{
		{name: "up", short: "apply the expand migrations (and, given the secrets key, seal webhook secrets stored in plaintext); -contract: the contract step (sealing first, given the key)", setup: func(fs *flagSet) execFunc {
			url := databaseURL(fs)
			keys := defineSecretsKeyFlags(fs)
			contract := fs.Bool("contract", false, "apply the contract migrations instead: run once every replica runs this release")
			return func(ctx context.Context, _ []string) error {
				if err := need(*url); err != nil {
					return err
				}
				keyring, err := keys.keyring()
				if err != nil {
					return err
				}
				if *contract {
					// Webhook secrets the previous release wrote in plaintext
					// are sealed first: the step refuses any left unsealed.
					// (Before the expand migrations, UpContract says what to run.)
					latest, _ := migrations.Latest()
					if v, dirty, err := migrations.Version(*url); keyring != nil && err == nil && !dirty && v >= latest {
						if err := sealWebhookSecrets(ctx, *url, keyring, a); err != nil {
							return err
						}
					}
					if err := migrations.UpContract(ctx, *url); err != nil {
						return err
					}
					c, _, err := migrations.ContractVersion(*url)
					if err != nil {
						return err
					}
					fmt.Fprintf(a.stdout, "database contracted up to version %d\n", c)
					return nil
				}
				if err := migrations.Up(ctx, *url); err != nil {
					return err
				}
				if keyring != nil {
					if err := sealWebhookSecrets(ctx, *url, keyring, a); err != nil {
						return err
					}
				}
				v, _, err := migrations.Version(*url)
				if err != nil {
					return err
				}
				fmt.Fprintf(a.stdout, "database at version %d\n", v)
				return nil
			}
		}},
		{name: "version", short: "print the database's schema version and this binary's latest", setup: func(fs *flagSet) execFunc {
			url := databaseURL(fs)
			return func(context.Context, []string) error {
				if err := need(*url); err != nil {
					return err
				}
				v, dirty, err := migrations.Version(*url)
				if err != nil {
					return err
				}
				c, _, err := migrations.ContractVersion(*url)
				if err != nil {
					return err
				}
				latest, _ := migrations.Latest()
				fmt.Fprintf(a.stdout, "database at version %d (dirty=%t), contracted up to %d; this binary's latest is %d\n", v, dirty, c, latest)
				return nil
			}
		}},
	}}
}

// sealWebhookSecrets runs the step migration 000027 leaves to the gateway,
// which holds the key: webhook signing secrets still in plaintext are
// sealed (serve does the same at start-up).
func sealWebhookSecrets(ctx context.Context, url string, keyring *secretbox.Keyring, a *cli) error {
	pool, err := store.OpenPool(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	n, err := store.New(pool).SealWebhookSecrets(ctx, keyring, 100)
	if err != nil {
		return fmt.Errorf("seal webhook secrets: %w (after %d sealed; run again to resume)", err, n)
	}
	if n > 0 {
		fmt.Fprintf(a.stdout, "sealed the webhook signing secrets of %d targets under %s\n", n, keyring.CurrentID())
	}
	return nil
}
