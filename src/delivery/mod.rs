//! Delivering change events to consumers: pull pages (JSON and NDJSON), long polls and
//! server-sent event streams woken by publish notifications.

pub mod notify;
pub mod pull;
pub mod stream;

pub use notify::{ChangeNotifier, ChangeWaiter, Stopped};
pub use pull::{Feed, FeedError, Framing, Page};
pub use stream::{StreamPage, StreamTiming, event_stream};
