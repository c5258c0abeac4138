-- Units of background work any node may claim: the map and reduce tasks of a snapshot's
-- shuffle. Ids are deterministic, so planning the same snapshot again is a no-op.
CREATE TABLE tasks (
    id           TEXT PRIMARY KEY,
    table_id     UUID NOT NULL REFERENCES source_tables (id) ON DELETE CASCADE,
    snapshot_id  BIGINT NOT NULL,
    kind         TEXT NOT NULL CHECK (kind IN ('map', 'reduce')),
    payload      JSONB NOT NULL,
    state        TEXT NOT NULL DEFAULT 'pending'
                 CHECK (state IN ('pending', 'running', 'done', 'failed')),
    attempts     INT NOT NULL DEFAULT 0,
    owner        TEXT,
    -- Grows on every claim; completing a task checks it (fencing).
    epoch        BIGINT NOT NULL DEFAULT 0,
    expires_at   TIMESTAMPTZ,
    -- A map task's bucket files and sizes; a reduce task's segment.
    result       JSONB,
    error        TEXT,
    created_at   TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp()
);

CREATE INDEX tasks_open ON tasks (created_at) WHERE state IN ('pending', 'running');
CREATE INDEX tasks_of_snapshot ON tasks (table_id, snapshot_id, kind);
