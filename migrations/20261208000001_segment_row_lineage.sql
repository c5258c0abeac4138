-- Row lineage (Iceberg v3) of an `inserts` segment's rows: a row that does not carry its
-- own `_row_id` / `_last_updated_sequence_number` inherits `first_row_id` plus its
-- position in the file, and `lineage_sequence_number` (the data file's data sequence
-- number). `lineage_sequence_number` is set exactly for segments of v3 tables;
-- `first_row_id` stays null for files written before the table became v3. `changes`
-- segments carry their rows' lineage in columns of their own.
ALTER TABLE segments ADD COLUMN first_row_id BIGINT, ADD COLUMN lineage_sequence_number BIGINT;
