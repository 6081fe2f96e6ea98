// Package envfile reads and writes the KEY=value files that `make run`
// (gateway dev) writes to .dev/env and that gateway ctl, the reference
// worker and the script workers read: the one definition of that format.
//
// A file is what a shell would source: blank lines and # comments are
// skipped, a line may start with "export ", and one pair of matching single
// or double quotes around a value is dropped. There are no escapes.
package envfile

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strings"
)

// Var is one KEY=value line.
type Var struct{ Key, Value string }

// Vars are a file's lines in order.
type Vars []Var

// Lookup returns key's value; a key set twice has its last value, as in a
// shell.
func (vs Vars) Lookup(key string) (string, bool) {
	for i := len(vs) - 1; i >= 0; i-- {
		if vs[i].Key == key {
			return vs[i].Value, true
		}
	}
	return "", false
}

// Get returns key's value, "" when it is not set.
func (vs Vars) Get(key string) string {
	v, _ := vs.Lookup(key)
	return v
}

// Parse reads KEY=value lines.
func Parse(r io.Reader) (Vars, error) {
	var vars Vars
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		key, value, ok := strings.Cut(strings.TrimPrefix(line, "export "), "=")
		key = strings.TrimSpace(key)
		if !ok || key == "" {
			return nil, fmt.Errorf("line %d: want KEY=value", n)
		}
		value = strings.TrimSpace(value)
		if len(value) >= 2 && (value[0] == '"' || value[0] == '\'') && value[len(value)-1] == value[0] {
			value = value[1 : len(value)-1]
		}
		vars = append(vars, Var{key, value})
	}
	return vars, sc.Err()
}

// Read parses the file at path; a malformed line's error names the file.
func Read(path string) (Vars, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	vars, err := Parse(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return vars, nil
}

// Encode renders vars as `export KEY=value` lines, so that sourcing them
// hands the variables to every command run after. Parse knows no escapes,
// so a value that needs more than single quotes is refused.
func Encode(vars Vars) ([]byte, error) {
	var b strings.Builder
	for _, v := range vars {
		if strings.ContainsAny(v.Value, "'\n\r") {
			return nil, fmt.Errorf("env file: %s=%q cannot be written as one quoted line", v.Key, v.Value)
		}
		fmt.Fprintf(&b, "export %s=%s\n", v.Key, Quote(v.Value))
	}
	return []byte(b.String()), nil
}

// Quote single-quotes s unless it is made only of characters a shell takes
// literally.
func Quote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.,/:@%+=") == "" {
		return s
	}
	return "'" + s + "'"
}
