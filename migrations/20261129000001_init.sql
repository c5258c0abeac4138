-- The registry of source tables, their checkpoints, leases and the change-set index.

CREATE TABLE source_tables (
    id                    UUID PRIMARY KEY,
    -- Display name of the Iceberg table ("namespace.name"), used in events.
    table_name            TEXT NOT NULL,
    namespace             TEXT[] NOT NULL,
    name                  TEXT NOT NULL,
    -- Catalog connection including secrets; never returned by the API.
    catalog               JSONB NOT NULL,
    -- Identity of the catalog without secrets, for duplicate detection.
    catalog_key           TEXT NOT NULL,
    branch                TEXT NOT NULL DEFAULT 'main',
    identifier_columns    TEXT[] NOT NULL,
    start_position        JSONB NOT NULL,
    poll_interval_ms      BIGINT NOT NULL CHECK (poll_interval_ms > 0),
    state                 TEXT NOT NULL CHECK (state IN ('active', 'paused', 'error')),
    -- 'export': the next poll publishes the current table state as inserts.
    -- 'follow': the next poll publishes the snapshots after the checkpoint.
    mode                  TEXT NOT NULL CHECK (mode IN ('export', 'follow')),
    -- NULL in follow mode means: from the oldest retained snapshot on.
    checkpoint_snapshot_id BIGINT,
    checkpoint_sequence_number BIGINT,
    checkpoint_committed_at TIMESTAMPTZ,
    last_error            TEXT,
    error_snapshot_id     BIGINT,
    -- What the last poll saw, for lag.
    head_snapshot_id      BIGINT,
    snapshots_behind      BIGINT NOT NULL DEFAULT 0,
    oldest_pending_committed_at TIMESTAMPTZ,
    last_polled_at        TIMESTAMPTZ,
    next_poll_at          TIMESTAMPTZ NOT NULL DEFAULT now(),
    -- Ordinal of the last published change set; positions are (ordinal, event index).
    last_ordinal          BIGINT NOT NULL DEFAULT 0,
    created_at            TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at            TIMESTAMPTZ NOT NULL DEFAULT now(),
    UNIQUE (catalog_key, namespace, name, branch)
);

CREATE INDEX source_tables_due ON source_tables (next_poll_at) WHERE state = 'active';

-- Iceberg schemas that published change sets were read with, served by the API.
CREATE TABLE table_schemas (
    table_id   UUID NOT NULL REFERENCES source_tables (id) ON DELETE CASCADE,
    schema_id  INT NOT NULL,
    schema     JSONB NOT NULL,
    PRIMARY KEY (table_id, schema_id)
);

-- One row per published change set: all events of one source snapshot.
CREATE TABLE change_sets (
    table_id        UUID NOT NULL REFERENCES source_tables (id) ON DELETE CASCADE,
    ordinal         BIGINT NOT NULL,
    snapshot_id     BIGINT NOT NULL,
    sequence_number BIGINT NOT NULL,
    operation       TEXT NOT NULL,
    -- 'export' (the table state at registration as inserts) or 'snapshot'.
    kind            TEXT NOT NULL CHECK (kind IN ('export', 'snapshot')),
    committed_at    TIMESTAMPTZ NOT NULL,
    schema_id       INT NOT NULL,
    event_count     BIGINT NOT NULL,
    published_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
    published_by    TEXT NOT NULL,
    PRIMARY KEY (table_id, ordinal),
    -- A snapshot is published at most once per table, whichever node tries.
    UNIQUE (table_id, snapshot_id)
);

-- The Parquet files of a change set in the change store, in event order.
CREATE TABLE segments (
    table_id     UUID NOT NULL,
    ordinal      BIGINT NOT NULL,
    segment_no   INT NOT NULL,
    -- Index (0-based) within the change set of the segment's first event.
    first_event  BIGINT NOT NULL,
    event_count  BIGINT NOT NULL CHECK (event_count > 0),
    -- 'inserts': every row is an insert; 'changes': rows carry an op and images.
    layout       TEXT NOT NULL CHECK (layout IN ('inserts', 'changes')),
    path         TEXT NOT NULL,
    size_bytes   BIGINT NOT NULL,
    PRIMARY KEY (table_id, ordinal, segment_no),
    FOREIGN KEY (table_id, ordinal) REFERENCES change_sets (table_id, ordinal) ON DELETE CASCADE
);

-- Leases: one holder at a time; the epoch grows on every acquisition and fences writes.
CREATE TABLE leases (
    name        TEXT PRIMARY KEY,
    owner       TEXT NOT NULL,
    epoch       BIGINT NOT NULL,
    expires_at  TIMESTAMPTZ NOT NULL
);
