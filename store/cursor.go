package store

import "github.com/worker-gateway/gateway/store/internal/core"

// Cursor is a keyset position in a listing (core/cursor.go). Its encoding
// is a promise to clients holding one: a cursor handed out before must
// still decode, and resume where it left off.
type Cursor = core.Cursor

// DecodeCursor parses a cursor made by Cursor.Encode.
func DecodeCursor(s string) (*Cursor, error) { return core.DecodeCursor(s) }
