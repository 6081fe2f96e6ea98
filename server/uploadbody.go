package server

import (
	"errors"
	"io"
	"net"
	"net/http"
	"time"
)

// errBodyStalled is a request body that stopped arriving: 408, not a
// database failure (a read deadline is a net.Error, which would otherwise
// read as an unreachable database).
var errBodyStalled = errors.New("the request body stopped arriving")

// progressDeadline replaces the server's whole-request read deadline of an
// upload with one that moves forward while bytes arrive: an artifact of a
// gigabyte may take minutes to arrive, and a client must still keep
// sending, which ends a slowloris.
func progressDeadline(w http.ResponseWriter, body io.ReadCloser, idle time.Duration) io.ReadCloser {
	rc := http.NewResponseController(w)
	now := time.Now()
	if err := rc.SetReadDeadline(now.Add(idle)); err != nil {
		return body // a writer without deadlines: ReadTimeout stays
	}
	return &progressBody{ReadCloser: body, controller: rc, idle: idle, extendedAt: now}
}

type progressBody struct {
	io.ReadCloser
	controller *http.ResponseController
	idle       time.Duration
	extendedAt time.Time
}

func (b *progressBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	// Moving the deadline costs a timer reset: at most once a second.
	if n > 0 {
		if now := time.Now(); now.Sub(b.extendedAt) >= time.Second {
			_ = b.controller.SetReadDeadline(now.Add(b.idle))
			b.extendedAt = now
		}
	}
	var netErr net.Error
	if err != nil && errors.As(err, &netErr) && netErr.Timeout() {
		err = errBodyStalled
	}
	return n, err
}
