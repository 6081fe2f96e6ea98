package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/worker-gateway/gateway/internal/secretbox"
	"github.com/worker-gateway/gateway/server"
	"github.com/worker-gateway/gateway/store"
)

// secretsKeyFlags name the key-encryption keys of stored secrets. A key
// is read from a file (-secrets-key-file, $GATEWAY_SECRETS_KEY_FILE) or,
// as base64, from $GATEWAY_SECRETS_KEY — never from a flag's value (ps
// shows flags) and never from the database. The old key is the one a
// rotation moves away from: it only opens.
type secretsKeyFlags struct {
	keyFile    string
	oldKeyFile string
}

func defineSecretsKeyFlags(fs *flagSet) *secretsKeyFlags {
	f := &secretsKeyFlags{}
	fs.StringVar(&f.keyFile, "secrets-key-file", "", "file holding the key-encryption key of stored secrets (32 bytes, base64 or hex); or $GATEWAY_SECRETS_KEY (base64). New secrets are sealed with it")
	fs.StringVar(&f.oldKeyFile, "secrets-old-key-file", "", "during a key rotation: the previous key-encryption key (or $GATEWAY_SECRETS_OLD_KEY), which still opens data keys not yet re-wrapped")
	return f
}

// keyring reads the keys; nil when none is configured.
func (f *secretsKeyFlags) keyring() (*secretbox.Keyring, error) {
	current, ok, err := readKEK(f.keyFile, "GATEWAY_SECRETS_KEY")
	if err != nil || !ok {
		if err == nil && f.oldKeyFile != "" {
			err = usageError{"-secrets-old-key-file needs -secrets-key-file (the new key)"}
		}
		return nil, err
	}
	old, hasOld, err := readKEK(f.oldKeyFile, "GATEWAY_SECRETS_OLD_KEY")
	if err != nil {
		return nil, err
	}
	if hasOld && old.ID != current.ID {
		return secretbox.NewKeyring(current, old), nil
	}
	return secretbox.NewKeyring(current), nil
}

func readKEK(file, envName string) (secretbox.KEK, bool, error) {
	if file != "" {
		k, err := secretbox.ReadKEKFile(file)
		return k, err == nil, err
	}
	if v := os.Getenv(envName); v != "" {
		k, err := secretbox.ParseKEK(v)
		if err != nil {
			return secretbox.KEK{}, false, fmt.Errorf("$%s: %w", envName, err)
		}
		return k, true, nil
	}
	return secretbox.KEK{}, false, nil
}

const secretsLong = `Secrets — task secrets and webhook signing secrets — are sealed with AES-256-GCM
under a data key per secret, wrapped by a key-encryption key (KEK) read from -secrets-key-file
or $GATEWAY_SECRETS_KEY (base64).

Rotating the KEK, with the gateway serving throughout:
  1. gateway secrets generate-key > new.key
  2. restart every replica with -secrets-key-file new.key -secrets-old-key-file old.key
     (new secrets are sealed with the new key; both keys open)
  3. gateway secrets rotate-kek -database-url … -secrets-key-file new.key -secrets-old-key-file old.key
     (re-wraps every data key under the new key; values are not re-encrypted; webhook
     signing secrets still in plaintext, from before the gateway sealed them, are sealed)
  4. restart every replica with -secrets-key-file new.key alone, and destroy old.key.
A replica refuses to start when a stored data key was wrapped by a key it does not hold.`

func secretsCommand(a *cli) *command {
	return &command{name: "secrets", short: "manage the key-encryption key of stored secrets", long: secretsLong, sub: []*command{
		{name: "generate-key", short: "print a new random key-encryption key (base64)", setup: func(*flagSet) execFunc {
			return func(context.Context, []string) error {
				k, err := secretbox.GenerateKEK()
				if err != nil {
					return err
				}
				fmt.Fprintln(a.stdout, k.Encode())
				return nil
			}
		}},
		{name: "rotate-kek", short: "re-wrap every stored data key under -secrets-key-file (old keys from -secrets-old-key-file)", setup: func(fs *flagSet) execFunc {
			url := fs.String("database-url", "", "PostgreSQL URL")
			fs.alias("database-url", "DATABASE_URL")
			keys := defineSecretsKeyFlags(fs)
			return func(ctx context.Context, _ []string) error {
				if *url == "" {
					return usageError{"rotate-kek needs -database-url or $GATEWAY_DATABASE_URL"}
				}
				keyring, err := keys.keyring()
				if err != nil {
					return err
				}
				if keyring == nil {
					return usageError{"rotate-kek needs the new key: -secrets-key-file or $GATEWAY_SECRETS_KEY"}
				}
				pool, err := store.OpenPool(ctx, *url)
				if err != nil {
					return err
				}
				defer pool.Close()
				st := store.New(pool)
				// Webhook signing secrets still in plaintext are sealed
				// first, under the new key, then every data key not
				// wrapped by it is re-wrapped. One audit row per batch, in
				// the batch's transaction: what committed is recorded, even
				// if a later batch fails.
				ctx = store.WithAuditEach(ctx, store.AuditEvent{ActorType: "system", ActorID: "gateway secrets rotate-kek",
					Action: "secret.rotate_kek", TargetType: "secret"}, map[string]any{"kek_id": keyring.CurrentID()})
				sealed, err := st.SealWebhookSecrets(ctx, keyring, 100)
				n, hooks := 0, 0
				if err == nil {
					n, err = st.RewrapSecrets(ctx, keyring, 100)
				}
				if err == nil {
					hooks, err = st.RewrapWebhookSecrets(ctx, keyring, 100)
				}
				if err != nil {
					return fmt.Errorf("rotate-kek: %w (after %d re-wrapped, %d webhook secrets re-wrapped, %d sealed)", err, n, hooks, sealed)
				}
				fmt.Fprintf(a.stdout, "re-wrapped %d data keys under %s\n", n, keyring.CurrentID())
				fmt.Fprintf(a.stdout, "re-wrapped %d webhook signing secrets; sealed %d webhook targets' plaintext secrets\n", hooks, sealed)
				return nil
			}
		}},
	}}
}

// checkSecretsKey refuses to serve with the wrong key-encryption key.
func checkSecretsKey(ctx context.Context, st *store.Store, keyring *secretbox.Keyring) error {
	err := server.CheckSecretsKey(ctx, st, keyring)
	var wrong *server.WrongSecretsKeyError
	if errors.As(err, &wrong) {
		return fmt.Errorf("%w; start with the key-encryption key that wrapped them (-secrets-key-file), or both keys during a rotation (-secrets-old-key-file)", err)
	}
	return err
}
