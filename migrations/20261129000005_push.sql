-- Push subscriptions: the OpenSearch target of a subscription, its progress counters,
-- and the events the index refused for good (dead letters).
ALTER TABLE subscriptions DROP CONSTRAINT subscriptions_state_check;
ALTER TABLE subscriptions ADD CONSTRAINT subscriptions_state_check
    CHECK (state IN ('active', 'paused', 'failed', 'backing_off'));

CREATE TABLE push_targets (
    subscription_id    UUID PRIMARY KEY REFERENCES subscriptions (id) ON DELETE CASCADE,
    -- The target as registered, secrets included: never returned by the API.
    target             JSONB NOT NULL,
    documents_indexed  BIGINT NOT NULL DEFAULT 0,
    documents_deleted  BIGINT NOT NULL DEFAULT 0,
    -- Replayed changes OpenSearch already had (a version conflict).
    documents_skipped  BIGINT NOT NULL DEFAULT 0,
    documents_rejected BIGINT NOT NULL DEFAULT 0,
    -- The last failure of any kind (the subscription's last_error is why it stopped).
    last_error         TEXT,
    last_error_at      TIMESTAMPTZ,
    -- While backing off: when the worker tries again.
    retry_at           TIMESTAMPTZ,
    last_pushed_at     TIMESTAMPTZ
);

CREATE TABLE dead_letters (
    id              BIGSERIAL PRIMARY KEY,
    subscription_id UUID NOT NULL REFERENCES subscriptions (id) ON DELETE CASCADE,
    -- The subscription cursor just after the event.
    position        TEXT NOT NULL,
    -- The event as the pull API renders it; a redrive rebuilds the document from it.
    event           JSONB NOT NULL,
    -- The document it was meant for; NULL when no id could be computed.
    index_name      TEXT,
    document_id     TEXT,
    version         BIGINT NOT NULL,
    error_type      TEXT NOT NULL,
    reason          TEXT NOT NULL,
    created_at      TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE INDEX dead_letters_subscription ON dead_letters (subscription_id, id);
CREATE INDEX dead_letters_document ON dead_letters (subscription_id, document_id);
