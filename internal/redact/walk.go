package redact

import (
	"bytes"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
)

var (
	stringType  = reflect.TypeFor[string]()
	rawJSONType = reflect.TypeFor[json.RawMessage]()
)

// Value redacts, in place, every text reachable from v, a pointer to a
// decoded request body: each field, element, map key and map value of type
// string, and each string and key inside a JSON document held as
// json.RawMessage. Named string types are enumerations the contract
// checks, not text, and are left alone, as are struct fields whose JSON
// name is in skip (tokens and checksums the gateway compares, never
// shows). Reports whether anything was replaced.
func (r *Redactor) Value(v any, skip ...string) bool {
	if r.Empty() || v == nil {
		return false
	}
	w := walker{r: r, skip: skip}
	w.walk(reflect.ValueOf(v))
	return w.changed
}

type walker struct {
	r       *Redactor
	skip    []string
	changed bool
}

func (w *walker) text(s string) string {
	out := w.r.String(s)
	if out != s {
		w.changed = true
	}
	return out
}

func (w *walker) walk(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			w.walk(v.Elem())
		}
	case reflect.Interface:
		if v.IsNil() {
			return
		}
		c := reflect.New(v.Elem().Type()).Elem()
		c.Set(v.Elem())
		before := w.changed
		w.changed = false
		w.walk(c)
		if w.changed && v.CanSet() {
			v.Set(c)
		}
		w.changed = w.changed || before
	case reflect.Struct:
		t := v.Type()
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() || slices.Contains(w.skip, jsonName(f)) {
				continue
			}
			w.walk(v.Field(i))
		}
	case reflect.Slice:
		if v.Type() == rawJSONType {
			if out, ok := w.rawJSON(v.Bytes()); ok && v.CanSet() {
				v.SetBytes(out)
			}
			return
		}
		for i := range v.Len() {
			w.walk(v.Index(i))
		}
	case reflect.Array:
		for i := range v.Len() {
			w.walk(v.Index(i))
		}
	case reflect.Map:
		w.walkMap(v)
	case reflect.String:
		if v.Type() == stringType && v.CanSet() {
			v.SetString(w.text(v.String()))
		}
	}
}

func (w *walker) walkMap(m reflect.Value) {
	if m.IsNil() {
		return
	}
	type entry struct{ oldKey, key, val reflect.Value }
	var changed []entry
	iter := m.MapRange()
	for iter.Next() {
		before := w.changed
		w.changed = false
		key := reflect.New(iter.Key().Type()).Elem()
		key.Set(iter.Key())
		w.walk(key)
		val := reflect.New(iter.Value().Type()).Elem()
		val.Set(iter.Value())
		w.walk(val)
		if w.changed {
			changed = append(changed, entry{iter.Key(), key, val})
		}
		w.changed = w.changed || before
	}
	for _, e := range changed {
		m.SetMapIndex(e.oldKey, reflect.Value{})
	}
	for _, e := range changed {
		m.SetMapIndex(e.key, e.val)
	}
}

// rawJSON redacts the strings of a JSON document; ok is false when nothing
// changed (the document is then kept byte for byte).
func (w *walker) rawJSON(raw []byte) ([]byte, bool) {
	if len(raw) == 0 {
		return raw, false
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return raw, false
	}
	before := w.changed
	w.changed = false
	w.walk(reflect.ValueOf(&doc))
	changed := w.changed
	w.changed = w.changed || before
	if !changed {
		return raw, false
	}
	out, err := json.Marshal(doc)
	if err != nil {
		return raw, false
	}
	return out, true
}

func jsonName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
	if name == "" {
		return f.Name
	}
	return name
}
