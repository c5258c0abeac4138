-- Net changes over a range of a table's feed: computed once by leased tasks, kept in
-- the change store and served page by page to every consumer asking for the range.
-- A range holds the events after one position up to and including an end position.
CREATE TABLE net_ranges (
    id             BIGSERIAL PRIMARY KEY,
    table_id       UUID NOT NULL REFERENCES source_tables (id) ON DELETE CASCADE,
    after_ordinal  BIGINT NOT NULL,
    after_consumed BIGINT NOT NULL,
    until_ordinal  BIGINT NOT NULL,
    until_consumed BIGINT NOT NULL,
    -- The schema of every change set in the range (a range spans one schema), and the
    -- indexes of its identifier columns in it (empty: rows are netted whole).
    schema_id      INT NOT NULL,
    key_columns    INT[] NOT NULL,
    state          TEXT NOT NULL DEFAULT 'computing'
                   CHECK (state IN ('computing', 'ready', 'failed')),
    error_code     TEXT,
    error          TEXT,
    event_count    BIGINT,
    created_at     TIMESTAMPTZ NOT NULL DEFAULT now(),
    -- Ranges nobody read for a while are dropped with their segments.
    read_at        TIMESTAMPTZ NOT NULL DEFAULT now(),
    UNIQUE (table_id, after_ordinal, after_consumed, until_ordinal, until_consumed)
);

-- The Parquet files of a range's result, in event order.
CREATE TABLE net_segments (
    range_id    BIGINT NOT NULL REFERENCES net_ranges (id) ON DELETE CASCADE,
    segment_no  INT NOT NULL,
    first_event BIGINT NOT NULL,
    event_count BIGINT NOT NULL CHECK (event_count > 0),
    path        TEXT NOT NULL,
    size_bytes  BIGINT NOT NULL,
    PRIMARY KEY (range_id, segment_no)
);

-- A range's tasks name it; their table's ordinal and snapshot are 0.
ALTER TABLE tasks ADD COLUMN net_range BIGINT REFERENCES net_ranges (id) ON DELETE CASCADE;
CREATE INDEX tasks_of_net_range ON tasks (net_range, kind) WHERE net_range IS NOT NULL;
ALTER TABLE tasks DROP CONSTRAINT tasks_kind_check;
ALTER TABLE tasks ADD CONSTRAINT tasks_kind_check
    CHECK (kind IN ('map', 'reduce', 'net_map', 'net_reduce'));
