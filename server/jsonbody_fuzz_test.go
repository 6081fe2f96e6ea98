package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"sort"
	"strings"
	"testing"
	"unicode/utf8"
)

// jsonSeeds are bodies with the verdict checkJSON must give them; they seed
// FuzzCheckJSON and FuzzCanonicalChecksum and are checked before fuzzing.
var jsonSeeds = []struct {
	body string
	ok   bool
}{
	{`{"task_type":"scan","payload":{"target":"example.com","ports":[80,443]},"max_attempts":3}`, true},
	{`{}`, true},
	{`[]`, true},
	{`"just a string"`, true},
	{`1e300`, true},
	{`[[1,[2,[3,[4,{"x":[5]}]]]],[],{}]`, true},
	{`{"a":1,"A":2}`, true}, // keys differ by case: different keys
	{`{"a":{"b":1},"b":{"a":1}}`, true},
	{`{"\u00e9":1,"é":2}`, false}, // same key once unescaped
	{`{"a":1,"a":2}`, false},
	{`{"a":{"b":1,"b":1}}`, false},
	{`[{"k":1},{"k":1,"k":1}]`, false},
	{"{\"a\":\"\xff\"}", false},
	{"\xc3\x28", false},
	{`{"a":1} trailing`, false},
	{`{"a":1}{}`, false},
	{`{"a":1}]`, false},
	{`[1,]`, false},
	{`{"a" 1}`, false},
	{``, false},
	{` `, false},
	{strings.Repeat("[", 100) + strings.Repeat("]", 100), false},
	{strings.Repeat(`{"a":`, 100) + "1" + strings.Repeat("}", 100), false},
	{strings.Repeat("[", maxJSONDepth) + strings.Repeat("]", maxJSONDepth), true},
}

// nesting is the number of containers nested inside one another in v.
func nesting(v any) int {
	deepest := 0
	switch x := v.(type) {
	case map[string]any:
		for _, e := range x {
			deepest = max(deepest, nesting(e))
		}
		return 1 + deepest
	case []any:
		for _, e := range x {
			deepest = max(deepest, nesting(e))
		}
		return 1 + deepest
	}
	return 0
}

func decodeNumbers(t *testing.T, body []byte) any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("decode %q: %v", body, err)
	}
	return v
}

func mustMarshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("marshal %#v: %v", v, err)
	}
	return b
}

// objectBody writes m as a JSON object with its keys in the given order,
// each written once per appearance in keys (so a repeated key is duplicated).
func objectBody(t *testing.T, m map[string]any, keys []string) []byte {
	t.Helper()
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(mustMarshal(t, k))
		b.WriteByte(':')
		b.Write(mustMarshal(t, m[k]))
	}
	b.WriteByte('}')
	return b.Bytes()
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// extraRules are the refusal reasons checkJSON adds to encoding/json's
// syntax check (error-message fragments).
var extraRules = []string{"duplicate key", "nested deeper", "UTF-8", "U+0000", "number"}

func FuzzCheckJSON(f *testing.F) {
	for _, s := range jsonSeeds {
		err := checkJSON([]byte(s.body))
		if (err == nil) != s.ok {
			f.Fatalf("checkJSON(%.80q) = %v, want ok=%v", s.body, err, s.ok)
		}
		f.Add([]byte(s.body))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		err := checkJSON(body)
		if err != nil {
			if !errors.Is(err, errBadJSON) {
				t.Fatalf("error %v does not wrap errBadJSON", err)
			}
			// Whatever encoding/json takes as one valid value must be refused
			// only for one of checkJSON's documented extra rules (extend
			// extraRules when adding a rule).
			if json.Valid(body) {
				msg := err.Error()
				if !slices.ContainsFunc(extraRules, func(r string) bool { return strings.Contains(msg, r) }) {
					t.Fatalf("json.Valid accepts %q but checkJSON refuses it: %v", body, err)
				}
			}
			return
		}
		if !utf8.Valid(body) {
			t.Fatalf("accepted invalid UTF-8: %q", body)
		}
		var v any
		if err := json.Unmarshal(body, &v); err != nil {
			t.Fatalf("accepted %q but json.Unmarshal fails: %v", body, err)
		}
		num := decodeNumbers(t, body)
		// maxJSONDepth counts from 0, so containers nest maxJSONDepth+1 deep.
		if n := nesting(num); n > maxJSONDepth+1 {
			t.Fatalf("accepted containers nested %d deep", n)
		}
		// The compact re-encoding of an accepted body is accepted too.
		canon := mustMarshal(t, num)
		if err := checkJSON(canon); err != nil {
			t.Fatalf("accepted %q but not its re-encoding %q: %v", body, canon, err)
		}
		// Re-encoding with one key written twice is refused.
		m, ok := num.(map[string]any)
		if !ok || len(m) == 0 {
			// Wrap the value so there is a key to duplicate (one level
			// deeper, so it may also be refused for depth: either way, no).
			dup := []byte(`{"k":` + string(canon) + `,"k":` + string(canon) + `}`)
			if checkJSON(dup) == nil {
				t.Fatalf("accepted duplicated key in %q", dup)
			}
			return
		}
		keys := sortedKeys(m)
		for _, k := range []string{keys[0], keys[len(keys)-1]} {
			dup := objectBody(t, m, append(append([]string{}, keys...), k))
			err := checkJSON(dup)
			if err == nil || !strings.Contains(err.Error(), "duplicate key") {
				t.Fatalf("re-encoding %q with key %q twice: got %v, want a duplicate-key error", dup, k, err)
			}
		}
	})
}
