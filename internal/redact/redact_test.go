package redact

import (
	"encoding/base64"
	"encoding/json"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const value = `a-secr"et\Valüe-42`

func secrets() *Redactor {
	return New([]Secret{{Name: "A_SECRET", Version: 1, Value: value}, {Name: "TINY", Version: 1, Value: "ab"}})
}

// encodings are the ways a worker's text may carry the value.
func encodings() map[string]string {
	esc, _ := json.Marshal(value)
	return map[string]string{
		"plain":      value,
		"json":       string(esc[1 : len(esc)-1]),
		"json-ascii": `a-secr\"et\\Val\u00fce-42`,
		"json-upper": `a-secr\"et\\Val\u00FCe-42`,
		"url-query":  url.QueryEscape(value),
		"url-path":   url.PathEscape(value),
		"b64":        base64.StdEncoding.EncodeToString([]byte(value)),
		"b64url":     base64.URLEncoding.EncodeToString([]byte(value)),
		"b64-inside": base64.StdEncoding.EncodeToString([]byte("user:" + value)),
	}
}

func TestString(t *testing.T) {
	t.Parallel()
	r := secrets()
	for name, enc := range encodings() {
		got := r.String("before " + enc + " after")
		require.Contains(t, got, "[REDACTED:A_SECRET]", name)
		require.NotContains(t, got, enc, name)
		if name == "b64-inside" {
			continue // the characters that also encode "user:" stay
		}
		require.Equal(t, "before [REDACTED:A_SECRET] after", got, name)
	}
	require.Equal(t, "ab abc", r.String("ab abc"), "values shorter than MinValue are left alone")
	require.Equal(t, "nothing here", r.String("nothing here"))
	var none *Redactor
	require.Equal(t, value, none.String(value))
}

// Every encoding, cut at every place into two chunks, is never stored,
// and text that only begins like a value is stored as sent.
func TestChunkSplit(t *testing.T) {
	t.Parallel()
	r := secrets()
	for name, enc := range encodings() {
		text := "log line " + enc + " done\n"
		for cut := 0; cut <= len(text); cut++ {
			first, carry := r.Chunk("", []byte(text[:cut]))
			// Each chunk is redacted by a redactor built for its request.
			second, carry := secrets().Chunk(carry, []byte(text[cut:]))
			require.Empty(t, carry, "%s cut at %d", name, cut)
			stored := string(first) + string(second)
			require.NotContains(t, stored, enc, "%s cut at %d", name, cut)
			require.Contains(t, stored, "[REDACTED:A_SECRET]", "%s cut at %d", name, cut)
		}
	}
	// The finding: "a-secr" then "et-Value-…" stored its tail.
	first, carry := r.Chunk("", []byte(value[:6]))
	require.Empty(t, first)
	second, carry := r.Chunk(carry, []byte(value[6:]+"!"))
	require.Equal(t, "[REDACTED:A_SECRET]!", string(first)+string(second))
	require.Empty(t, carry)
	// A beginning not followed by the rest is stored as sent.
	first, carry = r.Chunk("", []byte("x a-se"))
	second, carry = r.Chunk(carry, []byte("cond"))
	require.Equal(t, "x a-second", string(first)+string(second))
	require.Empty(t, carry)
	// A carry whose secret changed since is stored as the marker.
	_, carry = r.Chunk("", []byte("a-secr"))
	other := New([]Secret{{Name: "A_SECRET", Version: 2, Value: "something else"}})
	kept, _ := other.Chunk(carry, []byte("et"))
	require.Equal(t, "[REDACTED:A_SECRET]et", string(kept))
	require.NotContains(t, carry, "secr", "the carry names the held text, never holds it")
}

func TestValue(t *testing.T) {
	t.Parallel()
	r := secrets()
	type inner struct {
		Text  *string          `json:"text"`
		Token string           `json:"lease_token"`
		Kind  namedKind        `json:"kind"`
		Doc   *json.RawMessage `json:"doc"`
		Any   map[string]any   `json:"any"`
		Many  []string         `json:"many"`
	}
	type body struct{ Items []inner }
	doc := json.RawMessage(`{"k":"` + encodings()["json"] + `","n":1.50,"list":["` + encodings()["b64"] + `"],"` + encodings()["json"] + `":true}`)
	b := body{Items: []inner{{
		Text: ptr("x " + value), Token: value, Kind: namedKind(value), Doc: &doc,
		Any: map[string]any{value: value, "nested": map[string]any{"deep": []any{value}}}, Many: []string{value, "ok"},
	}}}
	require.True(t, r.Value(&b, "lease_token"))
	it := b.Items[0]
	require.Equal(t, "x [REDACTED:A_SECRET]", *it.Text)
	require.Equal(t, value, it.Token, "skipped fields stay")
	require.Equal(t, namedKind(value), it.Kind, "enumerations stay")
	require.JSONEq(t, `{"k":"[REDACTED:A_SECRET]","n":1.50,"list":["[REDACTED:A_SECRET]"],"[REDACTED:A_SECRET]":true}`, string(*it.Doc))
	all, err := json.Marshal(it.Any)
	require.NoError(t, err)
	require.NotContains(t, string(all), "secr")
	require.Equal(t, []string{"[REDACTED:A_SECRET]", "ok"}, it.Many)

	clean := json.RawMessage(`{"a": 1}`)
	require.False(t, r.Value(&clean))
	require.Equal(t, `{"a": 1}`, string(clean), "a document without secrets is kept byte for byte")
	require.False(t, strings.Contains(string(*it.Doc), value))
}

type namedKind string

func ptr[T any](v T) *T { return &v }
