-- A redrive is queued by the API and sent by the node holding the subscription's lease.
ALTER TABLE dead_letters ADD COLUMN queued_at TIMESTAMPTZ;
CREATE INDEX dead_letters_queued ON dead_letters (subscription_id, id) WHERE queued_at IS NOT NULL;
