//! icefeed's test kit: real Iceberg tables written with the iceberg crate's own writers
//! (appends, and copy-on-write rewrites it has no action for), the taxi-shaped rows they
//! hold, and the demo table. Used by `icefeed demo`, the integration tests and the
//! benchmarks; the service itself never writes a table.
//!
//! Must not reach: the `icefeed` crate. Its binary depends on this crate for `icefeed
//! demo`, so depending back on it would be a cycle; everything here stands on iceberg,
//! Arrow and Parquet alone.

mod catalog_pointer;
pub mod demo;
pub mod letters;
pub mod rewrite;
pub mod taxi;
pub mod writer;
