-- A branch rolled back (or reset to another lineage) publishes a `reset` change set: the
-- difference from the checkpoint's state to the new head's. A snapshot may then be
-- published more than once (rolled back, then forward again), so change sets, their
-- objects and their tasks are keyed by ordinal, and a publish is guarded by the ordinal
-- it was planned for instead of by the snapshot's uniqueness.
ALTER TABLE change_sets DROP CONSTRAINT change_sets_table_id_snapshot_id_key;
ALTER TABLE change_sets DROP CONSTRAINT change_sets_kind_check;
ALTER TABLE change_sets ADD CONSTRAINT change_sets_kind_check
    CHECK (kind IN ('export', 'snapshot', 'reset'));
-- For a reset: the checkpoint it went back (or over) from.
ALTER TABLE change_sets ADD COLUMN reset_from_snapshot_id BIGINT;
-- The change-store prefix holding its segments; NULL for change sets published before
-- this migration, whose segments are under their snapshot id.
ALTER TABLE change_sets ADD COLUMN prefix TEXT;
-- The external version its events carry in OpenSearch: grows with every change set of a
-- table, also past a reset whose snapshot is older than the checkpoint. Earlier change
-- sets pushed their sequence number.
ALTER TABLE change_sets ADD COLUMN push_version BIGINT;
UPDATE change_sets SET push_version = sequence_number;
ALTER TABLE change_sets ALTER COLUMN push_version SET NOT NULL;
ALTER TABLE source_tables ADD COLUMN last_push_version BIGINT NOT NULL DEFAULT 0;
UPDATE source_tables t SET last_push_version = coalesce(
    (SELECT max(push_version) FROM change_sets c WHERE c.table_id = t.id),
    t.checkpoint_sequence_number, 0);

-- Tasks belong to the change set they compute, by the ordinal it will be published at.
-- Unfinished tasks of the old layout are dropped (their coordinator plans them again)
-- and their shuffle files queued as garbage.
INSERT INTO garbage (prefix, delete_after)
    SELECT DISTINCT 'shuffle/' || table_id || '/' || snapshot_id, now() FROM tasks;
DELETE FROM tasks;
ALTER TABLE tasks ADD COLUMN ordinal BIGINT NOT NULL;
DROP INDEX tasks_of_snapshot;
CREATE INDEX tasks_of_change_set ON tasks (table_id, ordinal, kind);
