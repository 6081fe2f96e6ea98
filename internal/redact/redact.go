// Package redact removes secret values from text a worker sends, before the
// gateway stores it: the value as it is, JSON-escaped (as common encoders
// write it), percent-encoded (in a URL's query or path) and base64-encoded
// (standard and URL-safe, whole or inside a longer encoded text), each
// replaced by [REDACTED:NAME].
package redact

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// Secret is one value to redact, with the name its marker shows and the
// version it was read at (a log's carry names both, see Chunk).
type Secret struct {
	Name    string
	Version int
	Value   string
}

// MinValue is the shortest value redacted: shorter ones would mask ordinary
// text everywhere.
const MinValue = 4

// minEncoded is the shortest base64 fragment redacted: a fragment of a
// value's encoding inside a longer encoded text stands for fewer bytes of
// it than the value has.
const minEncoded = 8

// pattern is one spelling of one secret.
type pattern struct {
	text string
	name string
	// key names the spelling for a log's carry: name, version and form.
	key string
}

// Redactor replaces the spellings of a set of secrets. The zero value and
// nil redact nothing.
type Redactor struct {
	patterns []pattern // longest first, so a spelling containing another is replaced whole
	keys     map[string]pattern
	first    [256]bool // the first bytes of the spellings: a quick skip
	longest  int
}

// New builds the redactor of secrets; values shorter than MinValue are left
// alone.
func New(secrets []Secret) *Redactor {
	r := &Redactor{keys: map[string]pattern{}}
	seen := map[string]bool{}
	for _, s := range secrets {
		if len(s.Value) < MinValue {
			continue
		}
		for _, sp := range spellings(s.Value) {
			form, text := sp.form, sp.text
			if seen[text] {
				continue
			}
			seen[text] = true
			p := pattern{text: text, name: s.Name, key: s.Name + "@" + strconv.Itoa(s.Version) + "/" + form}
			r.patterns = append(r.patterns, p)
			r.keys[p.key] = p
			r.first[text[0]] = true
			r.longest = max(r.longest, len(text))
		}
	}
	sort.Slice(r.patterns, func(i, j int) bool {
		a, b := r.patterns[i], r.patterns[j]
		if len(a.text) != len(b.text) {
			return len(a.text) > len(b.text)
		}
		return a.key < b.key
	})
	return r
}

// Empty reports whether the redactor has nothing to redact.
func (r *Redactor) Empty() bool { return r == nil || len(r.patterns) == 0 }

// Marker is what stands in for a value of the secret name.
func Marker(name string) string { return "[REDACTED:" + name + "]" }

// spelling is one form a value takes in text.
type spelling struct{ form, text string }

// spellings are the forms a value takes in text, always in the same order:
// a form's name is part of a log's carry, so the redactor of the next
// chunk must name a text shared by two forms (base64 without + or / is
// also base64url) as this one did.
func spellings(v string) []spelling {
	out := []spelling{{"plain", v}}
	add := func(form, text string) {
		if text != "" && text != v {
			out = append(out, spelling{form, text})
		}
	}
	add("json", jsonEscaped(v, true))
	add("json-nohtml", jsonEscaped(v, false))
	add("json-slash", strings.ReplaceAll(jsonEscaped(v, false), "/", `\/`)) // PHP's json_encode
	add("json-ascii", asciiJSONEscaped(v))
	add("json-ascii-upper", upperEscapes(asciiJSONEscaped(v)))
	// In a URL: a query value or a path segment.
	add("url-query", url.QueryEscape(v))
	add("url-path", url.PathEscape(v))
	for _, enc := range []struct {
		name string
		enc  *base64.Encoding
	}{{"b64", base64.StdEncoding}, {"b64raw", base64.RawStdEncoding}, {"b64url", base64.URLEncoding}, {"b64urlraw", base64.RawURLEncoding}} {
		add(enc.name, enc.enc.EncodeToString([]byte(v)))
		// Inside a longer encoded text (a Basic authorization header, a
		// token): the characters that encode nothing but the value's
		// bytes, for each of the three places it can start in a group.
		for skip := range 3 {
			b := []byte(v)[skip:]
			b = b[:len(b)/3*3]
			if core := enc.enc.EncodeToString(b); len(core) >= minEncoded {
				add(enc.name+"-in"+strconv.Itoa(skip), strings.TrimRight(core, "="))
			}
		}
	}
	return out
}

var unicodeEscape = regexp.MustCompile(`\\u[0-9a-f]{4}`)

// upperEscapes writes the \uXXXX escapes of s in upper case, as some
// encoders do.
func upperEscapes(s string) string {
	return unicodeEscape.ReplaceAllStringFunc(s, func(e string) string { return e[:2] + strings.ToUpper(e[2:]) })
}

// jsonEscaped is v inside a JSON string as encoding/json writes it.
func jsonEscaped(v string, html bool) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(html)
	if err := enc.Encode(v); err != nil {
		return ""
	}
	s := strings.TrimSuffix(b.String(), "\n")
	return s[1 : len(s)-1]
}

// asciiJSONEscaped is v inside a JSON string as encoders that keep to
// ASCII write it (Python's json.dumps, JavaScript's JSON.stringify of an
// escaped text): non-ASCII as \uXXXX, lower case.
func asciiJSONEscaped(v string) string {
	var b strings.Builder
	for _, r := range v {
		switch {
		case r == '"':
			b.WriteString(`\"`)
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20:
			fmt.Fprintf(&b, `\u%04x`, r)
		case r < utf8.RuneSelf:
			b.WriteRune(r)
		case r > 0xffff:
			r1, r2 := utf16.EncodeRune(r)
			fmt.Fprintf(&b, `\u%04x\u%04x`, r1, r2)
		default:
			fmt.Fprintf(&b, `\u%04x`, r)
		}
	}
	return b.String()
}

// String returns s with every spelling of every secret replaced.
func (r *Redactor) String(s string) string {
	if r.Empty() || !r.mayContain(s) {
		return s
	}
	out, _ := r.replace(s)
	return out
}

// mayContain is a quick test: no spelling can be in a text shorter than
// the shortest one.
func (r *Redactor) mayContain(s string) bool {
	return len(s) >= len(r.patterns[len(r.patterns)-1].text)
}

// replace scans s left to right, replacing the longest spelling that starts
// at each place, and reports where the last replacement ended.
func (r *Redactor) replace(s string) (string, int) {
	var b strings.Builder
	end, copied := 0, 0
	for i := 0; i < len(s); {
		p, ok := r.matchAt(s, i)
		if !ok {
			i++
			continue
		}
		b.WriteString(s[copied:i])
		b.WriteString(Marker(p.name))
		i += len(p.text)
		copied, end = i, i
	}
	if copied == 0 {
		return s, 0
	}
	b.WriteString(s[copied:])
	return b.String(), end
}

func (r *Redactor) matchAt(s string, i int) (pattern, bool) {
	if !r.first[s[i]] {
		return pattern{}, false
	}
	for _, p := range r.patterns {
		if strings.HasPrefix(s[i:], p.text) {
			return p, true
		}
	}
	return pattern{}, false
}
