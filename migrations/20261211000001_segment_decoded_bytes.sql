-- What a segment's events take once decoded, where its writer knew it (segments icefeed
-- encodes; NULL for copied data files and for segments written before this column).
-- Readers size windows, chunks and pages by it as well as by the stored size: rows that
-- compress far better than usual (a repeated document) would otherwise decode to
-- gigabytes per window.
ALTER TABLE segments ADD COLUMN decoded_bytes BIGINT;
ALTER TABLE net_segments ADD COLUMN decoded_bytes BIGINT;
