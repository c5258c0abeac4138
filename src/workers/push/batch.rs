//! Batches of a push subscription: read the events after a position, send them, and
//! commit the position once every item is settled.
//! Must not reach: `catalog`, `api` (events come from the change store).
//!
//! The worker keeps one batch in flight and reads the next one while it is: a batch is
//! read from where the one before it ends, and its commit expects the position that
//! commit left, so a rewind in between (or anything else that moved the position)
//! makes the commit refuse and the worker start over from the stored position.

use std::ops::Range;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;
use uuid::Uuid;

use super::Pusher;
use crate::change::Op;
use crate::changes::Position;
use crate::delivery::opensearch::{BulkAction, BulkItem, ItemOutcome, PushTarget, SendError};
use crate::delivery::push::{
    EventParts, ItemError, UNRENDERABLE, items_for_event, items_for_parts, send_items,
};
use crate::delivery::{Feed, FeedError, Framing, JsonSink, OpSet, Positions, Selection};
use crate::store::{
    Lag, NewDeadLetter, PushCommit, SourceTable, Store, StoreError, Subscription,
    SubscriptionState, TableId,
};

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

/// A batch read from the feed and made into bulk items, not sent yet.
pub struct Batch {
    /// The positions it continues from: its commit expects them to be the stored ones.
    from: Vec<Position>,
    /// The positions after its last event (canonical).
    next: Vec<Position>,
    /// Events were left after it.
    more: bool,
    /// Its events, one JSON line each: the form a dead letter keeps.
    body: Vec<u8>,
    lines: Vec<Range<usize>>,
    items: Vec<BulkItem>,
    /// The line of each item.
    origin: Vec<usize>,
    /// Dead letters of events that could not be made into items.
    unrenderable: Vec<NewDeadLetter>,
    /// Time it took to read and make into items.
    read_time: Duration,
}

impl Batch {
    fn line(&self, i: usize) -> &[u8] {
        &self.body[self.lines[i].clone()]
    }
}

/// A batch sent and settled item by item whose position is not committed yet: its
/// commit runs while the next batch is sent.
pub struct Sent {
    from: Vec<Position>,
    next: Vec<Position>,
    events: usize,
    more: bool,
    commit: PushCommit,
    read_time: Duration,
    send_time: Duration,
}

impl Pusher {
    fn store(&self) -> &Store {
        self.reader.feed.store()
    }

    /// Pushes one batch, reading the next one and committing the one before while it is
    /// in flight. Commits stay in order and each one expects the position the one
    /// before left, so a batch is only ever sent ahead of its commit, never committed
    /// ahead of one before it; a node dying in between only makes it sent again.
    pub async fn run_once(&mut self, cancel: &CancellationToken) -> Result<Step, BatchError> {
        let ahead = self.ahead.take();
        let subscription = match self.wanted().await? {
            Ok(subscription) => subscription,
            Err(stop) => {
                // A paused subscription shows the position of everything it sent.
                self.commit_sent().await?;
                return Ok(stop);
            }
        };
        let batch = match ahead {
            Some(batch) => batch,
            None => {
                if !self.commit_sent().await? {
                    return Ok(self.started_over());
                }
                let slots = self.store().subscribed_tables(self.reader.id).await?;
                let from = slots.iter().map(|s| s.committed).collect();
                self.reader.read(&subscription, from).await?
            }
        };
        if batch.lines.is_empty() {
            if !self.commit_sent().await? {
                return Ok(self.started_over());
            }
            if batch.next != batch.from {
                // Skipped events of other operations: their positions pass.
                self.commit(&batch.from, &batch.next, &PushCommit::default())
                    .await?;
            }
            return Ok(match batch.more {
                true => Step::Pushed {
                    events: 0,
                    more: true,
                },
                false => Step::Idle,
            });
        }
        // On a task of its own: rendering the next batch takes milliseconds of CPU
        // between awaits, which in this task would hold back handling the answer to the
        // batch in flight.
        let read_ahead = batch.more.then(|| {
            let (reader, from) = (self.reader.clone(), batch.next.clone());
            AbortOnDropHandle::new(tokio::spawn(async move {
                reader.read(&subscription, from).await.ok()
            }))
        });
        let read_ahead = async {
            match read_ahead {
                Some(task) => task.await.ok().flatten(),
                None => None,
            }
        };
        let before = self.sent.take();
        let (committed, sent, ahead) =
            tokio::join!(self.settle(before), self.send(batch, cancel), read_ahead);
        if !committed? {
            return Ok(self.started_over());
        }
        let sent = sent?;
        let step = Step::Pushed {
            events: sent.events,
            more: sent.more,
        };
        if sent.more {
            // An empty batch read ahead may predate a publish whose notification this
            // worker has already passed by: read again rather than go idle on it.
            self.ahead = ahead.filter(|b| !b.lines.is_empty());
            self.sent = Some(sent);
        } else if !self.settle(Some(sent)).await? {
            return Ok(self.started_over());
        }
        Ok(step)
    }

    /// The step after a commit found the stored position moved (a rewind): the next
    /// batch is read from it.
    fn started_over(&mut self) -> Step {
        tracing::info!(subscription = %self.name, "committed position moved (a rewind); starting over from it");
        self.ahead = None;
        Step::Pushed {
            events: 0,
            more: true,
        }
    }

    /// The subscription if it still wants pushing, else the step that stops the worker.
    async fn wanted(&self) -> Result<Result<Subscription, Step>, StoreError> {
        match self
            .store()
            .find_subscription(&self.reader.id.to_string())
            .await
        {
            Ok(s)
                if matches!(
                    s.state,
                    SubscriptionState::Active | SubscriptionState::BackingOff
                ) =>
            {
                Ok(Ok(s))
            }
            Ok(s) => Ok(Err(Step::Stop(Some(s.state)))),
            Err(StoreError::NotFound) => Ok(Err(Step::Stop(None))),
            Err(e) => Err(e),
        }
    }

    /// Sends `batch` and sorts out what each item came to.
    async fn send(&self, batch: Batch, cancel: &CancellationToken) -> Result<Sent, BatchError> {
        let started = Instant::now();
        let outcomes = send_items(
            &self.client,
            &self.reader.target,
            &batch.items,
            &self.policy,
            cancel,
        )
        .await?;
        let mut commit = PushCommit {
            dead: batch.unrenderable.clone(),
            ..PushCommit::default()
        };
        for ((item, outcome), &line) in batch.items.iter().zip(outcomes).zip(&batch.origin) {
            match outcome {
                ItemOutcome::Applied | ItemOutcome::AlreadyApplied => {
                    match (&outcome, &item.action) {
                        (ItemOutcome::AlreadyApplied, _) => commit.skipped += 1,
                        (_, BulkAction::Delete) => commit.deleted += 1,
                        (_, BulkAction::Index(_)) => commit.indexed += 1,
                    }
                    commit.settled.push((item.id.clone(), item.version));
                }
                ItemOutcome::Rejected(e) => commit.dead.push(dead_letter(
                    batch.line(line),
                    item.version,
                    Some(item),
                    &e.error_type,
                    &e.reason,
                )),
            }
        }
        Ok(Sent {
            events: batch.lines.len(),
            more: batch.more,
            from: batch.from,
            next: batch.next,
            commit,
            read_time: batch.read_time,
            send_time: started.elapsed(),
        })
    }

    /// Commits the batch sent last, if any; false when the stored position had moved.
    pub async fn commit_sent(&mut self) -> Result<bool, StoreError> {
        let sent = self.sent.take();
        self.settle(sent).await
    }

    /// Commits `sent` (none: nothing to commit); false when the stored position had moved.
    async fn settle(&self, sent: Option<Sent>) -> Result<bool, StoreError> {
        let Some(sent) = sent else {
            return Ok(true);
        };
        let started = Instant::now();
        if !self.commit(&sent.from, &sent.next, &sent.commit).await? {
            return Ok(false);
        }
        tracing::debug!(
            subscription = %self.name,
            events = sent.events,
            read_ms = sent.read_time.as_secs_f64() * 1e3,
            send_ms = sent.send_time.as_secs_f64() * 1e3,
            commit_ms = started.elapsed().as_secs_f64() * 1e3,
            "pushed a batch"
        );
        self.record(&sent.commit);
        if !sent.commit.dead.is_empty() {
            tracing::warn!(subscription = %self.name, rejected = sent.commit.dead.len(), "events went to the dead letters");
        }
        Ok(true)
    }

    async fn commit(
        &self,
        from: &[Position],
        next: &[Position],
        commit: &PushCommit,
    ) -> Result<bool, StoreError> {
        self.store()
            .commit_push(&self.lease, self.reader.id, from, next, commit)
            .await
    }

    /// How far the subscription is behind on all its tables, as the store has it now.
    pub async fn lag(&self) -> Result<Lag, StoreError> {
        self.store().subscription_total_lag(self.reader.id).await
    }

    fn record(&self, commit: &PushCommit) {
        let label = super::gauges::labels(self.reader.id, &self.name);
        use crate::telemetry::metric::{
            PUSH_DOCUMENTS_DELETED, PUSH_DOCUMENTS_INDEXED, PUSH_DOCUMENTS_REJECTED,
            PUSH_DOCUMENTS_SKIPPED,
        };
        for (metric, value) in [
            (PUSH_DOCUMENTS_INDEXED, commit.indexed),
            (PUSH_DOCUMENTS_DELETED, commit.deleted),
            (PUSH_DOCUMENTS_SKIPPED, commit.skipped),
            (PUSH_DOCUMENTS_REJECTED, commit.dead.len() as i64),
        ] {
            metrics::counter!(metric.name, &label).increment(value as u64);
        }
    }
}

/// A push subscription as its batches are read: shared, so that the next batch can be
/// read on a task of its own while the current one is in flight.
pub struct BatchReader {
    pub feed: Feed,
    /// The subscription's id.
    pub id: Uuid,
    pub tables: Vec<SourceTable>,
    pub target: PushTarget,
}

impl BatchReader {
    /// Reads the batch after `from` and makes its events into bulk items.
    async fn read(
        &self,
        subscription: &Subscription,
        from: Vec<Position>,
    ) -> Result<Batch, BatchError> {
        let started = Instant::now();
        let store = self.feed.store();
        for (table, position) in self.tables.iter().zip(&from) {
            if store.floor(table.id).await?.is_gone(*position) {
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
        let positions = Positions::new(self.id, ids, from.clone());
        let cursor = |t: TableId, p: Position, out: &mut Vec<u8>| positions.write_cursor(t, p, out);
        let limit = self.target.config.batch.max_documents;
        let options = Default::default();
        let mut sink = JsonSink::new(Framing::Ndjson, &options, &cursor, limit).with_spans();
        let end = self
            .feed
            .read_subscription(&self.tables, &positions, limit, &selection, &mut sink)
            .await?;
        let mut next = Vec::with_capacity(end.next.len());
        for (table, p) in self.tables.iter().zip(&end.next) {
            next.push(store.canonical_position(table.id, *p).await?.unwrap_or(*p));
        }
        let (body, spans) = sink.into_body_and_spans();
        let mut batch = Batch {
            from,
            next,
            more: end.more,
            lines: spans.iter().map(|s| s.event.clone()).collect(),
            body: Vec::new(),
            items: Vec::new(),
            origin: Vec::new(),
            unrenderable: Vec::new(),
            read_time: Duration::ZERO,
        };
        for (i, span) in spans.iter().enumerate() {
            let table = self
                .tables
                .iter()
                .find(|t| t.id == span.table)
                .expect("events are read from the subscription's tables");
            let part = |r: &Option<Range<usize>>| r.clone().map(|r| &body[r]);
            let parts = EventParts {
                delete: span.op == Op::Delete,
                key: part(&span.key),
                before: part(&span.before),
                after: part(&span.after),
                sequence_number: span.sequence_number,
                version: span.push_version,
                committed_at: span.committed_at,
            };
            let made = items_for_parts(&parts, &self.target, table);
            // A redrive makes the item again by parsing the line: it must come out the same.
            debug_assert_eq!(
                made.as_ref().ok(),
                items_for_event(
                    &body[span.event.clone()],
                    span.push_version,
                    &self.target,
                    &self.tables
                )
                .as_ref()
                .ok(),
            );
            match made {
                Ok(items) => {
                    for item in items {
                        batch.items.push(item);
                        batch.origin.push(i);
                    }
                }
                Err(ItemError::Render(e)) => batch.unrenderable.push(dead_letter(
                    &body[span.event.clone()],
                    span.push_version,
                    None,
                    UNRENDERABLE,
                    &e.to_string(),
                )),
                Err(e) => return Err(BatchError::Fatal(e.to_string())),
            }
        }
        batch.body = body;
        batch.read_time = started.elapsed();
        Ok(batch)
    }
}

/// A dead letter of an event whose change set pushes external `version`: a redrive
/// sends it with that version.
fn dead_letter(
    line: &[u8],
    version: i64,
    item: Option<&BulkItem>,
    error_type: &str,
    reason: &str,
) -> NewDeadLetter {
    let event: serde_json::Value = serde_json::from_slice(line).unwrap_or_default();
    NewDeadLetter {
        position: event["position"].as_str().unwrap_or_default().to_string(),
        version,
        index_name: item.map(|i| i.index.clone()),
        document_id: item.map(|i| i.id.clone()),
        event,
        error_type: error_type.to_string(),
        reason: reason.to_string(),
    }
}
