// This file holds the gateway's error answers: APIError, how an answer
// becomes one, and which of them are worth retrying.

package workerclient

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/worker-gateway/gateway/problem"
)

// APIError is an error answer (RFC 9457 problem) from the gateway.
type APIError struct {
	Op         string // the call, e.g. "acquire leases"
	Status     int
	Code       string // the problem's stable code, e.g. lease-lost
	Title      string
	Detail     string
	RequestID  string
	RetryAfter time.Duration // from Retry-After; 0 when absent
}

func (e *APIError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: HTTP %d", e.Op, e.Status)
	if e.Code != "" {
		b.WriteString(" " + e.Code)
	}
	if msg := cmp.Or(e.Detail, e.Title); msg != "" {
		b.WriteString(": " + msg)
	}
	if e.RequestID != "" {
		b.WriteString(" (request " + e.RequestID + ")")
	}
	return b.String()
}

// checkResponse returns nil for a 2xx answer and an *APIError otherwise,
// with the problem's fields when the body is a problem document.
func checkResponse(op string, hr *http.Response, body []byte) error {
	if hr == nil {
		return fmt.Errorf("%s: no response", op)
	}
	if hr.StatusCode >= 200 && hr.StatusCode < 300 {
		return nil
	}
	e := &APIError{Op: op, Status: hr.StatusCode}
	if strings.Contains(hr.Header.Get("Content-Type"), "json") {
		var p struct {
			Code      string `json:"code"`
			Title     string `json:"title"`
			Detail    string `json:"detail"`
			RequestID string `json:"request_id"`
		}
		if json.Unmarshal(body, &p) == nil {
			e.Code, e.Title, e.Detail, e.RequestID = p.Code, p.Title, p.Detail, p.RequestID
		}
	}
	if e.Title == "" {
		e.Title = http.StatusText(hr.StatusCode)
	}
	if d, ok := parseRetryAfter(hr.Header.Get("Retry-After"), hr.Header.Get("Date")); ok {
		e.RetryAfter = d
	}
	return e
}

// isTransient reports whether repeating the call may succeed: a transport
// error, a timeout, 429, a 5xx, or a repeat of an idempotent request that
// arrived while the first one was still being served.
func isTransient(err error) bool {
	var e *APIError
	if !errors.As(err, &e) {
		return true
	}
	return e.Status == http.StatusRequestTimeout || e.Status == http.StatusTooManyRequests || e.Status >= 500 ||
		e.Code == problem.IdempotencyInFlight
}

func isRevoked(err error) bool {
	var e *APIError
	return errors.As(err, &e) && e.Code == problem.WorkerRevoked
}

// parseRetryAfter reads a Retry-After header: delay-seconds, or an HTTP date
// measured against the answer's own Date header (never against our clock).
func parseRetryAfter(v, date string) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n < 0 {
			return 0, false
		}
		return min(time.Duration(n)*time.Second, maxRetryAfter), true
	}
	at, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	now, err := http.ParseTime(date)
	if err != nil {
		return 0, false
	}
	return min(max(at.Sub(now), 0), maxRetryAfter), true
}
