// Package workerclient is the Go worker runtime of the Worker Gateway: a
// Worker that leases tasks, runs them and reports their outcome, so that a
// worker author writes only a Handler. It is built on the generated HTTP
// client for every route of openapi.yaml, package apiclient
// (apiclient/client.gen.go, never edited by hand).
//
// # Running a worker
//
//	w, err := workerclient.NewWorker(workerclient.Config{
//		GatewayURL: "https://gateway.example:8443",
//		CertFile:   "worker.crt", KeyFile: "worker.key", CAFile: "ca.crt",
//		Slots:      4,
//		Capabilities: map[string]any{"plugins": []string{"echo"}},
//		Handler: func(ctx context.Context, t *workerclient.LeasedTask) error {
//			return nil // succeeded
//		},
//	})
//	if err != nil { … }
//	err = w.Run(ctx) // until ctx is cancelled, then drains
//
// # Enrollment and certificate renewal
//
// Instead of certificate files, a worker can enroll: give it a StateDir and,
// on first start, the one-time EnrollmentToken an operator got when creating
// it.
//
//	w, err := workerclient.NewWorker(workerclient.Config{
//		GatewayURL:      "https://gateway.example:8443",
//		StateDir:        "/var/lib/worker",
//		EnrollmentToken: os.Getenv("WORKER_ENROLLMENT_TOKEN"),
//		CAFile:          "ca.crt", // or nothing: the system roots
//		Handler:         handler,
//	})
//
// When StateDir holds no certificate, Run generates an ECDSA P-256 key there
// (worker.key, mode 0600; it never leaves the machine) and sends a CSR for it
// with the token to POST /v1/enroll, over TLS without a client certificate,
// trusting the gateway through CAFile or the system roots. It writes the
// certificate the gateway signs to worker.pem and the CA that signed it to
// ca.pem (0644; the directory is created 0700), then runs as usual.
// Transport errors, 429 and 5xx are retried; a token the gateway refuses
// (enrollment-token-invalid: unknown, already used or expired) makes Run
// return an error wrapping ErrEnrollmentTokenInvalid, and the operator must
// issue a new token. On later starts the certificate in StateDir is reused
// and the token is not needed (nor used, unless the certificate has expired:
// then the worker enrolls again with it).
//
// Gateway trust with a StateDir: CAFile when set; otherwise the system roots
// plus StateDir/ca.pem when a previous enrollment wrote it (it was received
// over a connection verified with CAFile or the system roots).
//
// While Run runs, the certificate is renewed by itself: renew_in_seconds
// after the request that obtained it was sent (two thirds of its lifetime),
// or, for a certificate loaded from disk at start, after two thirds of the
// time between its NotBefore and NotAfter by the worker's clock, the only one
// it has for its own certificate. A renewal sends a CSR for a new key to
// POST /v1/certificates/renew with the current certificate, writes the new
// pair (each file atomically; the key goes to worker.key.next until the
// certificate is written, so that a crash at any point leaves a usable pair)
// and switches the HTTP client to it: every request from then on goes
// through new connections presenting the new certificate, which ends the old
// one's grace period at the gateway, while requests in flight finish on the
// old connections, closed once idle. Failures are retried with exponential
// backoff (1 s to 1 min); the old certificate keeps working meanwhile.
// worker-revoked makes Run return an error wrapping ErrWorkerRevoked, as
// everywhere; certificate-expired one wrapping ErrCertificateExpired.
//
// Certificates given as CertFile and KeyFile are not renewed by the runtime:
// rewrite the files and new connections pick them up.
//
// # What the runtime does
//
//   - One poll loop long-polls POST /v1/leases for as many tasks as it has
//     free slots, and waits without polling while every slot is busy. Each
//     poll carries a fresh Idempotency-Key, reused (with the same body) when
//     the same poll is retried after a transport error, so a lost answer
//     returns the same leases instead of stranding them.
//   - One heartbeat loop renews every held lease with a single
//     POST /v1/heartbeat, as often as the shortest heartbeat interval among
//     them asks.
//   - Each lease runs in its own goroutine: POST /v1/attempts/{id}/start, the
//     Handler (with its result batches), then POST /v1/attempts/{id}/complete,
//     retried until the gateway answers (completion is idempotent).
//
// # Results
//
// A Handler reports what it finds with LeasedTask.Emit, which buffers records
// and sends them in numbered batches with POST /v1/attempts/{id}/results:
// every Config.ResultBatchSize records (default 100, or sooner when a batch's
// body would pass 1 MiB), on LeasedTask.Flush, and once more after the
// handler returns nil, before the attempt is completed.
//
//	err := task.Emit(ctx, apiclient.ResultRecord{
//		Kind:  apiclient.ResultRecordKindAsset,
//		Asset: &apiclient.AssetRef{Type: "ip", Value: "192.0.2.1"},
//	})
//
// Batches are numbered 1, 2, … within the attempt and sent one at a time, in
// order. A batch is encoded once and carries Idempotency-Key
// "<attempt_id>:<sequence_number>": retries (transport errors, 429, 5xx,
// idempotency-in-flight) send the same key and the same bytes, so a batch
// whose answer was lost is acknowledged again instead of stored twice. The
// completion's last_sequence_number is the last batch the gateway
// acknowledged, and is left out when there is none. A batch the gateway
// refuses fails every later Emit and Flush, and a handler that then returns
// nil has its attempt reported failed with CodeResultsUndelivered. A
// lease-lost answer cancels the handler's context with ErrLeaseLost; an
// answer whose Lease-State header says cancel_requested cancels it with
// ErrCancelRequested, as a heartbeat answer would. Records buffered when the
// handler fails or is cancelled are dropped (batches already acknowledged
// stay).
//
// # Logs
//
// LeasedTask.Log returns the attempt's log, an io.Writer (the same one on
// every call) whose output the gateway keeps with the attempt for the task's
// owner (GET /v1/tasks/{id}/logs):
//
//	fmt.Fprintf(task.Log(), "probing %d addresses\n", n)
//
// Writes only buffer: a background sender appends the output with
// POST /v1/attempts/{id}/logs in chunks of at most 64 KiB, cut between
// characters (invalid UTF-8 becomes U+FFFD), whenever a chunk is full and at
// least every second, and the runtime sends the rest after the handler
// returns, whatever its result, before it completes the attempt (for at most
// ten seconds). Each chunk carries its byte offset in the log and is retried
// with the same offset and data on transport errors, 429 and 5xx, so a chunk
// whose answer was lost is stored once. A log-offset-mismatch answer is
// resolved by continuing where the gateway is: what it already has is
// skipped, what it lacks is sent again while still kept (the last 64 KiB
// acknowledged), else a marker in the log says how much was lost. A 413
// makes chunks smaller. Once an answer says truncated (the gateway's cap for
// the attempt's log), further output is discarded. While the gateway cannot
// be reached, at most 1 MiB is kept: the oldest output is dropped and a
// marker says how much. Answers report the lease's state, applied as a
// heartbeat's: cancel_requested cancels the handler's context, a lost lease
// (or a lease-lost answer) cancels it with ErrLeaseLost and ends the log.
//
// # Artifacts
//
// LeasedTask.UploadArtifact stores a file for the attempt:
//
//	f, err := task.UploadArtifact(ctx, "report.json", "application/json", bytes.NewReader(report))
//
// It hashes the reader (re-reading an io.ReadSeeker, copying anything else to
// a temporary file, so the artifact is never held in memory), opens a session
// with POST /v1/attempts/{id}/artifacts, PUTs the bytes with exactly the
// session's headers and Content-Length, and commits with
// POST /v1/uploads/{id}/commit. A URL on the gateway itself (fs storage) is
// reached with the worker's mTLS client; any other (a presigned
// object-storage URL) with a client that never presents the worker's
// certificate and trusts the system roots plus CAFile (Config.UploadHTTPClient
// replaces it). Each step is retried on transport errors, 408, 429 and 5xx; a
// PUT answered upload-state after a lost answer was stored, and goes on to
// the commit; the commit is idempotent; an expired session is replaced by a
// new one, at most twice. lease-lost is handled as Emit handles it.
//
// Worker clocks are not trusted: every schedule (renewals, local lease
// expiry, attempt deadlines) is computed from the relative durations the
// gateway sends, measured from when the request that obtained them was sent,
// never from the absolute times.
//
// # Handler results
//
// A Handler's context is cancelled, with a cause that context.Cause reports,
// when
//
//   - the gateway asks to cancel the task (ErrCancelRequested): the attempt is
//     completed as cancelled, whatever the handler returns;
//   - the lease is lost (ErrLeaseLost): nothing is reported, the gateway
//     would accept nothing more for the attempt;
//   - the attempt or execution deadline is about to pass (ErrAttemptDeadline);
//   - Run is draining and DrainTimeout has passed (ErrDrainTimeout): the
//     attempt is completed as cancelled, which gives the task back without
//     using up an attempt.
//
// Otherwise a nil result completes the attempt as succeeded and an error as
// failed. Failures are retryable unless the error is, or wraps, a *TaskError
// with Retryable false; see Permanent and Retryable. A panicking handler is
// recovered and reported as a retryable failure with code handler-panic.
//
// Handlers must honour their context: Run returns only after every handler it
// started has returned.
//
// # Retries
//
// Every call to the gateway that is repeated goes through one helper (retry.go)
// and so follows one rule: transport errors, 408, 429, 5xx and
// idempotency-in-flight are retried, anything else is not, with a few
// deliberate exceptions: a poll refused with 401 or 403 is tried again every
// 5 s (an operator may fix it), a renewal is retried after anything but a
// revocation or an expired certificate, and each call handles lease-lost,
// worker-revoked and the like itself. The wait is the answer's Retry-After
// when it has one (the backoff then starts over), else exponential backoff
// with full jitter from 100 ms to 5 s (renewals: equal jitter, 1 s to 1 min). A retry ends with its context:
// the poll loop's, the lease's, or a window of its own (start: 10 s,
// completion: 1 min). The heartbeat loop uses the same backoff but schedules
// its own retries, since it keeps expiring leases while it waits.
//
// # Checking an identity
//
// Worker.Check makes one call with the worker's identity, a heartbeat for no
// lease, which changes nothing but the worker's last-seen time, and returns
// the gateway's answer: what `worker -check` runs before an operator starts
// a worker for real.
//
// # Testing a Handler
//
// Package workerclienttest runs a Handler without a gateway: NewTask builds
// the LeasedTask a Handler receives, and its Recorder keeps the records
// emitted, the log, the artifacts and the outcome a Worker would report.
// It rests on NewDetachedTask (a LeasedTask whose Emit, Flush, Log and
// UploadArtifact go to a TaskSink) and RunHandler (a handler run as a Worker
// runs it), which other test helpers can use too.
//
// # Source files
//
// config.go holds Config and its defaults; worker.go the Worker, Run and
// the drain; poll.go the poll loop; task.go one task's run (start, the
// handler, completion); heartbeat.go the lease renewals; results.go,
// logs.go and artifacts.go what a handler emits; completions.go the batched
// completions; identity.go enrollment and certificate renewal; tls.go the
// HTTP clients; errors.go the gateway's error answers; retry.go the retry
// helper; check.go Check; detached.go the seam workerclienttest uses.
package workerclient
