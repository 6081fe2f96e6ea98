package redact

import (
	"strconv"
	"strings"
)

// Chunk redacts one chunk of a log that arrives in chunks. A spelling may
// be cut by a chunk's end: when the text ends with the beginning of one,
// that beginning is held back and stored with the next chunk — replaced
// if the rest of the spelling follows, as it was sent if not. What is
// held is named by the carry, a spelling's key and a length (never the
// text: the held bytes are spelled again from the secret), which the
// caller keeps with the log and passes with the next chunk ("" for none).
// A log that ends while something is held does not store those bytes.
//
// A carry naming a spelling this redactor does not know (the secret was
// replaced or deleted since) cannot be spelled again and is stored as the
// secret's marker.
func (r *Redactor) Chunk(carry string, data []byte) (keep []byte, next string) {
	held := ""
	if carry != "" {
		key, n := parseCarry(carry)
		if p, ok := r.byKey(key); ok && n > 0 && n < len(p.text) {
			held = p.text[:n]
		} else {
			held = Marker(carryName(key))
		}
	}
	text := held + string(data)
	if r.Empty() {
		return []byte(text), ""
	}
	out, end := r.replace(text)
	at := r.heldFrom(text, end)
	if at < 0 {
		return []byte(out), ""
	}
	keepLen := len(out) - (len(text) - at)
	return []byte(out[:keepLen]), r.carryAt(text, at)
}

// heldFrom is where the text's ending beginning of a spelling starts, at
// or after from (the end of the last replacement), or -1.
func (r *Redactor) heldFrom(text string, from int) int {
	for at := max(from, len(text)-r.longest+1); at < len(text); at++ {
		if !r.first[text[at]] {
			continue
		}
		for _, p := range r.patterns {
			if len(p.text) > len(text)-at && strings.HasPrefix(p.text, text[at:]) {
				return at
			}
		}
	}
	return -1
}

// carryAt names the held text[at:] by the longest spelling it begins.
func (r *Redactor) carryAt(text string, at int) string {
	for _, p := range r.patterns {
		if len(p.text) > len(text)-at && strings.HasPrefix(p.text, text[at:]) {
			return p.key + "#" + strconv.Itoa(len(text)-at)
		}
	}
	return ""
}

func (r *Redactor) byKey(key string) (pattern, bool) {
	if r == nil {
		return pattern{}, false
	}
	p, ok := r.keys[key]
	return p, ok
}

func parseCarry(carry string) (key string, n int) {
	i := strings.LastIndexByte(carry, '#')
	if i < 0 {
		return carry, 0
	}
	n, _ = strconv.Atoi(carry[i+1:])
	return carry[:i], n
}

// carryName is the secret's name in a spelling's key (name@version/form).
func carryName(key string) string {
	if i := strings.IndexByte(key, '@'); i >= 0 {
		return key[:i]
	}
	return key
}
