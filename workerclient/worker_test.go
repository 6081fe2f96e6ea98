package workerclient

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/worker-gateway/gateway/workerclient/apiclient"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestBackoffFullJitterStaysWithinBounds(t *testing.T) {
	t.Parallel()
	bo := callRetry.backoff()
	for attempt := range 64 {
		ceiling := min(backoffBase<<min(attempt, 30), backoffCap)
		d := bo.NextBackOff()
		assert.GreaterOrEqual(t, d, time.Duration(0))
		assert.LessOrEqual(t, d, ceiling, "attempt %d", attempt)
	}
	bo.Reset()
	assert.LessOrEqual(t, bo.NextBackOff(), backoffBase, "reset starts over")
}

func TestBackoffIsJittered(t *testing.T) {
	t.Parallel()
	bo := callRetry.backoff()
	seen := map[time.Duration]bool{}
	for range 100 {
		seen[bo.NextBackOff()] = true
	}
	assert.Greater(t, len(seen), 50, "full jitter spreads delays over [0, ceiling]")
}

func TestRetryDelayPrefersRetryAfter(t *testing.T) {
	t.Parallel()
	d := callRetry.delays()
	for range 10 {
		d.next(errors.New("connection reset"))
	}
	err := fmt.Errorf("wrapped: %w", &APIError{Status: 503, RetryAfter: 7 * time.Second})
	assert.Equal(t, 7*time.Second, d.next(err))
	assert.LessOrEqual(t, d.next(errors.New("connection reset")), backoffBase, "after a Retry-After the backoff starts over, as in retry")
}

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	date := "Wed, 21 Oct 2015 07:28:00 GMT"
	for _, tc := range []struct {
		value, date string
		want        time.Duration
		ok          bool
	}{
		{"3", "", 3 * time.Second, true},
		{" 0 ", "", 0, true},
		{"-1", "", 0, false},
		{"soon", "", 0, false},
		{"", "", 0, false},
		{"999999", "", maxRetryAfter, true},
		{"Wed, 21 Oct 2015 07:28:30 GMT", date, 30 * time.Second, true},
		{"Wed, 21 Oct 2015 07:27:00 GMT", date, 0, true},
		{"Wed, 21 Oct 2015 07:28:30 GMT", "", 0, false}, // no Date: our clock is not trusted
	} {
		got, ok := parseRetryAfter(tc.value, tc.date)
		assert.Equal(t, tc.ok, ok, "%q", tc.value)
		assert.Equal(t, tc.want, got, "%q", tc.value)
	}
}

func TestCheckResponseParsesProblems(t *testing.T) {
	t.Parallel()
	ok := &http.Response{StatusCode: 200, Header: http.Header{}}
	assert.NoError(t, checkResponse("op", ok, nil))

	hr := &http.Response{StatusCode: 409, Header: http.Header{"Content-Type": {"application/problem+json"}}}
	err := checkResponse("complete attempt", hr, []byte(`{"type":"x","title":"Lease lost","status":409,"code":"lease-lost","detail":"gone","request_id":"r1"}`))
	var apiErr *APIError
	require.ErrorAs(t, err, &apiErr)
	assert.Equal(t, APIError{Op: "complete attempt", Status: 409, Code: "lease-lost", Title: "Lease lost", Detail: "gone", RequestID: "r1"}, *apiErr)
	assert.Equal(t, "complete attempt: HTTP 409 lease-lost: gone (request r1)", err.Error())
	assert.False(t, isTransient(err))

	hr = &http.Response{StatusCode: 503, Header: http.Header{"Content-Type": {"text/html"}, "Retry-After": {"2"}}}
	err = checkResponse("heartbeat", hr, []byte("<html>bad gateway</html>"))
	require.ErrorAs(t, err, &apiErr)
	assert.Equal(t, "Service Unavailable", apiErr.Title)
	assert.Equal(t, 2*time.Second, apiErr.RetryAfter)
	assert.True(t, isTransient(err))
}

func TestErrorClassification(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err       error
		transient bool
		revoked   bool
	}{
		{errors.New("dial tcp: connection refused"), true, false},
		{&APIError{Status: 500}, true, false},
		{&APIError{Status: 503, Code: "unavailable"}, true, false},
		{&APIError{Status: 429, Code: "too-many-requests"}, true, false},
		{&APIError{Status: 409, Code: "idempotency-in-flight"}, true, false},
		{&APIError{Status: 409, Code: "lease-lost"}, false, false},
		{&APIError{Status: 404, Code: "not-found"}, false, false},
		{&APIError{Status: 403, Code: "worker-revoked"}, false, true},
		{fmt.Errorf("poll: %w", &APIError{Status: 403, Code: "worker-revoked"}), false, true},
		{&APIError{Status: 403, Code: "worker-disabled"}, false, false},
	} {
		assert.Equal(t, tc.transient, isTransient(tc.err), "%v", tc.err)
		assert.Equal(t, tc.revoked, isRevoked(tc.err), "%v", tc.err)
	}
}

func TestCompletionFor(t *testing.T) {
	t.Parallel()
	type want struct {
		send      bool
		outcome   apiclient.AttemptOutcome
		code      string
		message   string
		retryable bool
	}
	plain := errors.New("connection refused")
	for _, tc := range []struct {
		name  string
		herr  error
		cause error
		want  want
	}{
		{"success", nil, nil, want{true, apiclient.AttemptOutcomeSucceeded, "", "", false}},
		{"success after its deadline", nil, ErrAttemptDeadline, want{true, apiclient.AttemptOutcomeSucceeded, "", "", false}},
		{"plain error is retryable", plain, nil,
			want{true, apiclient.AttemptOutcomeFailed, CodeHandlerError, "connection refused", true}},
		{"permanent", Permanent("unknown-plugin", "no such plugin"), nil,
			want{true, apiclient.AttemptOutcomeFailed, "unknown-plugin", "no such plugin", false}},
		{"wrapped permanent", fmt.Errorf("run: %w", Permanent("bad-input", "seconds < 0")), nil,
			want{true, apiclient.AttemptOutcomeFailed, "bad-input", "seconds < 0", false}},
		{"retryable", Retryable("target-unreachable", "timeout"), nil,
			want{true, apiclient.AttemptOutcomeFailed, "target-unreachable", "timeout", true}},
		{"task error without code", &TaskError{Message: "m"}, nil,
			want{true, apiclient.AttemptOutcomeFailed, CodeHandlerError, "m", false}},
		{"panic", &panicError{value: "boom"}, nil,
			want{true, apiclient.AttemptOutcomeFailed, CodeHandlerPanic, "handler panic: boom", true}},
		{"deadline", context.DeadlineExceeded, ErrAttemptDeadline,
			want{true, apiclient.AttemptOutcomeFailed, CodeDeadline, "context deadline exceeded", true}},
		{"deadline with the handler's own code", Permanent("x", "y"), ErrAttemptDeadline,
			want{true, apiclient.AttemptOutcomeFailed, "x", "y", false}},
		{"cancel requested", context.Canceled, ErrCancelRequested, want{true, apiclient.AttemptOutcomeCancelled, "", "", false}},
		{"cancel requested, handler succeeded", nil, ErrCancelRequested, want{true, apiclient.AttemptOutcomeCancelled, "", "", false}},
		{"drain timeout releases", context.Canceled, ErrDrainTimeout,
			want{true, apiclient.AttemptOutcomeCancelled, CodeWorkerShutdown, "the worker shut down before the task finished", true}},
		{"lost", context.Canceled, ErrLeaseLost, want{send: false}},
		{"lost, handler succeeded", nil, ErrLeaseLost, want{send: false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, send := completionFor(tc.herr, tc.cause)
			require.Equal(t, tc.want.send, send)
			if !send {
				return
			}
			assert.Equal(t, tc.want.outcome, req.Outcome)
			assert.Nil(t, req.LastSequenceNumber)
			if tc.want.code == "" {
				assert.Nil(t, req.Error)
				return
			}
			require.NotNil(t, req.Error)
			assert.Equal(t, tc.want.code, req.Error.Code)
			require.NotNil(t, req.Error.Retryable)
			assert.Equal(t, tc.want.retryable, *req.Error.Retryable)
			require.NotNil(t, req.Error.Message)
			assert.Equal(t, tc.want.message, *req.Error.Message)
		})
	}
}

func TestCompletionForBoundsErrorFields(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("é", maxErrorMessage) // 2 bytes each
	req, _ := completionFor(Permanent(strings.Repeat("c", 300), long), nil)
	assert.Len(t, req.Error.Code, maxErrorCode)
	assert.LessOrEqual(t, len(*req.Error.Message), maxErrorMessage)
	assert.True(t, utf8.ValidString(*req.Error.Message), "never cut a character in half")

	req, _ = completionFor(Permanent("code", ""), nil)
	assert.Nil(t, req.Error.Message, "an empty message is left out")
}

func TestTruncate(t *testing.T) {
	t.Parallel()
	assert.Equal(t, "abc", truncate("abc", 5))
	assert.Equal(t, "ab", truncate("abc", 2))
	assert.Equal(t, "a", truncate("aé", 2))
	assert.Equal(t, "aé", truncate("aéb", 3))
	assert.Equal(t, "\xff", truncate("\xffabc", 1), "invalid input is cut, not emptied")
}

func TestTaskErrorConstructors(t *testing.T) {
	t.Parallel()
	var te *TaskError
	require.ErrorAs(t, fmt.Errorf("outer: %w", Retryable("c", "m")), &te)
	assert.Equal(t, TaskError{Code: "c", Message: "m", Retryable: true}, *te)
	require.ErrorAs(t, Permanent("c", "m"), &te)
	assert.False(t, te.Retryable)
	assert.Equal(t, "c: m", te.Error())
	assert.Equal(t, "c", (&TaskError{Code: "c"}).Error())
}

func TestHeartbeatInterval(t *testing.T) {
	t.Parallel()
	s := time.Second
	assert.Equal(t, 10*s, heartbeatInterval(10*s, 30*s))
	assert.Equal(t, 10*s, heartbeatInterval(0, 30*s), "a third of the TTL when none is given")
	assert.Equal(t, 15*s, heartbeatInterval(40*s, 30*s), "never longer than half the TTL")
	assert.Equal(t, minHeartbeatInterval, heartbeatInterval(time.Millisecond, 30*s))
	assert.Equal(t, minHeartbeatInterval, heartbeatInterval(0, 0))
}

func TestAttemptBudget(t *testing.T) {
	t.Parallel()
	_, ok := attemptBudget(&apiclient.TaskSnapshot{})
	assert.False(t, ok, "no deadline, no budget")

	d, ok := attemptBudget(&apiclient.TaskSnapshot{AttemptDeadlineInSeconds: new(60.0), ExecutionDeadlineInSeconds: new(30.0)})
	require.True(t, ok)
	assert.Equal(t, 29*time.Second, d, "the nearer deadline, less a second")

	d, _ = attemptBudget(&apiclient.TaskSnapshot{AttemptDeadlineInSeconds: new(2.0)})
	assert.Equal(t, 1800*time.Millisecond, d, "the margin is at most a tenth of the budget")

	d, _ = attemptBudget(&apiclient.TaskSnapshot{ExecutionDeadlineInSeconds: new(-5.0)})
	assert.Equal(t, time.Duration(0), d, "a passed deadline leaves nothing")
}

func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	cfg, err := Config{
		GatewayURL: "https://127.0.0.1:8443",
		CertFile:   "w.crt", KeyFile: "w.key",
		Handler: func(context.Context, *LeasedTask) error { return nil },
	}.withDefaults()
	require.NoError(t, err)
	assert.Equal(t, 1, cfg.Slots)
	assert.Equal(t, 20, cfg.WaitSeconds)
	assert.Equal(t, 30*time.Second, cfg.DrainTimeout)
	assert.NotNil(t, cfg.Logger)
	assert.NotEmpty(t, cfg.SoftwareVersion)
	assert.LessOrEqual(t, len(cfg.SoftwareVersion), maxSoftwareVersion)
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	valid := func() Config {
		return Config{
			GatewayURL: "https://gw.example:8443",
			TLSConfig:  nil, CertFile: "w.crt", KeyFile: "w.key",
			Handler: func(context.Context, *LeasedTask) error { return nil },
		}
	}
	for _, tc := range []struct {
		name   string
		mutate func(*Config)
		errMsg string
	}{
		{"no URL", func(c *Config) { c.GatewayURL = "" }, "GatewayURL is required"},
		{"plain http", func(c *Config) { c.GatewayURL = "http://gw:8080" }, "https://"},
		{"no host", func(c *Config) { c.GatewayURL = "https:///v1" }, "https://"},
		{"bad URL", func(c *Config) { c.GatewayURL = "https://gw:port" }, "GatewayURL"},
		{"no handler", func(c *Config) { c.Handler = nil }, "Handler is required"},
		{"no identity", func(c *Config) { c.KeyFile = "" }, "CertFile and KeyFile"},
		{"negative slots", func(c *Config) { c.Slots = -1 }, "Slots -1"},
		{"too many slots", func(c *Config) { c.Slots = 1001 }, "Slots 1001"},
		{"negative wait", func(c *Config) { c.WaitSeconds = -1 }, "WaitSeconds -1"},
		{"huge wait", func(c *Config) { c.WaitSeconds = 3601 }, "WaitSeconds 3601"},
		{"negative drain", func(c *Config) { c.DrainTimeout = -time.Second }, "DrainTimeout"},
		{"long version", func(c *Config) { c.SoftwareVersion = strings.Repeat("v", 201) }, "SoftwareVersion"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := valid()
			tc.mutate(&cfg)
			_, err := cfg.withDefaults()
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.errMsg)
		})
	}

	cfg := valid()
	cfg.CertFile, cfg.KeyFile, cfg.HTTPClient = "", "", &http.Client{}
	_, err := cfg.withDefaults()
	assert.NoError(t, err, "an HTTPClient is an identity")
}

func TestNewWorkerRejectsUnencodableCapabilities(t *testing.T) {
	t.Parallel()
	_, err := NewWorker(Config{
		GatewayURL: "https://gw", HTTPClient: &http.Client{},
		Handler:      func(context.Context, *LeasedTask) error { return nil },
		Capabilities: map[string]any{"f": func() {}},
	})
	assert.ErrorContains(t, err, "capabilities")
}
