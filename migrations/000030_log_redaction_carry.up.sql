-- A log redacted for secrets may end a chunk with the beginning of a
-- secret's value, whose rest the next chunk brings. The gateway holds that
-- beginning back and stores it with the next chunk, redacted if the rest
-- follows. log_redact_carry names what is held — the spelling of which
-- secret (name, version, form) and how many of its bytes — never the bytes
-- themselves, so no part of a value is stored in the clear. NULL: nothing
-- is held. Added without a default: no rewrite of the table, and a
-- release that does not know the column never writes it.
ALTER TABLE worker_task_attempts ADD COLUMN log_redact_carry text;
