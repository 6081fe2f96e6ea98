// Package slots computes a schedule's slots without a database: the nominal
// fire times of a cron expression (on wall-clock time in the schedule's
// zone) or of an interval (absolute time), each slot's jitter, the slots
// due after a downtime and how late one may still fire.
//
// The store (store/internal/schedules/fire.go) decides what a due slot does —
// overlap and catch-up policies, runs, history — and keeps every decision
// on the database's clock: the times passed in here are the database's.
//
// Time zones: cron slots are computed on civil (zone-less) time and mapped
// to instants. A wall time a DST change skips fires once, at the first
// instant after the gap; one that occurs twice fires once, at its first
// occurrence. Jitter is a hash of (schedule, slot), so every replica
// computes the same fire time.
package slots
