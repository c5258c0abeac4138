-- Readers look segments up by where they end: "the segments holding events after
-- (ordinal, consumed)" becomes one index range scan in feed order that stops at its
-- LIMIT, however many segments a change set has (an initial export has one per data
-- file), instead of a scan and a sort of all of them on every page.
ALTER TABLE segments
    ADD COLUMN end_event BIGINT GENERATED ALWAYS AS (first_event + event_count) STORED;
CREATE INDEX segments_by_end ON segments (table_id, ordinal, end_event);
