package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/worker-gateway/gateway/internal/pki"
	"github.com/worker-gateway/gateway/store"
)

// tokenScopes are the permissions an API token can carry.
var tokenScopes = []string{"admin", "producer", "reader"}

// parseScopes splits a comma-separated scope list and checks every value,
// so a typo is named here rather than refused by a database constraint.
func parseScopes(list string) ([]string, error) {
	var scopes []string
	for s := range strings.SplitSeq(list, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if !slices.Contains(tokenScopes, s) {
			return nil, usageError{fmt.Sprintf("unknown token scope %q: scopes are %s", s, strings.Join(tokenScopes, ", "))}
		}
		scopes = append(scopes, s)
	}
	if len(scopes) == 0 {
		return nil, usageError{"no token scope: give one or more of " + strings.Join(tokenScopes, ", ")}
	}
	return scopes, nil
}

// withStore runs fn on a store opened on the -database-url flag defined
// on fs, once check (optional) found the other flags right: a mistake is
// named before any connection.
func withStore(fs *flagSet, check func() error, fn func(ctx context.Context, st *store.Store) error) execFunc {
	url := fs.String("database-url", "", "PostgreSQL URL")
	fs.alias("database-url", "DATABASE_URL")
	return func(ctx context.Context, _ []string) error {
		if check != nil {
			if err := check(); err != nil {
				return err
			}
		}
		if *url == "" {
			return usageError{"needs -database-url or $GATEWAY_DATABASE_URL"}
		}
		pool, err := store.OpenPool(ctx, *url)
		if err != nil {
			return err
		}
		defer pool.Close()
		return fn(ctx, store.New(pool))
	}
}

// adminAudit declares the audit record of an admin command's change: the
// store writes it in the change's transaction, with the id it creates.
func adminAudit(ctx context.Context, command, action, targetType string, details map[string]any) context.Context {
	return store.WithAudit(ctx, store.AuditEvent{ActorType: "system", ActorID: "gateway admin " + command,
		Action: action, TargetType: targetType}, details)
}

func adminCommand(a *cli) *command {
	return &command{name: "admin", short: "administrative tasks directly on the database (bootstrap)", sub: []*command{
		{name: "bootstrap-token", short: "print a new API token (shown once, stored hashed)", setup: func(fs *flagSet) execFunc {
			name := fs.String("name", "bootstrap", "token name")
			scopes := fs.String("scopes", "admin", "comma-separated token scopes: admin, producer, reader")
			org := fs.String("organization", "", "limit the token to this organization id")
			p := store.CreateAPITokenParams{}
			check := func() (err error) {
				p.Name = *name
				if p.Permissions, err = parseScopes(*scopes); err != nil {
					return err
				}
				if *org != "" {
					id, err := uuid.Parse(*org)
					if err != nil {
						return usageError{fmt.Sprintf("bad -organization: %v", err)}
					}
					p.OrganizationID = &id
				}
				return nil
			}
			return withStore(fs, check, func(ctx context.Context, st *store.Store) error {
				ctx = adminAudit(ctx, "bootstrap-token", "api_token.create", "api_token", map[string]any{"name": p.Name, "scopes": p.Permissions})
				token, _, err := st.CreateAPIToken(ctx, store.EveryOrganization(), p)
				if err != nil {
					return err
				}
				fmt.Fprintln(a.stdout, token)
				return nil
			})
		}},
		{name: "create-organization", short: "print a new organization's id", setup: func(fs *flagSet) execFunc {
			name := fs.String("name", "", "organization name (required)")
			policy := fs.String("scope-policy", store.ScopePolicyAllowList,
				"scan scope policy: allow_list (scan only approved targets) or unrestricted")
			check := func() error {
				if *name == "" {
					return usageError{"create-organization needs -name"}
				}
				if *policy != store.ScopePolicyAllowList && *policy != store.ScopePolicyUnrestricted {
					return usageError{"-scope-policy must be allow_list or unrestricted"}
				}
				return nil
			}
			return withStore(fs, check, func(ctx context.Context, st *store.Store) error {
				ctx = adminAudit(ctx, "create-organization", "organization.create", "organization",
					map[string]any{"name": *name, "scope_policy": *policy})
				o, err := st.CreateOrganization(ctx, store.EveryOrganization(), *name, *policy)
				if err != nil {
					return err
				}
				fmt.Fprintln(a.stdout, o.ID)
				return nil
			})
		}},
		{name: "create-worker", short: "register a worker by its certificate; print its id", setup: func(fs *flagSet) execFunc {
			name := fs.String("name", "", "worker name (required)")
			workerType := fs.String("type", "scanner", "worker type: scanner or ai")
			capacity := fs.Int("capacity", 4, "worker max_concurrent_tasks")
			certFile := fs.String("cert", "", "worker client certificate PEM file")
			check := func() error {
				if *name == "" {
					return usageError{"create-worker needs -name"}
				}
				return nil
			}
			return withStore(fs, check, func(ctx context.Context, st *store.Store) error {
				p := store.CreateWorkerParams{Name: *name, WorkerType: *workerType, MaxConcurrentTasks: *capacity}
				if *certFile != "" {
					pemBytes, err := os.ReadFile(*certFile)
					if err != nil {
						return err
					}
					cert, err := pki.ParseCertificatePEM(pemBytes)
					if err != nil {
						return err
					}
					p.CertificateFingerprint, p.CertificateSubject = pki.Fingerprint(cert), cert.Subject.String()
				}
				ctx = adminAudit(ctx, "create-worker", "worker.create", "worker",
					map[string]any{"name": p.Name, "certificate_fingerprint": p.CertificateFingerprint})
				w, err := st.CreateWorker(ctx, store.EveryOrganization(), p, time.Minute)
				if err != nil {
					return err
				}
				fmt.Fprintln(a.stdout, w.ID)
				return nil
			})
		}},
		{name: "assign", short: "let a worker serve an organization", setup: func(fs *flagSet) execFunc {
			org := fs.String("organization", "", "organization id (required)")
			worker := fs.String("worker", "", "worker id (required)")
			var orgID, workerID uuid.UUID
			check := func() error {
				var err1, err2 error
				orgID, err1 = uuid.Parse(*org)
				workerID, err2 = uuid.Parse(*worker)
				if err1 != nil || err2 != nil {
					return usageError{"assign needs -organization and -worker ids"}
				}
				return nil
			}
			return withStore(fs, check, func(ctx context.Context, st *store.Store) error {
				ctx = store.WithAudit(ctx, store.AuditEvent{ActorType: "system", ActorID: "gateway admin assign",
					Action: "assignment.create", TargetType: "worker", TargetID: workerID.String(), OrganizationID: &orgID}, nil)
				_, err := st.AssignWorker(ctx, store.EveryOrganization(), orgID, workerID)
				return err
			})
		}},
		{name: "issue-dev-certs", short: "write a dev CA, a server certificate and worker certificates (no database)", setup: func(fs *flagSet) execFunc {
			dir := fs.String("dir", "", "output directory (required)")
			workerName := fs.String("worker-name", "worker", "common name of the worker certificate")
			hosts := fs.String("hosts", "localhost,127.0.0.1,::1", "comma-separated names and addresses the server certificate is for")
			return func(context.Context, []string) error {
				if *dir == "" {
					return usageError{"issue-dev-certs needs -dir"}
				}
				return issueDevCerts(*dir, *workerName, strings.Split(*hosts, ","))
			}
		}},
	}}
}

// devPKI names the files issue-dev-certs writes.
type devPKI struct{ dir string }

func (p devPKI) path(name string) string { return filepath.Join(p.dir, name) }
func (p devPKI) CACert() string          { return p.path("ca.pem") }
func (p devPKI) CAKey() string           { return p.path("ca-key.pem") }
func (p devPKI) ServerCert() string      { return p.path("server.pem") }
func (p devPKI) ServerKey() string       { return p.path("server-key.pem") }
func (p devPKI) WorkerCert() string      { return p.path("worker.pem") }
func (p devPKI) WorkerKey() string       { return p.path("worker-key.pem") }

// The manual worker is a second identity for driving the protocol by hand
// (curl, scripts) next to the running reference worker.
func (p devPKI) ManualWorkerCert() string { return p.path("manual-worker.pem") }
func (p devPKI) ManualWorkerKey() string  { return p.path("manual-worker-key.pem") }

// issueDevCerts writes a development CA, a server certificate for
// localhost/127.0.0.1/::1 and two worker client certificates (the reference
// worker's and one for driving the protocol by hand). Existing files
// are kept, so restarts keep identities.
func issueDevCerts(dir, workerName string, hosts []string) error {
	p := devPKI{dir}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if _, err := os.Stat(p.WorkerCert()); err == nil {
		return nil
	}
	ca, err := pki.NewCA("Worker Gateway dev CA")
	if err != nil {
		return err
	}
	if err := ca.WriteFiles(p.CACert(), p.CAKey()); err != nil {
		return err
	}
	srv, err := ca.IssueServer(hosts, 365*24*time.Hour)
	if err != nil {
		return err
	}
	if err := srv.WriteFiles(p.ServerCert(), p.ServerKey()); err != nil {
		return err
	}
	w, err := ca.IssueClient(workerName, 365*24*time.Hour)
	if err != nil {
		return err
	}
	if err := w.WriteFiles(p.WorkerCert(), p.WorkerKey()); err != nil {
		return err
	}
	manual, err := ca.IssueClient("manual-worker", 365*24*time.Hour)
	if err != nil {
		return err
	}
	return manual.WriteFiles(p.ManualWorkerCert(), p.ManualWorkerKey())
}
