//! icefeed: change feeds of Apache Iceberg tables over HTTP.
//! Must not reach: `icefeed_testkit` (fixtures: only the binary's `icefeed demo` uses them).

pub mod api;
pub mod app;
pub mod catalog;
pub mod change;
pub mod changelog;
pub mod changes;
pub mod cli;
pub mod config;
pub mod delivery;
pub mod failure;
pub mod ids;
pub mod int64;
pub mod network;
pub mod secret;
pub mod store;
pub mod telemetry;
pub mod workers;
