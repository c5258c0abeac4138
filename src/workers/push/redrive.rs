//! Redrives: dead letters the API queued are sent again by the node holding the
//! subscription's lease, between its batches, with its client, retry policy and stop
//! token — so that a redrive never races the subscription's own pushes from another
//! node, and shutdown or a lost lease cancels it.
//! Must not reach: `api` (the API only queues redrives).

use tokio_util::sync::CancellationToken;

use super::{BatchError, Pusher};
use crate::delivery::opensearch::ItemOutcome;
use crate::delivery::push::{UNRENDERABLE, items_for_event, send_items};

/// Dead letters sent per redrive round.
const REDRIVE_BATCH: i64 = 500;

impl Pusher {
    /// Sends one round of queued dead letters and settles them: those that went through
    /// (or that OpenSearch holds in a newer version) are forgotten, those refused again
    /// keep the new reason. How many were sent.
    pub async fn redrive_queued(&self, cancel: &CancellationToken) -> Result<usize, BatchError> {
        let store = self.reader.feed.store();
        let letters = store.queued_redrives(self.reader.id, REDRIVE_BATCH).await?;
        if letters.is_empty() {
            return Ok(0);
        }
        let (mut items, mut sent, mut again) = (Vec::new(), Vec::new(), Vec::new());
        for letter in &letters {
            let line = serde_json::to_vec(&letter.event).expect("JSON values serialize");
            match items_for_event(
                &line,
                letter.version,
                &self.reader.target,
                &self.reader.tables,
            ) {
                Ok(made) => {
                    for item in made {
                        items.push(item);
                        sent.push(letter.id);
                    }
                }
                // Its own problem, not the subscription's: it stays, saying why.
                Err(e) => again.push((letter.id, UNRENDERABLE.to_string(), e.to_string())),
            }
        }
        let outcomes = send_items(
            &self.client,
            &self.reader.target,
            &items,
            &self.policy,
            cancel,
        )
        .await?;
        // A letter is resolved when every item of its event went through (an update that
        // moves its document is two).
        let mut resolved = Vec::new();
        for (id, outcome) in sent.into_iter().zip(outcomes) {
            let refused = |again: &[(_, String, String)]| again.iter().any(|a| a.0 == id);
            match outcome {
                ItemOutcome::Applied | ItemOutcome::AlreadyApplied => {
                    if !resolved.contains(&id) && !refused(&again) {
                        resolved.push(id);
                    }
                }
                ItemOutcome::Rejected(e) => {
                    resolved.retain(|r| *r != id);
                    if !refused(&again) {
                        again.push((id, e.error_type, e.reason));
                    }
                }
            }
        }
        store
            .settle_redrive(&self.lease, self.reader.id, &resolved, &again)
            .await?;
        tracing::info!(
            subscription = %self.name, sent = letters.len(), resolved = resolved.len(),
            "redrove dead letters"
        );
        Ok(letters.len())
    }
}
