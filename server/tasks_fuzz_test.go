package server

import (
	"encoding/json"
	"slices"
	"testing"
)

func mustSum(t *testing.T, v any) string {
	t.Helper()
	s, err := canonicalSHA256(v)
	if err != nil {
		t.Fatalf("canonicalSHA256(%#v): %v", v, err)
	}
	if len(s) != 64 {
		t.Fatalf("checksum %q is not 64 hex digits", s)
	}
	return s
}

// FuzzCanonicalChecksum: for a body checkJSON accepts, the checksum depends
// only on its meaning: not on whitespace, indentation or key order; and a
// changed, added or removed member changes it.
func FuzzCanonicalChecksum(f *testing.F) {
	for _, s := range jsonSeeds {
		if s.ok {
			f.Add([]byte(s.body))
		}
	}
	f.Add([]byte(" {\n  \"b\" : [ 1 , 2.50 , -0 ] ,\n  \"a\" : { \"y\" : null , \"x\" : true }\n} "))
	f.Add([]byte(`{"s":"\u0041\/<>&\u2028","n":12345678901234567890123,"f":1.0}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		if checkJSON(body) != nil {
			return
		}
		v := decodeNumbers(t, body)
		sum := mustSum(t, v)
		if again := mustSum(t, v); again != sum {
			t.Fatalf("checksum not deterministic: %s then %s", sum, again)
		}
		// The body as sent, and re-formatted ways of writing it.
		if s := mustSum(t, json.RawMessage(body)); s != sum {
			t.Fatalf("raw body %q sums to %s, decoded form to %s", body, s, sum)
		}
		indented, err := json.MarshalIndent(v, "\t ", "   ")
		if err != nil {
			t.Fatal(err)
		}
		if s := mustSum(t, decodeNumbers(t, indented)); s != sum {
			t.Fatalf("indented %q sums to %s, want %s", indented, s, sum)
		}
		m, ok := v.(map[string]any)
		if !ok {
			return
		}
		keys := sortedKeys(m)
		reversed := slices.Clone(keys)
		slices.Reverse(reversed)
		rev := objectBody(t, m, reversed)
		if s := mustSum(t, decodeNumbers(t, rev)); s != sum {
			t.Fatalf("keys reordered %q sum to %s, want %s", rev, s, sum)
		}
		if s := mustSum(t, json.RawMessage(rev)); s != sum {
			t.Fatalf("raw keys reordered %q sum to %s, want %s", rev, s, sum)
		}

		// Simple mutations change the checksum.
		mutated := func(what string, m2 map[string]any) {
			t.Helper()
			if s := mustSum(t, m2); s == sum {
				t.Fatalf("%s: %q and %q have the same checksum", what, body, mustMarshal(t, m2))
			}
		}
		extra := "fuzz-extra"
		for m[extra] != nil {
			extra += "!"
		}
		withExtra := clonedMap(m)
		withExtra[extra] = json.Number("1")
		mutated("member added", withExtra)
		if len(keys) == 0 {
			return
		}
		k := keys[0]
		without := clonedMap(m)
		delete(without, k)
		mutated("member removed", without)
		changed := clonedMap(m)
		changed[k] = []any{m[k]}
		mutated("member wrapped in an array", changed)
		renamed := clonedMap(m)
		delete(renamed, k)
		nk := k + "x"
		for _, taken := m[nk]; taken; _, taken = m[nk] {
			nk += "x"
		}
		renamed[nk] = m[k]
		mutated("member renamed", renamed)
		switch x := m[k].(type) {
		case string:
			c := clonedMap(m)
			c[k] = x + " "
			mutated("string changed", c)
		case json.Number:
			c := clonedMap(m)
			c[k] = json.Number(string(x) + "1")
			if _, err := json.Marshal(c[k]); err == nil {
				mutated("number changed", c)
			}
		case bool:
			c := clonedMap(m)
			c[k] = !x
			mutated("bool flipped", c)
		}
	})
}

func clonedMap(m map[string]any) map[string]any {
	c := make(map[string]any, len(m)+1)
	for k, v := range m {
		c[k] = v
	}
	return c
}
