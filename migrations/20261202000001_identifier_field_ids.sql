-- A feed's identifier columns by Iceberg field id, so that renaming a column keeps it the
-- key. NULL for tables registered before: their names are looked up in each schema.
ALTER TABLE source_tables ADD COLUMN identifier_field_ids integer[];
