//! Delivering change events to consumers: pages of JSON, NDJSON or Arrow, filtered by
//! operation and projected to columns; and pushing them into OpenSearch.

pub mod arrow_page;
pub mod json_page;
pub mod opensearch;
pub mod pull;
pub mod selection;
pub mod subscription;

pub use arrow_page::ArrowSink;
pub use json_page::{Framing, JsonSink};
pub use pull::{EventSink, Feed, FeedError, Page, PageEnd, PageRequest};
pub use selection::{OpSet, Selection, SelectionError};
pub use subscription::{Positions, SubscriptionPageEnd};
