-- Retention: per-table limits on how long and how many change sets are kept, what has
-- been pruned, and change-store objects waiting to be deleted.
ALTER TABLE source_tables
    -- Soft limits: change sets past them are pruned once no subscription needs them.
    ADD COLUMN retention_max_age_ms      BIGINT CHECK (retention_max_age_ms > 0),
    ADD COLUMN retention_max_change_sets BIGINT CHECK (retention_max_change_sets > 0),
    -- Hard limit: change sets older than this are pruned even if subscriptions need them.
    ADD COLUMN retention_hard_max_age_ms BIGINT CHECK (retention_hard_max_age_ms > 0),
    -- Every change set up to this ordinal is pruned; the last of them had this many
    -- events (so that the position right after it is still known to be valid).
    ADD COLUMN pruned_through_ordinal    BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN pruned_through_events     BIGINT NOT NULL DEFAULT 0;

-- Object-store prefixes of pruned change sets, deleted once `delete_after` has passed
-- (a grace period for reads that found the segments just before they were pruned).
CREATE TABLE garbage (
    id           BIGSERIAL PRIMARY KEY,
    prefix       TEXT NOT NULL,
    delete_after TIMESTAMPTZ NOT NULL
);

CREATE INDEX garbage_due ON garbage (delete_after);
