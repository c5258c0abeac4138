//! Background work: the scheduler that keeps every registered table's feed up to date.
//! Must not reach: `api` (the HTTP layer; `app` starts both).

mod heartbeat;
mod janitor;
pub mod net;
pub mod pull_gauges;
pub mod push;
mod rewrite;
mod scheduler;
mod shuffle;
pub mod supervisor;
mod sync;
mod sync_error;
pub mod task_context;
pub mod tasks;

pub use heartbeat::Heartbeat;
pub use janitor::Janitor;
pub use push::PushWorker;
pub use scheduler::Scheduler;
pub use sync::{TableSync, committed_at};
pub use sync_error::SyncError;
