package core

import (
	"encoding/base64"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/worker-gateway/gateway/problem"
)

// Cursor is a keyset position in a listing: the (time, id) of the last row
// of the previous page, on the columns the listing orders by (store/internal/core/listing.go).
// Its encoding is a promise to clients holding one: a cursor handed out
// before must still decode, and resume where it left off.
type Cursor struct {
	Time time.Time
	ID   uuid.UUID
}

// Encode renders the cursor as an opaque URL-safe string.
func (c Cursor) Encode() string {
	return base64.RawURLEncoding.EncodeToString([]byte(c.Time.UTC().Format(time.RFC3339Nano) + "|" + c.ID.String()))
}

// errMalformedCursor is the one answer to any cursor that does not decode.
var errMalformedCursor = problem.Wrap(ErrInvalid, "malformed cursor")

// DecodeCursor parses a cursor made by Encode.
func DecodeCursor(s string) (*Cursor, error) {
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return nil, errMalformedCursor
	}
	ts, id, ok := strings.Cut(string(raw), "|")
	if !ok {
		return nil, errMalformedCursor
	}
	t, err := time.Parse(time.RFC3339Nano, ts)
	// Encode writes UTC: a time whose UTC year leaves 0000-9999 could not be
	// written back.
	if err != nil || t.UTC().Year() < 0 || t.UTC().Year() > 9999 {
		return nil, errMalformedCursor
	}
	u, err := uuid.Parse(id)
	if err != nil {
		return nil, errMalformedCursor
	}
	return &Cursor{Time: t, ID: u}, nil
}
