package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/worker-gateway/gateway/problem"
)

// errBadJSON marks a body that is not exactly one well-formed JSON value.
var errBadJSON = errors.New("bad JSON body")

// badJSON is errBadJSON with a reason the sender may read.
func badJSON(reason problem.Text) error { return problem.Wrap(errBadJSON, reason) }

// checkJSON accepts exactly one JSON value of valid UTF-8 with no duplicate
// object keys and nothing after it. encoding/json alone would take the last
// of two duplicate keys and ignore trailing data; refusing both means one
// request has one meaning, so one meaning has one checksum.
//
// It scans the bytes once, allocating only for strings with escapes: every
// request body passes through here before the schema check, and
// encoding/json's token stream (an allocation per token) cost more than the
// schema check itself — 100 µs against about 4 µs for a batch completion of 32
// (BenchmarkCheckJSON; TestCheckJSONMatchesReferenceOnMutations and
// FuzzCheckJSONMatchesReference hold the scanner to the token stream's
// verdicts).
func checkJSON(body []byte) error {
	if !utf8.Valid(body) {
		return badJSON("not valid UTF-8")
	}
	sc := jsonScanner{buf: body}
	if err := sc.value(0); err != nil {
		return err
	}
	sc.skipSpace()
	if sc.pos != len(sc.buf) {
		return badJSON("data after the JSON value")
	}
	return nil
}

// maxJSONDepth bounds nesting so a hostile body cannot exhaust the stack.
const maxJSONDepth = 64

// errSyntax is what every malformed body is told.
var errSyntax = badJSON("not valid JSON")

// jsonScanner walks one JSON text (RFC 8259), already known to be UTF-8.
type jsonScanner struct {
	buf []byte
	pos int
}

func (sc *jsonScanner) skipSpace() {
	for sc.pos < len(sc.buf) {
		switch sc.buf[sc.pos] {
		case ' ', '\t', '\n', '\r':
			sc.pos++
		default:
			return
		}
	}
}

// value reads one value at nesting depth (the containers around it).
func (sc *jsonScanner) value(depth int) error {
	if depth > maxJSONDepth {
		return badJSON(problem.Text(fmt.Sprintf("nested deeper than %d levels", maxJSONDepth)))
	}
	sc.skipSpace()
	if sc.pos >= len(sc.buf) {
		return errSyntax
	}
	switch c := sc.buf[sc.pos]; {
	case c == '{':
		return sc.object(depth)
	case c == '[':
		return sc.array(depth)
	case c == '"':
		_, err := sc.str()
		return err
	case c == '-' || (c >= '0' && c <= '9'):
		return sc.number()
	default:
		for _, lit := range []string{"true", "false", "null"} {
			if bytes.HasPrefix(sc.buf[sc.pos:], []byte(lit)) {
				sc.pos += len(lit)
				return nil
			}
		}
		return errSyntax
	}
}

func (sc *jsonScanner) object(depth int) error {
	sc.pos++ // {
	// Keys seen so far: a short object compares them in a list, a long one
	// in a map.
	var (
		short [16][]byte
		keys  = short[:0]
		seen  map[string]bool
	)
	sc.skipSpace()
	if sc.pos < len(sc.buf) && sc.buf[sc.pos] == '}' {
		sc.pos++
		return nil
	}
	for {
		sc.skipSpace()
		if sc.pos >= len(sc.buf) || sc.buf[sc.pos] != '"' {
			return errSyntax
		}
		key, err := sc.str()
		if err != nil {
			return err
		}
		if seen == nil && len(keys) < len(short) {
			if slices.ContainsFunc(keys, func(k []byte) bool { return bytes.Equal(k, key) }) {
				return badJSON(problem.Text(fmt.Sprintf("duplicate key %q", key)))
			}
			keys = append(keys, key)
		} else {
			if seen == nil {
				seen = make(map[string]bool, 2*len(keys))
				for _, k := range keys {
					seen[string(k)] = true
				}
			}
			if seen[string(key)] {
				return badJSON(problem.Text(fmt.Sprintf("duplicate key %q", key)))
			}
			seen[string(key)] = true
		}
		sc.skipSpace()
		if sc.pos >= len(sc.buf) || sc.buf[sc.pos] != ':' {
			return errSyntax
		}
		sc.pos++
		if err := sc.value(depth + 1); err != nil {
			return err
		}
		if done, err := sc.afterElement('}'); done || err != nil {
			return err
		}
	}
}

func (sc *jsonScanner) array(depth int) error {
	sc.pos++ // [
	sc.skipSpace()
	if sc.pos < len(sc.buf) && sc.buf[sc.pos] == ']' {
		sc.pos++
		return nil
	}
	for {
		if err := sc.value(depth + 1); err != nil {
			return err
		}
		if done, err := sc.afterElement(']'); done || err != nil {
			return err
		}
	}
}

// afterElement reads what follows an element of a container: a comma
// (more to come) or the container's closing delimiter (done).
func (sc *jsonScanner) afterElement(closing byte) (done bool, err error) {
	sc.skipSpace()
	switch {
	case sc.pos < len(sc.buf) && sc.buf[sc.pos] == ',':
		sc.pos++
		return false, nil
	case sc.pos < len(sc.buf) && sc.buf[sc.pos] == closing:
		sc.pos++
		return true, nil
	default:
		return false, errSyntax
	}
}

// str reads a string at pos and returns its value: the bytes between the
// quotes when there is no escape (no copy), else the value encoding/json
// decodes, which must not hold U+0000 (checkString; unescaped, a control
// character is not valid JSON anyway).
func (sc *jsonScanner) str() ([]byte, error) {
	start := sc.pos
	sc.pos++ // "
	escaped := false
	for sc.pos < len(sc.buf) {
		switch c := sc.buf[sc.pos]; {
		case c == '"':
			sc.pos++
			raw := sc.buf[start:sc.pos]
			if !escaped {
				return raw[1 : len(raw)-1], nil
			}
			var s string
			if err := json.Unmarshal(raw, &s); err != nil {
				return nil, errSyntax
			}
			return []byte(s), checkString(s)
		case c == '\\':
			escaped = true
			sc.pos += 2 // the escape's first character is checked by Unmarshal
		case c < 0x20:
			return nil, errSyntax
		default:
			sc.pos++
		}
	}
	return nil, errSyntax
}

// number reads a number at pos: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
func (sc *jsonScanner) number() error {
	start := sc.pos
	digits := func() int {
		n := 0
		for sc.pos < len(sc.buf) && sc.buf[sc.pos] >= '0' && sc.buf[sc.pos] <= '9' {
			sc.pos++
			n++
		}
		return n
	}
	if sc.buf[sc.pos] == '-' {
		sc.pos++
	}
	if sc.pos < len(sc.buf) && sc.buf[sc.pos] == '0' {
		sc.pos++
	} else if digits() == 0 {
		return errSyntax
	}
	if sc.pos < len(sc.buf) && sc.buf[sc.pos] == '.' {
		sc.pos++
		if digits() == 0 {
			return errSyntax
		}
	}
	if sc.pos < len(sc.buf) && (sc.buf[sc.pos] == 'e' || sc.buf[sc.pos] == 'E') {
		sc.pos++
		if sc.pos < len(sc.buf) && (sc.buf[sc.pos] == '+' || sc.buf[sc.pos] == '-') {
			sc.pos++
		}
		if digits() == 0 {
			return errSyntax
		}
	}
	return checkNumber(string(sc.buf[start:sc.pos]))
}

// maxNumberLength bounds a number's text: PostgreSQL stores jsonb numbers
// expanded, so 1e100000 — eight bytes — would become a 100 kB value.
const maxNumberLength = 64

// checkString refuses strings PostgreSQL cannot store: U+0000 (text and
// jsonb reject it).
func checkString(v string) error {
	if strings.ContainsRune(v, 0) {
		return badJSON("a string contains U+0000")
	}
	return nil
}

// checkNumber refuses numbers (their JSON text) PostgreSQL cannot store as
// given: out of float64 range, or expanding far beyond their text.
func checkNumber(v string) error {
	if len(v) > maxNumberLength {
		return badJSON(problem.Text(fmt.Sprintf("a number is longer than %d characters", maxNumberLength)))
	}
	if _, err := strconv.ParseFloat(v, 64); err != nil {
		return badJSON("a number is out of range")
	}
	if i := strings.IndexAny(v, "eE"); i >= 0 {
		if exp, err := strconv.Atoi(strings.TrimPrefix(v[i+1:], "+")); err != nil || exp > 308 || exp < -308 {
			return badJSON("a number's exponent is out of range")
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
