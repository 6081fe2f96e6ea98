package core

// The plan settings of the statements that walk an index and stop early:
// the lease engine's acquisition, sweep and completions, and the schedule
// claim (FireDueSchedules). Each is transaction-local
// (set_config(…, true)), so a pooled connection keeps none of them (see
// "Shape" in store/doc.go).

// OrderedScansSQL keeps the rest of a transaction's plans on ordered index
// scans. The hot statements walk an index from its head and stop after the
// rows they want — the queue in priority order, live leases by expiry — and
// only an index scan can stop early, and only an index scan marks the
// entries of rows deleted or moved out of a partial index as dead as it
// passes them, so the next walk skips them. The planner does not know
// that: with statistics of a table just filled in bulk (or none yet) it
// chose a bitmap scan and a sort, which read a whole class of the queue,
// 100,000 entries for 32 rows, and the sweeper's earliest expiry read every
// finished attempt's entry again on every pass.
//
// JIT compilation is off in these transactions too: a scan the settings
// disable still gets planned where no index fits (a small table's
// filter), at a cost of 10^10, and a plan that dear passes jit_above_cost
// and spends most of a second compiling a statement that runs in a
// millisecond (every completion did, once webhook_targets joined it).
const OrderedScansSQL = `SELECT ` + orderedScans

const orderedScans = `set_config('enable_seqscan', 'off', true), set_config('enable_bitmapscan', 'off', true),
	set_config('jit', 'off', true)`

// GenericPlanSQL is OrderedScansSQL for the acquisition, which also plans
// its statements once per connection instead of on every poll: planning
// them costs more than running them. A generic plan is made once, possibly
// while a table is still small, and then kept as the table grows; the
// ordered scans keep it right whatever the statistics said.
const GenericPlanSQL = `SELECT set_config('plan_cache_mode', 'force_generic_plan', true), ` + orderedScans
