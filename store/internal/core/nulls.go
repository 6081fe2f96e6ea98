package core

import "encoding/json"

// NullString binds an empty string as SQL NULL (an absent idempotency
// key, cron expression…).
func NullString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// NullJSON binds absent JSON as SQL NULL, and JSON as its text.
func NullJSON(b json.RawMessage) any {
	if len(b) == 0 {
		return nil
	}
	return string(b)
}
