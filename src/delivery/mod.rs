//! Delivering change events to consumers: pages of JSON, NDJSON or Arrow, filtered by
//! operation and projected to columns; long polls and server-sent event streams woken by
//! publish notifications; and pushing them into OpenSearch.
//! Must not reach: `api`, `workers`
//! (delivery renders and sends; the HTTP layer and workers call it).

mod ahead;
pub mod arrow_page;
mod decoded;
mod error;
mod events;
mod ipc_stream;
pub mod json_page;
mod net;
pub mod notify;
pub mod opensearch;
mod page_body;
mod published;
pub mod pull;
pub mod push;
pub mod rendered;
pub mod selection;
mod sizing;
pub mod stream;
pub mod subscription;

pub use arrow_page::ArrowSink;
pub use error::FeedError;
pub use events::{EventSink, RenderedSink};
pub use json_page::{Framing, JsonSink};
pub use net::NetPageEnd;
pub use notify::{ChangeNotifier, ChangeWaiter, Stopped};
pub use page_body::PageBody;
pub use pull::{Feed, PageEnd, PageRequest};
pub use selection::{OpSet, Selection, SelectionError};
pub use stream::{StreamPage, StreamTiming, event_stream};
pub use subscription::{Positions, SubscriptionPageEnd};
