//! Delivering change events to consumers: pull pages (JSON and NDJSON).

pub mod notify;
pub mod pull;

pub use notify::{ChangeNotifier, ChangeWaiter, Stopped};
pub use pull::{Feed, FeedError, Framing, Page};
