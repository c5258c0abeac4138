-- Subscriptions: named consumers of one or more tables' feeds, each with a committed
-- position per table (what the consumer acknowledged) and a delivered position (the
-- furthest any page handed out; an ack beyond it is refused).
CREATE TABLE subscriptions (
    id             UUID PRIMARY KEY,
    name           TEXT NOT NULL UNIQUE,
    kind           TEXT NOT NULL CHECK (kind IN ('pull', 'opensearch')),
    state          TEXT NOT NULL CHECK (state IN ('active', 'paused', 'failed')),
    -- Operations delivered (insert, update, delete).
    ops            TEXT[] NOT NULL,
    -- Projected top-level columns; NULL = whole rows.
    columns        TEXT[],
    start_position JSONB NOT NULL,
    last_error     TEXT,
    created_at     TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at     TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- Positions are kept canonical: (ordinal, consumed) is the point just before the next
-- event not yet consumed, so that positions compare as (ordinal, consumed) pairs.
CREATE TABLE subscription_tables (
    subscription_id    UUID NOT NULL REFERENCES subscriptions (id) ON DELETE CASCADE,
    -- Index of the table in the subscription (its place in subscription cursors).
    slot               INT NOT NULL,
    -- A table with subscriptions cannot be removed until they are.
    table_id           UUID NOT NULL REFERENCES source_tables (id),
    committed_ordinal  BIGINT NOT NULL,
    committed_consumed BIGINT NOT NULL,
    delivered_ordinal  BIGINT NOT NULL,
    delivered_consumed BIGINT NOT NULL,
    PRIMARY KEY (subscription_id, slot),
    UNIQUE (subscription_id, table_id)
);

CREATE INDEX subscription_tables_table ON subscription_tables (table_id);
