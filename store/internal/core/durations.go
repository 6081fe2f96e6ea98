package core

import "time"

// Seconds is a duration PostgreSQL computed as seconds (extract(epoch …)).
func Seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// OptSeconds is Seconds of a value that may be NULL.
func OptSeconds(s *float64) *time.Duration {
	if s == nil {
		return nil
	}
	d := Seconds(*s)
	return &d
}
