-- An `inserts` segment may be a data file copied byte for byte whose rows are not all
-- events: the positions deleted in the table (merge-on-read delete files at export) are
-- kept beside it as a serialized 64-bit Roaring bitmap, whose key this is. Readers skip
-- those positions; `event_count` counts only the other rows.
ALTER TABLE segments ADD COLUMN deleted_rows TEXT;
