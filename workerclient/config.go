// This file holds a Worker's configuration: Config, its defaults and its
// validation.

package workerclient

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"runtime/debug"
	"time"
)

// Config configures a Worker. GatewayURL and Handler are required, and so is
// a client identity: CertFile and KeyFile, StateDir (with EnrollmentToken on
// first start), TLSConfig or HTTPClient.
type Config struct {
	// GatewayURL is the gateway's base URL, e.g. https://127.0.0.1:8443.
	GatewayURL string
	// CertFile and KeyFile are the worker's PEM client certificate and key.
	// They are re-read when they change on disk, so a renewed certificate is
	// used for new connections without a restart. The runtime does not
	// renew them itself: use StateDir for that.
	CertFile, KeyFile string
	// StateDir is where an enrolled worker keeps its identity: worker.key
	// (0600, generated here and never sent), worker.pem and ca.pem (the CA
	// that signed it). It is created (0700) if missing. When it holds no
	// certificate, Run first enrolls with EnrollmentToken; an existing
	// certificate is reused on restart, without a token. The runtime renews
	// the certificate by itself and rewrites the files. One worker process
	// per StateDir. Not combined with CertFile, KeyFile, TLSConfig or
	// HTTPClient.
	StateDir string
	// EnrollmentToken is the one-time token an operator got when creating
	// the worker (or from POST /v1/workers/{id}/enrollment-token). It is used
	// only when StateDir holds no certificate, or one that has expired.
	// Requires StateDir.
	EnrollmentToken string
	// CAFile is the PEM bundle of CAs trusted to sign the gateway's
	// certificate; empty means the system roots (with StateDir: the system
	// roots plus StateDir/ca.pem, when a previous enrollment wrote it).
	CAFile string
	// TLSConfig, when set, is used instead of CertFile, KeyFile and CAFile.
	// Its MinVersion is raised to TLS 1.3.
	TLSConfig *tls.Config
	// HTTPClient, when set, is used as is for every call instead of one
	// built by NewHTTPClient (tests, proxies, custom transports). It must
	// allow a long-poll of WaitSeconds plus a margin.
	HTTPClient *http.Client
	// UploadHTTPClient, when set, is used for artifact uploads to URLs that
	// are not the gateway's (presigned object-storage URLs). By default
	// those go through a client without the worker's certificate that
	// trusts the system roots plus CAFile (with TLSConfig: its RootCAs, or
	// the system roots when it has none). Uploads to the gateway itself use
	// the worker's mTLS client.
	UploadHTTPClient *http.Client

	// Slots is how many tasks run at once (default 1, at most 1000). A poll
	// asks for as many tasks as there are free slots.
	Slots int
	// WaitSeconds is how long a poll waits for a task (default 20); the
	// gateway caps it (25 s by default).
	WaitSeconds int
	// Capabilities is advertised with every poll and heartbeat; a task's
	// required capabilities must be contained in it.
	Capabilities map[string]any
	// SoftwareVersion is advertised with every poll and heartbeat (default:
	// the main module's path and version).
	SoftwareVersion string

	// Handler runs one task. Required.
	Handler Handler
	// Logger receives the runtime's logs (default slog.Default()). Lease
	// tokens and idempotency keys are never logged.
	Logger *slog.Logger
	// DrainTimeout is how long running tasks may finish once Run's context
	// is cancelled (default 30s). After it their contexts are cancelled with
	// ErrDrainTimeout and they are completed as cancelled, which releases
	// them without using up an attempt.
	DrainTimeout time.Duration
	// ResultBatchSize is how many records LeasedTask.Emit buffers before it
	// sends them as one batch (default 100, at most 10000, the contract's
	// limit; a gateway refuses more than 1000 by default). A batch is also
	// sent early when its encoded body would pass 1 MiB.
	ResultBatchSize int
}

// withDefaults returns cfg with its defaults applied, or why it is invalid.
func (cfg Config) withDefaults() (Config, error) {
	bad := func(format string, args ...any) (Config, error) {
		return Config{}, fmt.Errorf("workerclient: invalid config: "+format, args...)
	}
	if cfg.GatewayURL == "" {
		return bad("GatewayURL is required")
	}
	u, err := url.Parse(cfg.GatewayURL)
	if err != nil {
		return bad("GatewayURL: %v", err)
	}
	if u.Scheme != "https" || u.Host == "" {
		return bad("GatewayURL %q must be an https:// URL with a host", cfg.GatewayURL)
	}
	if cfg.Handler == nil {
		return bad("Handler is required")
	}
	switch enrolled := cfg.StateDir != "" || cfg.EnrollmentToken != ""; {
	case enrolled && (cfg.CertFile != "" || cfg.KeyFile != "" || cfg.TLSConfig != nil || cfg.HTTPClient != nil):
		return bad("StateDir and EnrollmentToken (an enrolled identity) cannot be combined with CertFile, KeyFile, TLSConfig or HTTPClient")
	case cfg.EnrollmentToken != "" && cfg.StateDir == "":
		return bad("EnrollmentToken needs a StateDir to keep the certificate in")
	case !enrolled && cfg.HTTPClient == nil && cfg.TLSConfig == nil && (cfg.CertFile == "" || cfg.KeyFile == ""):
		return bad("CertFile and KeyFile (or StateDir with an EnrollmentToken, TLSConfig, or HTTPClient) are required")
	}
	switch {
	case cfg.Slots == 0:
		cfg.Slots = defaultSlots
	case cfg.Slots < 0 || cfg.Slots > maxSlots:
		return bad("Slots %d is outside 1..%d", cfg.Slots, maxSlots)
	}
	switch {
	case cfg.WaitSeconds == 0:
		cfg.WaitSeconds = defaultWaitSeconds
	case cfg.WaitSeconds < 0 || cfg.WaitSeconds > maxWaitSeconds:
		return bad("WaitSeconds %d is outside 1..%d", cfg.WaitSeconds, maxWaitSeconds)
	}
	switch {
	case cfg.DrainTimeout == 0:
		cfg.DrainTimeout = defaultDrainTimeout
	case cfg.DrainTimeout < 0:
		return bad("DrainTimeout %v is negative", cfg.DrainTimeout)
	}
	switch {
	case cfg.ResultBatchSize == 0:
		cfg.ResultBatchSize = defaultResultBatchSize
	case cfg.ResultBatchSize < 0 || cfg.ResultBatchSize > maxResultBatchSize:
		return bad("ResultBatchSize %d is outside 1..%d", cfg.ResultBatchSize, maxResultBatchSize)
	}
	if cfg.SoftwareVersion == "" {
		cfg.SoftwareVersion = defaultSoftwareVersion()
	}
	if len(cfg.SoftwareVersion) > maxSoftwareVersion {
		return bad("SoftwareVersion is longer than %d bytes", maxSoftwareVersion)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return cfg, nil
}

func defaultSoftwareVersion() string {
	v := "workerclient"
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Path != "" {
		v = bi.Main.Path + "@" + bi.Main.Version
	}
	return truncate(v, maxSoftwareVersion)
}
