package faults

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// answerWith is a transport that answers every call with one response or
// error.
type answerWith struct {
	status int
	err    error
}

func (a answerWith) RoundTrip(req *http.Request) (*http.Response, error) {
	if a.err != nil {
		return nil, a.err
	}
	h := http.Header{"Content-Type": {"application/problem+json"}, "Retry-After": {"1"}}
	return &http.Response{StatusCode: a.status, Header: h, Body: io.NopCloser(strings.NewReader(`{"code": "unavailable"}`)), Request: req}, nil
}

// TestUnansweredWritesAreUnknown: a write answered 503 (the database is
// down) and one whose connection died after it was sent (a reset) may or
// may not have taken effect; the history records both as unknown.
func TestUnansweredWritesAreUnknown(t *testing.T) {
	for name, tr := range map[string]answerWith{
		"503":   {status: http.StatusServiceUnavailable},
		"reset": {err: errors.New("read: connection reset by peer")},
	} {
		t.Run(name, func(t *testing.T) {
			h := NewHistory()
			req, err := http.NewRequest(http.MethodPost, "https://127.0.0.1/v1/attempts/"+uuid.NewString()+"/results", strings.NewReader(`{}`))
			require.NoError(t, err)
			_, _ = h.Transport(h.NewClient("w"), tr).RoundTrip(req)
			calls := h.Calls()
			require.Len(t, calls, 1)
			require.Equal(t, Unknown, calls[0].Outcome)
			require.Equal(t, ResUnknown, calls[0].Items[0].Result)
		})
	}
}
