-- Paused tables are polled too, publishing nothing, so that their lag stays true.
DROP INDEX source_tables_due;
CREATE INDEX source_tables_due ON source_tables (next_poll_at) WHERE state IN ('active', 'paused');
