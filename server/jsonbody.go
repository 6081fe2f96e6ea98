package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"
)

// errBadJSON marks a body that is not exactly one well-formed JSON value.
var errBadJSON = errors.New("bad JSON body")

// checkJSON accepts exactly one JSON value of valid UTF-8 with no duplicate
// object keys and nothing after it. encoding/json alone would take the last
// of two duplicate keys and ignore trailing data; refusing both means one
// request has one meaning, so one meaning has one checksum.
func checkJSON(body []byte) error {
	if !utf8.Valid(body) {
		return fmt.Errorf("%w: not valid UTF-8", errBadJSON)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := checkValue(dec, 0); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: data after the JSON value", errBadJSON)
	}
	return nil
}

// maxJSONDepth bounds nesting so a hostile body cannot exhaust the stack.
const maxJSONDepth = 64

func checkValue(dec *json.Decoder, depth int) error {
	if depth > maxJSONDepth {
		return fmt.Errorf("%w: nested deeper than %d levels", errBadJSON, maxJSONDepth)
	}
	tok, err := dec.Token()
	if err != nil {
		return fmt.Errorf("%w: not valid JSON", errBadJSON)
	}
	if err := checkScalar(tok); err != nil {
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
			if err := checkScalar(key); err != nil {
				return err
			}
			if seen[key] {
				return fmt.Errorf("%w: duplicate key %q", errBadJSON, key)
			}
			seen[key] = true
			if err := checkValue(dec, depth+1); err != nil {
				return err
			}
		}
		if _, err := dec.Token(); err != nil {
			return fmt.Errorf("%w: not valid JSON", errBadJSON)
		}
	case json.Delim('['):
		for dec.More() {
			if err := checkValue(dec, depth+1); err != nil {
				return err
			}
		}
		if _, err := dec.Token(); err != nil {
			return fmt.Errorf("%w: not valid JSON", errBadJSON)
		}
	}
	return nil
}

// maxNumberLength bounds a number's text: PostgreSQL stores jsonb numbers
// expanded, so 1e100000 — eight bytes — would become a 100 kB value.
const maxNumberLength = 64

// checkScalar refuses the strings and numbers PostgreSQL cannot store as
// given: strings with U+0000 (text and jsonb reject it), and numbers that
// are out of float64 range or would expand far beyond their text.
func checkScalar(tok json.Token) error {
	switch v := tok.(type) {
	case string:
		if strings.ContainsRune(v, 0) {
			return fmt.Errorf("%w: a string contains U+0000", errBadJSON)
		}
	case json.Number:
		if len(v) > maxNumberLength {
			return fmt.Errorf("%w: a number is longer than %d characters", errBadJSON, maxNumberLength)
		}
		if _, err := strconv.ParseFloat(string(v), 64); err != nil {
			return fmt.Errorf("%w: a number is out of range", errBadJSON)
		}
		if i := strings.IndexAny(string(v), "eE"); i >= 0 {
			if exp, err := strconv.Atoi(strings.TrimPrefix(string(v[i+1:]), "+")); err != nil || exp > 308 || exp < -308 {
				return fmt.Errorf("%w: a number's exponent is out of range", errBadJSON)
			}
		}
	}
	return nil
}

// readJSONBody reads a bounded body and checks it; the caller replaces
// r.Body with the bytes so later readers see the same, checked input.
func readJSONBody(r *http.Request) ([]byte, error) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, err
	}
	if len(body) == 0 {
		return body, nil
	}
	return body, checkJSON(body)
}
