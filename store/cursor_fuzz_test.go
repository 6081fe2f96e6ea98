package store

import (
	"encoding/base64"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
)

// FuzzDecodeCursor: DecodeCursor never panics, refuses with ErrInvalid, and
// any cursor it accepts re-encodes to one that decodes to the same position.
func FuzzDecodeCursor(f *testing.F) {
	id := uuid.MustParse("0b9d2a2e-6f0e-4c35-9d7c-2f3a4e5b6c7d")
	c := Cursor{Time: time.Date(2024, 5, 6, 7, 8, 9, 123456789, time.UTC), ID: id}
	if got, err := DecodeCursor(c.Encode()); err != nil || !got.Time.Equal(c.Time) || got.ID != c.ID {
		f.Fatalf("DecodeCursor(Encode(%+v)) = %+v, %v", c, got, err)
	}
	f.Add(c.Encode())
	f.Add(Cursor{Time: time.Unix(0, 0), ID: uuid.Nil}.Encode())
	enc := base64.RawURLEncoding.EncodeToString
	for _, raw := range []string{
		"2024-05-06T09:08:09+02:00|" + id.String(),
		"2024-05-06T07:08:09Z|{" + id.String() + "}",
		"0000-01-01T00:30:00+01:00|" + id.String(),
		"9999-12-31T23:30:00-01:00|" + id.String(),
		"2024-05-06T07:08:09Z",
		"not a time|" + id.String(),
		"2024-05-06T07:08:09Z|" + id.String() + "|extra",
	} {
		f.Add(enc([]byte(raw)))
	}
	f.Add("!!!not base64")
	f.Add(base64.StdEncoding.EncodeToString([]byte("2024-05-06T07:08:09Z|" + id.String())))
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		c, err := DecodeCursor(s)
		if err != nil {
			if c != nil || !errors.Is(err, ErrInvalid) {
				t.Fatalf("DecodeCursor(%q) = %v, %v; want nil and an ErrInvalid", s, c, err)
			}
			return
		}
		if c == nil {
			t.Fatalf("DecodeCursor(%q) = nil, nil", s)
		}
		if y := c.Time.UTC().Year(); y < 0 || y > 9999 {
			t.Fatalf("DecodeCursor(%q) accepted UTC year %d, which Encode cannot write back", s, y)
		}
		e := c.Encode()
		back, err := DecodeCursor(e)
		if err != nil {
			t.Fatalf("DecodeCursor(%q) = {%s %s}, which encodes to %q that does not decode: %v", s, c.Time, c.ID, e, err)
		}
		if !back.Time.Equal(c.Time) || back.ID != c.ID {
			t.Fatalf("DecodeCursor(%q) = {%s %s}; round trip gives {%s %s}", s, c.Time, c.ID, back.Time, back.ID)
		}
		if again := back.Encode(); again != e {
			t.Fatalf("encoding not canonical: %q then %q", e, again)
		}
	})
}
