-- A task that failed for a passing reason waits before its next attempt, and a snapshot
-- whose task failed only for such reasons is retried as a whole, not stopped.
ALTER TABLE tasks ADD COLUMN not_before TIMESTAMPTZ;
ALTER TABLE tasks ADD COLUMN permanent BOOLEAN NOT NULL DEFAULT false;
