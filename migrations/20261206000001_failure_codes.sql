-- Failures carry their kind as a stable code beside the message, so that the scheduler
-- and clients decide by kind instead of reading messages.
ALTER TABLE source_tables ADD COLUMN last_error_code TEXT;
ALTER TABLE tasks ADD COLUMN error_code TEXT;
