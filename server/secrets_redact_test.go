package server

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRedactLog(t *testing.T) {
	t.Parallel()
	values := map[string]string{"TOKEN": "s3cr3t-token", "INNER": "cr3t", "TINY": "ab"}
	for _, c := range []struct {
		name, in, stored string
		consumed         int
	}{
		{"none", "hello\n", "hello\n", 6},
		{"whole value", "token=s3cr3t-token ok\n", "token=[REDACTED:TOKEN] ok\n", 22},
		{"twice", "s3cr3t-token s3cr3t-token", "[REDACTED:TOKEN] [REDACTED:TOKEN]", 25},
		{"longest first", "x s3cr3t-token cr3t", "x [REDACTED:TOKEN] [REDACTED:INNER]", 19},
		{"short values are not redacted", "ab abd", "ab abd", 6},
		{"a single byte that begins a value is held back", "ab abc", "ab ab", 5},
		{"ends with a value's beginning: held back", "line\ns3cr3", "line\n", 5},
		{"only a value's beginning: redacted", "s3cr3t-to", "[REDACTED:TOKEN]", 9},
		{"only a short beginning: kept", "s3c", "s3c", 3},
	} {
		stored, consumed := redactLog([]byte(c.in), values)
		require.Equal(t, c.stored, string(stored), c.name)
		require.Equal(t, c.consumed, consumed, c.name)
	}
}

// A value split across chunks at any point is never stored, as a worker
// that resends from next_offset sends it.
func TestRedactLogSplitChunks(t *testing.T) {
	t.Parallel()
	values := map[string]string{"TOKEN": "s3cr3t-token"}
	text := "before s3cr3t-token after\n"
	for cut := 1; cut < len(text); cut++ {
		var stored strings.Builder
		pending, next := text[:cut], cut
		for pending != "" {
			keep, consumed := redactLog([]byte(pending), values)
			stored.Write(keep)
			pending = pending[consumed:]
			if next < len(text) {
				pending += text[next:]
				next = len(text)
			}
		}
		require.NotContains(t, stored.String(), "s3cr3t-token", "cut at %d", cut)
		require.Contains(t, stored.String(), "[REDACTED:TOKEN]", "cut at %d", cut)
	}
}
