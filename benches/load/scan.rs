//! The physical floor: every column of every data file decoded with bare Arrow, and the
//! delete files of merge-on-read snapshots decoded as bare (Parquet position and equality
//! deletes through the same reader, deletion vectors with the `roaring` crate); and, for
//! exports of files with deletes, their live rows decoded and written again as Parquet.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use arrow::array::RecordBatchReader;
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_reader::{ParquetRecordBatchReaderBuilder, RowSelection, RowSelector};
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;
use roaring::RoaringTreemap;

const BATCH_SIZE: usize = 8192;
/// Runs of the floors of single changes, of which the median counts (as in PERFORMANCE.md).
pub const FLOOR_RUNS: usize = 3;

/// A deletion vector: the Puffin blob at `offset`, `length` bytes (a big-endian length,
/// the magic, a portable 64-bit Roaring bitmap, a CRC-32).
#[derive(Clone, Debug)]
pub struct Vector {
    pub path: PathBuf,
    pub offset: u64,
    pub length: u64,
}

impl Vector {
    /// Its positions, read with the `roaring` crate (no checks).
    pub fn positions(&self) -> anyhow::Result<RoaringTreemap> {
        let mut file = File::open(&self.path)?;
        file.seek(SeekFrom::Start(self.offset))?;
        let mut blob = vec![0; usize::try_from(self.length)?];
        file.read_exact(&mut blob)?;
        anyhow::ensure!(blob.len() >= 12, "a {}-byte deletion vector", self.length);
        Ok(RoaringTreemap::deserialize_from(&blob[8..blob.len() - 4])?)
    }
}

/// A file (or a part of one) to decode.
pub enum Decode {
    /// A Parquet file, every column: a data file or a Parquet delete file.
    Parquet(PathBuf),
    Vector(Vector),
}

/// A data file whose live rows (those `deleted` does not name) are written again.
pub struct Rewrite {
    pub file: PathBuf,
    pub deleted: Option<Vector>,
}

/// What a floor read.
#[derive(Debug, Default, Clone, Copy)]
pub struct Decoded {
    /// Rows of the Parquet files (data and delete files), or rows written again.
    pub rows: u64,
    /// Positions of the deletion vectors.
    pub positions: u64,
    pub elapsed: Duration,
}

/// Decodes `files` on `threads` threads (each taking the next file when done with one);
/// returns the rows read and the wall time.
pub fn bare_scan(files: &[PathBuf], threads: usize) -> anyhow::Result<(u64, Duration)> {
    let jobs: Vec<Decode> = files.iter().cloned().map(Decode::Parquet).collect();
    let decoded = bare_decode(&jobs, threads)?;
    Ok((decoded.rows, decoded.elapsed))
}

/// Decodes `files` and encodes their rows with `arrow-json` as newline-delimited JSON to
/// memory, on `threads` threads: the floor of any JSON rendering of the rows
/// (PERFORMANCE.md), measured in the same run as what is compared with it.
pub fn json_scan(files: &[PathBuf], threads: usize) -> anyhow::Result<(u64, Duration)> {
    let decoded = on_threads(files, threads, |path| {
        let reader = ParquetRecordBatchReaderBuilder::try_new(File::open(path)?)?
            .with_batch_size(BATCH_SIZE)
            .build()?;
        let mut body = Vec::new();
        let mut rows = 0;
        for batch in reader {
            let batch = batch?;
            rows += batch.num_rows() as u64;
            body.clear();
            let mut writer = arrow_json::LineDelimitedWriter::new(&mut body);
            writer.write(&batch)?;
            writer.finish()?;
        }
        Ok((rows, 0))
    })?;
    Ok((decoded.rows, decoded.elapsed))
}

/// `floor` `runs` times; the run of median wall time.
pub fn median(
    runs: usize,
    mut floor: impl FnMut() -> anyhow::Result<Decoded>,
) -> anyhow::Result<Decoded> {
    let mut all = (0..runs.max(1))
        .map(|_| floor())
        .collect::<anyhow::Result<Vec<_>>>()?;
    all.sort_by_key(|d| d.elapsed);
    Ok(all[all.len() / 2])
}

/// [`bare_decode`] `runs` times; the run of median wall time.
pub fn bare_decode_median(jobs: &[Decode], threads: usize, runs: usize) -> anyhow::Result<Decoded> {
    median(runs, || bare_decode(jobs, threads))
}

/// Decodes `jobs` on `threads` threads.
pub fn bare_decode(jobs: &[Decode], threads: usize) -> anyhow::Result<Decoded> {
    on_threads(jobs, threads, |job| match job {
        Decode::Parquet(path) => Ok((parquet_rows(path)?, 0)),
        Decode::Vector(vector) => Ok((0, vector.positions()?.len())),
    })
}

/// Reads the live rows of each file of `jobs` (the positions of its deletion vector
/// skipped through a row selection, as icefeed reads them) and writes them as Parquet
/// (zstd level 1, as icefeed's segments) to memory, on `threads` threads.
pub fn bare_rewrite(jobs: &[Rewrite], threads: usize) -> anyhow::Result<Decoded> {
    on_threads(jobs, threads, |job| {
        let deleted = match &job.deleted {
            Some(vector) => vector.positions()?,
            None => RoaringTreemap::new(),
        };
        let mut builder = ParquetRecordBatchReaderBuilder::try_new(File::open(&job.file)?)?
            .with_batch_size(BATCH_SIZE);
        let rows = u64::try_from(builder.metadata().file_metadata().num_rows())?;
        if !deleted.is_empty() {
            builder = builder.with_row_selection(live_rows(&deleted, rows));
        }
        let reader = builder.build()?;
        let props = WriterProperties::builder()
            .set_compression(Compression::ZSTD(ZstdLevel::try_new(1)?))
            .build();
        let mut writer = ArrowWriter::try_new(Vec::new(), reader.schema(), Some(props))?;
        let mut written = 0;
        for batch in reader {
            let batch = batch?;
            written += batch.num_rows() as u64;
            writer.write(&batch)?;
        }
        writer.into_inner()?;
        Ok((written, deleted.len()))
    })
}

/// The rows of a file of `rows` rows that `deleted` does not name.
fn live_rows(deleted: &RoaringTreemap, rows: u64) -> RowSelection {
    let mut selectors = Vec::new();
    let mut at = 0;
    for position in deleted.iter().take_while(|&p| p < rows) {
        if position > at {
            selectors.push(RowSelector::select((position - at) as usize));
        }
        selectors.push(RowSelector::skip(1));
        at = position + 1;
    }
    if at < rows {
        selectors.push(RowSelector::select((rows - at) as usize));
    }
    selectors.into()
}

/// Runs `work` on each job on `threads` threads (each taking the next job when done with
/// one); sums the (rows, positions) it returns.
fn on_threads<T: Sync>(
    jobs: &[T],
    threads: usize,
    work: impl Fn(&T) -> anyhow::Result<(u64, u64)> + Sync,
) -> anyhow::Result<Decoded> {
    let next = AtomicUsize::new(0);
    let started = Instant::now();
    let (rows, positions) = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| -> anyhow::Result<(u64, u64)> {
                    let (mut rows, mut positions) = (0, 0);
                    while let Some(job) = jobs.get(next.fetch_add(1, Ordering::Relaxed)) {
                        let (r, p) = work(job)?;
                        rows += r;
                        positions += p;
                    }
                    Ok((rows, positions))
                })
            })
            .collect();
        workers.into_iter().try_fold((0, 0), |(r, p), w| {
            let (rows, positions) = w.join().expect("scan thread")?;
            anyhow::Ok((r + rows, p + positions))
        })
    })?;
    Ok(Decoded {
        rows,
        positions,
        elapsed: started.elapsed(),
    })
}

fn parquet_rows(path: &PathBuf) -> anyhow::Result<u64> {
    let reader = ParquetRecordBatchReaderBuilder::try_new(File::open(path)?)?
        .with_batch_size(BATCH_SIZE)
        .build()?;
    let mut rows = 0;
    for batch in reader {
        rows += batch?.num_rows() as u64;
    }
    Ok(rows)
}
