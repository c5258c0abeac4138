-- Rows a snapshot brought back by dropping a live delete without a replacement (a metadata
-- edit no engine commits; MERGE_ON_READ M9): published as inserts, and counted here so
-- that they do not pass unnoticed.
ALTER TABLE change_sets ADD COLUMN resurrected_rows BIGINT NOT NULL DEFAULT 0;
