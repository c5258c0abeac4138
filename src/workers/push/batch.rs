//! One batch of a push subscription: read the events after the committed position, send
//! them, and commit the position once every item is settled.

use tokio_util::sync::CancellationToken;

use super::Pusher;
use crate::changes::Position;
use crate::delivery::opensearch::{BulkAction, ItemOutcome, SendError};
use crate::delivery::push::{ItemError, UNRENDERABLE, item_for_event, send_items};
use crate::delivery::{FeedError, Framing, JsonSink, OpSet, Positions, Selection};
use crate::store::{Lag, NewDeadLetter, PushCommit, StoreError, SubscriptionState, TableId};

/// What a batch came to.
#[derive(Debug)]
pub enum Step {
    /// Events were pushed; more may be waiting.
    Pushed { events: usize, more: bool },
    /// Nothing after the committed position.
    Idle,
    /// The subscription no longer wants a worker: paused or failed (its state), or
    /// deleted (`None`).
    Stop(Option<SubscriptionState>),
}

/// Why a batch did not go through.
#[derive(Debug, thiserror::Error)]
pub enum BatchError {
    #[error(transparent)]
    Send(#[from] SendError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Feed(#[from] FeedError),
    /// The subscription cannot be pushed until someone changes something.
    #[error("{0}")]
    Fatal(String),
}

impl Pusher {
    /// Pushes one batch.
    pub async fn run_once(&self, cancel: &CancellationToken) -> Result<Step, BatchError> {
        let store = self.feed.store();
        let subscription = match store.find_subscription(&self.id.to_string()).await {
            Ok(s) => s,
            Err(StoreError::NotFound) => return Ok(Step::Stop(None)),
            Err(e) => return Err(e.into()),
        };
        if !matches!(
            subscription.state,
            SubscriptionState::Active | SubscriptionState::BackingOff
        ) {
            return Ok(Step::Stop(Some(subscription.state)));
        }
        let slots = store.subscribed_tables(self.id).await?;
        let committed: Vec<Position> = slots.iter().map(|s| s.committed).collect();
        for (slot, table) in slots.iter().zip(&self.tables) {
            if store.floor(table.id).await?.is_gone(slot.committed) {
                return Err(BatchError::Fatal(format!(
                    "retention removed change sets of {} this subscription had not pushed; \
                     rewind it to the earliest retained position",
                    table.table_name
                )));
            }
        }
        let selection = Selection {
            ops: OpSet::from_names(&subscription.ops)
                .map_err(|e| BatchError::Fatal(e.to_string()))?,
            columns: subscription.columns.clone(),
        };
        let ids: Vec<TableId> = self.tables.iter().map(|t| t.id).collect();
        let positions = Positions::new(self.id, ids, committed.clone());
        let cursor = |t: TableId, p: Position| positions.cursor(t, p);
        let limit = self.target.config.batch.max_documents;
        let options = Default::default();
        let mut sink = JsonSink::new(Framing::Ndjson, &options, &cursor, limit);
        let end = self
            .feed
            .read_subscription(&self.tables, &positions, limit, &selection, &mut sink)
            .await?;
        let mut next = Vec::with_capacity(end.next.len());
        for (table, p) in self.tables.iter().zip(&end.next) {
            next.push(store.canonical_position(table.id, *p).await?.unwrap_or(*p));
        }
        if sink.count() == 0 {
            if next != committed {
                // Skipped events of other operations: their positions pass.
                store
                    .commit_push(
                        &self.lease,
                        self.id,
                        &committed,
                        &next,
                        &PushCommit::default(),
                    )
                    .await?;
            }
            return Ok(if end.more {
                Step::Pushed {
                    events: 0,
                    more: true,
                }
            } else {
                Step::Idle
            });
        }
        let body = sink.into_body();
        let lines: Vec<&[u8]> = body
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .collect();
        let mut commit = PushCommit::default();
        let mut items = Vec::with_capacity(lines.len());
        let mut origin = Vec::with_capacity(lines.len());
        for (i, line) in lines.iter().enumerate() {
            match item_for_event(line, &self.target, &self.tables) {
                Ok(item) => {
                    items.push(item);
                    origin.push(i);
                }
                Err(ItemError::Render(e)) => {
                    commit
                        .dead
                        .push(dead_letter(line, None, UNRENDERABLE, &e.to_string()))
                }
                Err(e) => return Err(BatchError::Fatal(e.to_string())),
            }
        }
        let outcomes = send_items(&self.client, &self.target, &items, &self.policy, cancel).await?;
        for ((item, outcome), i) in items.iter().zip(outcomes).zip(origin) {
            match outcome {
                ItemOutcome::Applied | ItemOutcome::AlreadyApplied => {
                    match (&outcome, &item.action) {
                        (ItemOutcome::AlreadyApplied, _) => commit.skipped += 1,
                        (_, BulkAction::Delete) => commit.deleted += 1,
                        (_, BulkAction::Index(_)) => commit.indexed += 1,
                    }
                    commit.settled.push((item.id.clone(), item.version));
                }
                ItemOutcome::Rejected(e) => {
                    commit
                        .dead
                        .push(dead_letter(lines[i], Some(item), &e.error_type, &e.reason))
                }
            }
        }
        let events = lines.len();
        if !store
            .commit_push(&self.lease, self.id, &committed, &next, &commit)
            .await?
        {
            tracing::info!(subscription = %self.name, "committed position moved (a rewind); starting over from it");
            return Ok(Step::Pushed {
                events: 0,
                more: true,
            });
        }
        self.record(&commit);
        if !commit.dead.is_empty() {
            tracing::warn!(subscription = %self.name, rejected = commit.dead.len(), "events went to the dead letters");
        }
        Ok(Step::Pushed {
            events,
            more: end.more,
        })
    }

    /// How far the subscription is behind on all its tables, as the store has it now.
    pub async fn lag(&self) -> Result<Lag, StoreError> {
        let store = self.feed.store();
        let mut total = Lag::default();
        for slot in store.subscribed_tables(self.id).await? {
            let table = store.get_table(slot.table_id).await?;
            total.add(&store.subscription_lag(&table, slot.committed).await?.1);
        }
        Ok(total)
    }

    fn record(&self, commit: &PushCommit) {
        let label = [("subscription", self.name.clone())];
        for (name, value) in [
            ("icefeed_push_documents_indexed_total", commit.indexed),
            ("icefeed_push_documents_deleted_total", commit.deleted),
            ("icefeed_push_documents_skipped_total", commit.skipped),
            (
                "icefeed_push_documents_rejected_total",
                commit.dead.len() as i64,
            ),
        ] {
            metrics::counter!(name, &label).increment(value as u64);
        }
    }
}

fn dead_letter(
    line: &[u8],
    item: Option<&crate::delivery::opensearch::BulkItem>,
    error_type: &str,
    reason: &str,
) -> NewDeadLetter {
    let event: serde_json::Value = serde_json::from_slice(line).unwrap_or_default();
    NewDeadLetter {
        position: event["position"].as_str().unwrap_or_default().to_string(),
        version: event["sequence_number"].as_i64().unwrap_or_default(),
        index_name: item.map(|i| i.index.clone()),
        document_id: item.map(|i| i.id.clone()),
        event,
        error_type: error_type.to_string(),
        reason: reason.to_string(),
    }
}
