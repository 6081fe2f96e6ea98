package core

import (
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
)

// FuzzParseWakeup: ParseWakeup never panics, and whatever it accepts
// re-encodes (Payload) to a payload it parses back to the same Wakeup.
func FuzzParseWakeup(f *testing.F) {
	id := uuid.MustParse("0b9d2a2e-6f0e-4c35-9d7c-2f3a4e5b6c7d")
	for _, w := range []Wakeup{
		{Kind: WakeOrganization, Organization: id, Count: 3},
		{Kind: WakeOrganizationAt, Organization: id, Delay: 1500 * time.Millisecond},
		{Kind: WakeWorker, Worker: id},
		{Kind: WakeWorkerRevoked, Worker: id},
		{Kind: WakeCapacity, Worker: id},
		{Kind: WakeSchedules, Organization: id},
		{Kind: WakeWebhooks, Organization: id},
	} {
		got, err := ParseWakeup(w.Payload())
		if err != nil || got != w {
			f.Fatalf("ParseWakeup(%q) = %+v, %v; want %+v", w.Payload(), got, err, w)
		}
		f.Add(w.Payload())
	}
	for _, s := range []string{
		"", ":", "o", "o:" + id.String(), "w:" + id.String() + ":1", "x:" + id.String(),
		"o:" + strings.ToUpper(id.String()) + ":+7",
		"t:{" + id.String() + "}:-1",
		"w:" + strings.ReplaceAll(id.String(), "-", ""),
		"t:" + id.String() + ":9223372036854775807",
		"o:" + id.String() + ":99999999999999999999",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, payload string) {
		w, err := ParseWakeup(payload)
		if err != nil {
			if w != (Wakeup{}) {
				t.Fatalf("ParseWakeup(%q) failed (%v) but returned %+v", payload, err, w)
			}
			return
		}
		if w.Kind < WakeOrganization || w.Kind > WakeWebhooks {
			t.Fatalf("ParseWakeup(%q) = unknown kind %d", payload, w.Kind)
		}
		// The number in the payload is the number in the Wakeup.
		if parts := strings.Split(payload, ":"); w.Kind == WakeOrganizationAt {
			ms, _ := strconv.ParseInt(parts[2], 10, 64)
			if ms < 0 || ms > math.MaxInt64/int64(time.Millisecond) {
				t.Fatalf("ParseWakeup(%q) accepted a delay of %d ms, which a Duration cannot hold", payload, ms)
			}
			if w.Delay.Milliseconds() != ms {
				t.Fatalf("ParseWakeup(%q).Delay = %v, want %d ms", payload, w.Delay, ms)
			}
		} else if w.Kind == WakeOrganization {
			if n, _ := strconv.Atoi(parts[2]); w.Count != n {
				t.Fatalf("ParseWakeup(%q).Count = %d, want %d", payload, w.Count, n)
			}
		}
		p := w.Payload()
		if p == "" {
			t.Fatalf("ParseWakeup(%q) = %+v, which has no payload", payload, w)
		}
		if len(p) >= 8000 {
			t.Fatalf("payload %q too long for NOTIFY", p)
		}
		back, err := ParseWakeup(p)
		if err != nil {
			t.Fatalf("ParseWakeup(%q) = %+v, whose payload %q does not parse: %v", payload, w, p, err)
		}
		if back != w {
			t.Fatalf("ParseWakeup(%q) = %+v; its payload %q parses to %+v", payload, w, p, back)
		}
		if back.Payload() != p {
			t.Fatalf("payload not canonical: %q then %q", p, back.Payload())
		}
	})
}
