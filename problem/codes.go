package problem

// Codes of problems the gateway answers with. A code is a contract: it never
// changes meaning once released. Keep this list and openapi.yaml's
// x-problem-codes equal (a test in this package checks both ways).
const (
	// Requests the gateway refuses as malformed or unsupported.
	BadRequest           = "bad-request"
	ScheduleTooFrequent  = "schedule-interval-too-short"
	BadCSR               = "bad-csr"
	UnsupportedProtocol  = "unsupported-protocol-version"
	MethodNotAllowed     = "method-not-allowed"
	NotFound             = "not-found"
	PayloadTooLarge      = "payload-too-large"
	TooManyRecords       = "too-many-records"
	UnsupportedMediaType = "unsupported-media-type"
	RequestTimeout       = "request-timeout"

	// Identity and permission.
	Unauthenticated        = "unauthenticated"
	Forbidden              = "forbidden"
	CertificateRequired    = "certificate-required"
	CertificateExpired     = "certificate-expired"
	CertificateUnknown     = "certificate-unknown"
	WorkerRevoked          = "worker-revoked"
	WorkerDisabled         = "worker-disabled"
	EnrollmentTokenInvalid = "enrollment-token-invalid"
	TokenExceedsParent     = "token-exceeds-parent"
	QuotaExceeded          = "quota-exceeded"

	// Conflicts with the state of a task, an attempt or an upload.
	Conflict             = "conflict"
	LeaseLost            = "lease-lost"
	AttemptFinished      = "attempt-finished"
	TaskFinished         = "task-finished"
	TaskNotRetryable     = "task-not-retryable"
	ScanFinished         = "scan-finished"
	ScanBusy             = "scan-busy"
	ScheduleRunning      = "schedule-run-in-progress"
	TargetOutOfScope     = "target-out-of-scope"
	BatchNotPersisted    = "batch-not-persisted"
	SequenceNumberUsed   = "sequence-number-used"
	LogOffsetMismatch    = "log-offset-mismatch"
	IdempotencyKeyReused = "idempotency-key-reused"
	IdempotencyInFlight  = "idempotency-in-flight"
	UploadDirect         = "upload-direct"
	UploadExpired        = "upload-expired"
	UploadMismatch       = "upload-mismatch"
	UploadMissing        = "upload-missing"
	UploadState          = "upload-state"

	// Load and availability: retry later (most carry Retry-After).
	CapacityExceeded   = "capacity-exceeded"
	TooManyRequests    = "too-many-requests"
	Unavailable        = "unavailable"
	ShuttingDown       = "shutting-down"
	ArtifactsDisabled  = "artifacts-disabled"
	EnrollmentDisabled = "enrollment-disabled"
	SecretsDisabled    = "secrets-disabled"

	// The client went away before its answer (nginx's 499); logged, never read.
	ClientClosedRequest = "client-closed-request"

	// The server's own failures.
	Internal                  = "internal"
	ResponseContractViolation = "response-contract-violation"
)
