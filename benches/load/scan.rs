//! The physical floor: every column of every data file decoded with bare Arrow.

use std::fs::File;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

const BATCH_SIZE: usize = 8192;

/// Decodes `files` on `threads` threads (each taking the next file when done with one);
/// returns the rows read and the wall time.
pub fn bare_scan(files: &[PathBuf], threads: usize) -> anyhow::Result<(u64, Duration)> {
    let next = AtomicUsize::new(0);
    let started = Instant::now();
    let rows = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| -> anyhow::Result<u64> {
                    let mut rows = 0;
                    while let Some(path) = files.get(next.fetch_add(1, Ordering::Relaxed)) {
                        let reader = ParquetRecordBatchReaderBuilder::try_new(File::open(path)?)?
                            .with_batch_size(BATCH_SIZE)
                            .build()?;
                        for batch in reader {
                            rows += batch?.num_rows() as u64;
                        }
                    }
                    Ok(rows)
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("scan thread"))
            .sum::<anyhow::Result<u64>>()
    })?;
    Ok((rows, started.elapsed()))
}
