//! Delivering change events to consumers: pull pages (JSON and NDJSON).

pub mod pull;

pub use pull::{Feed, FeedError, Framing, Page};
