package store

import "testing"

func TestQueryOperation(t *testing.T) {
	for sql, want := range map[string]string{
		"SELECT 1":                        "SELECT",
		"\n  WITH x AS (SELECT 1) SELECT": "WITH",
		"-- claim\nUPDATE t SET a = 1":    "UPDATE",
		"/* c */ insert\ninto t":          "INSERT",
		"BEGIN;\nSET LOCAL x = 1;":        "BEGIN",
		"begin":                           "BEGIN",
		";":                               "UNKNOWN",
		"":                                "UNKNOWN",
	} {
		if got := queryOperation(sql); got != want {
			t.Errorf("queryOperation(%q) = %q, want %q", sql, got, want)
		}
	}
}
