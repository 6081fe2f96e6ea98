package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/worker-gateway/gateway/internal/pki"
	"github.com/worker-gateway/gateway/store"
)

const adminUsage = `gateway admin <command> [flags]

  bootstrap-token      -name NAME [-scopes admin,producer,reader] [-organization ID]   print a new API token
  create-organization  -name NAME                                                     print the new organization's id
  create-worker        -name NAME [-type scanner|ai] [-capacity N] [-cert FILE]       print the new worker's id
  assign               -organization ID -worker ID
  issue-dev-certs      -dir DIR [-worker-name NAME] [-hosts a,b]   write a dev CA, a server certificate and worker certificates

All but issue-dev-certs need -database-url or $DATABASE_URL.
`

func runAdmin(ctx context.Context, args []string) error {
	if len(args) == 0 {
		fmt.Print(adminUsage)
		return fmt.Errorf("missing admin command")
	}
	fs := flag.NewFlagSet("admin "+args[0], flag.ExitOnError)
	url := fs.String("database-url", env("DATABASE_URL", ""), "PostgreSQL URL ($DATABASE_URL)")
	name := fs.String("name", "", "name")
	scopes := fs.String("scopes", "admin", "comma-separated token scopes")
	org := fs.String("organization", "", "organization id")
	workerType := fs.String("type", "scanner", "worker type")
	capacity := fs.Int("capacity", 4, "worker max_concurrent_tasks")
	certFile := fs.String("cert", "", "worker client certificate PEM file")
	worker := fs.String("worker", "", "worker id")
	dir := fs.String("dir", "", "output directory")
	workerName := fs.String("worker-name", "worker", "common name of the worker certificate")
	hosts := fs.String("hosts", "localhost,127.0.0.1,::1", "comma-separated names and addresses the server certificate is for")
	_ = fs.Parse(args[1:])

	if args[0] == "issue-dev-certs" {
		if *dir == "" {
			return fmt.Errorf("issue-dev-certs needs -dir")
		}
		return issueDevCerts(*dir, *workerName, strings.Split(*hosts, ","))
	}
	if *url == "" {
		return fmt.Errorf("admin %s needs -database-url or $DATABASE_URL", args[0])
	}
	pool, err := store.OpenPool(ctx, *url)
	if err != nil {
		return err
	}
	defer pool.Close()
	st := store.New(pool)

	switch args[0] {
	case "bootstrap-token":
		p := store.CreateAPITokenParams{Name: *name, Permissions: strings.Split(*scopes, ",")}
		if *name == "" {
			p.Name = "bootstrap"
		}
		if *org != "" {
			id, err := uuid.Parse(*org)
			if err != nil {
				return fmt.Errorf("bad -organization: %w", err)
			}
			p.OrganizationID = &id
		}
		token, _, err := st.CreateAPIToken(ctx, store.EveryOrganization(), p)
		if err != nil {
			return err
		}
		fmt.Println(token)
	case "create-organization":
		o, err := st.CreateOrganization(ctx, store.EveryOrganization(), *name)
		if err != nil {
			return err
		}
		fmt.Println(o.ID)
	case "create-worker":
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
		w, err := st.CreateWorker(ctx, store.EveryOrganization(), p, time.Minute)
		if err != nil {
			return err
		}
		fmt.Println(w.ID)
	case "assign":
		orgID, err1 := uuid.Parse(*org)
		workerID, err2 := uuid.Parse(*worker)
		if err1 != nil || err2 != nil {
			return fmt.Errorf("assign needs -organization and -worker ids")
		}
		if _, err := st.AssignWorker(ctx, store.EveryOrganization(), orgID, workerID); err != nil {
			return err
		}
	default:
		fmt.Print(adminUsage)
		return fmt.Errorf("unknown admin command %q", args[0])
	}
	return nil
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
