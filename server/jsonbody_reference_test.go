package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// referenceCheckJSON is checkJSON as it was first written, on
// encoding/json's token stream: slow (an allocation per token) but plainly
// right. The single-pass scanner must give every body the same verdict and
// the same message (sameVerdict).
func referenceCheckJSON(body []byte) error {
	if !utf8.Valid(body) {
		return fmt.Errorf("%w: not valid UTF-8", errBadJSON)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := referenceValue(dec, 0); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: data after the JSON value", errBadJSON)
	}
	return nil
}

func referenceValue(dec *json.Decoder, depth int) error {
	if depth > maxJSONDepth {
		return fmt.Errorf("%w: nested deeper than %d levels", errBadJSON, maxJSONDepth)
	}
	tok, err := dec.Token()
	if err != nil {
		return fmt.Errorf("%w: not valid JSON", errBadJSON)
	}
	if err := referenceScalar(tok); err != nil {
		return err
	}
	switch tok {
	case json.Delim('{'):
		seen := map[string]bool{}
		for dec.More() {
			keyTok, err := dec.Token()
			if err != nil {
				return fmt.Errorf("%w: not valid JSON", errBadJSON)
			}
			key, _ := keyTok.(string)
			if err := referenceScalar(key); err != nil {
				return err
			}
			if seen[key] {
				return fmt.Errorf("%w: duplicate key %q", errBadJSON, key)
			}
			seen[key] = true
			if err := referenceValue(dec, depth+1); err != nil {
				return err
			}
		}
		if _, err := dec.Token(); err != nil {
			return fmt.Errorf("%w: not valid JSON", errBadJSON)
		}
	case json.Delim('['):
		for dec.More() {
			if err := referenceValue(dec, depth+1); err != nil {
				return err
			}
		}
		if _, err := dec.Token(); err != nil {
			return fmt.Errorf("%w: not valid JSON", errBadJSON)
		}
	}
	return nil
}

func referenceScalar(tok json.Token) error {
	switch v := tok.(type) {
	case string:
		return checkString(v)
	case json.Number:
		return checkNumber(string(v))
	}
	return nil
}

// scannerSeeds are bodies on the scanner's edges: every way a value can end
// early or run on, escapes, numbers at their limits, many keys.
var scannerSeeds = []string{
	`{"a":1,"b":[true,false,null],"c":{"d":"e"}}`, ` { } `, "\t[\r\n]\n",
	`tru`, `truex`, `[truex]`, `nul`, `[1x]`, `1x`, `-`, `-0`, `-01`, `01`, `1.`, `1.e5`, `.5`, `1e`, `1e+`, `1E-7`,
	`1e308`, `1e309`, `1e-400`, `123456789012345678901234567890123456789012345678901234567890123456`,
	`"\u0000"`, `"a\\u0000"`, `{"\u0000":1}`, `"\ud800"`, `"\u00"`, `"\"`, `"\x"`, `"\/\b\f\n\r\t\\\""`,
	"\"a\x01b\"", "\"\x7f\"", `{"a":1,}`, `{,}`, `[,]`, `{"a"}`, `{"a":}`, `{"a":1 "b":2}`, `{1:2}`, `[1 2]`,
	`{"k1":1,"k2":1,"k3":1,"k4":1,"k5":1,"k6":1,"k7":1,"k8":1,"k9":1,"k10":1,"k11":1,"k12":1,"k13":1,"k14":1,"k15":1,"k16":1,"k17":1,"k1":1}`,
	`{"k1":1,"k2":1,"k3":1,"k4":1,"k5":1,"k6":1,"k7":1,"k8":1,"k9":1,"k10":1,"k11":1,"k12":1,"k13":1,"k14":1,"k15":1,"k16":1,"k17":1,"k18":1}`,
	`{"a":1,"\u0061":2}`, `"` + strings.Repeat("é", 40) + `"`, `[` + strings.Repeat(`1,`, 50) + `1]`,
}

func FuzzCheckJSONMatchesReference(f *testing.F) {
	for _, s := range jsonSeeds {
		f.Add([]byte(s.body))
	}
	for _, s := range scannerSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		sameVerdict(t, body)
	})
}

// sameVerdict fails unless checkJSON and the reference agree on body: both
// accept it, or both refuse it for the same reason. One exception: a body
// both too deep and malformed past the limit may be refused for either (the
// token stream checks the depth before a key's colon and after a stray
// character, the scanner the other way round).
func sameVerdict(t *testing.T, body []byte) {
	t.Helper()
	got, want := checkJSON(body), referenceCheckJSON(body)
	if fmt.Sprint(got) == fmt.Sprint(want) {
		return
	}
	tooDeep := func(err error) bool { return err != nil && strings.Contains(err.Error(), "nested deeper") }
	if got != nil && want != nil && (tooDeep(got) || tooDeep(want)) {
		return
	}
	t.Fatalf("checkJSON(%q) = %v, the reference says %v", body, got, want)
}

// The fuzz target's seeds, mutated a byte at a time with a fixed seed: a
// deterministic sample of the neighbourhood where scanners go wrong
// (truncations, stray delimiters, broken escapes and numbers).
func TestCheckJSONMatchesReferenceOnMutations(t *testing.T) {
	mutations := 20000
	if n := os.Getenv("JSON_MUTATIONS"); n != "" {
		mutations, _ = strconv.Atoi(n)
	}
	var seeds [][]byte
	for _, s := range jsonSeeds {
		seeds = append(seeds, []byte(s.body))
	}
	for _, s := range scannerSeeds {
		seeds = append(seeds, []byte(s))
	}
	alphabet := []byte(`{}[]",:\ -+.0123456789eEtrufalsn` + "\x00\x01\t\n\xc3\xa9\xff")
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range mutations {
		body := slices.Clone(seeds[i%len(seeds)])
		for range 1 + rng.IntN(3) {
			switch op := rng.IntN(3); {
			case op == 0 && len(body) > 0: // replace
				body[rng.IntN(len(body))] = alphabet[rng.IntN(len(alphabet))]
			case op == 1: // insert
				at := rng.IntN(len(body) + 1)
				body = slices.Insert(body, at, alphabet[rng.IntN(len(alphabet))])
			case len(body) > 0: // delete
				at := rng.IntN(len(body))
				body = slices.Delete(body, at, at+1)
			}
		}
		sameVerdict(t, body)
	}
}

// BenchmarkCheckJSON compares the scanner with the reference on a batch
// completion of 32 attempts, the body the hot path checks most.
func BenchmarkCheckJSON(b *testing.B) {
	var items []string
	for i := range 32 {
		items = append(items, fmt.Sprintf(`{"attempt_id":"0190d5a2-7b3c-7def-8123-4567%08d","lease_token":"lt_%040d","outcome":"succeeded"}`, i, i))
	}
	body := []byte(`{"completions":[` + strings.Join(items, ",") + `]}`)
	for name, check := range map[string]func([]byte) error{"scanner": checkJSON, "reference": referenceCheckJSON} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				if err := check(body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
