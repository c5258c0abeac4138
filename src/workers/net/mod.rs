//! Net changes of a range of a table's feed, as tasks any node can run. Every change set
//! is the exact difference between its parent and its snapshot, so the before images of
//! a range's events, taken away, and its after images, added, telescope into the
//! difference between the range's ends. Net map tasks read the range's segments and hash
//! each image, tagged with its change set's ordinal, by key into buckets; net reduce
//! tasks cancel identical rows and pair what is left by key ([`super::shuffle`]'s
//! carryover and pairing), and write the result's segments, each event tagged with the
//! last change set that touched its key.
//!
//! No node waits on the tasks: whoever sees one step's tasks all done plans the next
//! ([`advance`]): the node that completed a task, a consumer asking for the range, and
//! every node's janitor pass, so a node that dies loses nothing.
//!
//! Must not reach: `catalog` (a range is computed from the change store alone).

mod map;
mod reduce;

use serde::{Deserialize, Serialize};

pub use map::run_net_map;
pub use reduce::run_net_reduce;

use super::shuffle::{BucketFile, bucket_count, reduce_inputs};
use crate::changes::{NetRangeKey, ShuffleKey};
use crate::config::SchedulerSettings;
use crate::failure::FailureCode;
use crate::store::{NetRange, NetSegment, NetState, SegmentRecord, Store, StoreError, TaskKind};

/// Map tasks a range is split into when it has enough segments, so that every task
/// worker gets a share.
const MAP_TASKS: u64 = 8;

/// Events of one segment a net map task reads: `offset .. offset + count`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct NetInput {
    pub segment: SegmentRecord,
    pub offset: usize,
    pub count: usize,
}

/// Input of a net map task: consecutive segments of the range.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct NetMapTask {
    pub schema_id: i32,
    /// Columns images are hashed and paired on; empty: whole rows, unpaired.
    pub key: Vec<usize>,
    pub buckets: u32,
    pub inputs: Vec<NetInput>,
}

/// What a net map task reports: its buckets, and what the reduce tasks need to know.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct NetMapResult {
    pub schema_id: i32,
    pub key: Vec<usize>,
    pub images: i64,
    pub buckets: Vec<BucketFile>,
}

/// Input of a net reduce task: every map output of a run of buckets.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct NetReduceTask {
    /// Position of the task's events in the result.
    pub n: usize,
    pub schema_id: i32,
    pub key: Vec<usize>,
    pub inputs: Vec<BucketFile>,
}

/// What a net reduce task reports: the segment it wrote, if it had any events.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct NetReduceResult {
    pub events: i64,
    pub path: Option<String>,
    pub size: i64,
    /// What its events take decoded (unknown for results of earlier versions).
    #[serde(default)]
    pub decoded: Option<i64>,
}

/// The events of `segment` between `range`'s ends: (offset, count) in the segment.
fn clip(segment: &SegmentRecord, range: &NetRange) -> (usize, usize) {
    let (first, end) = (
        segment.first_event,
        segment.first_event + segment.event_count,
    );
    let from = if segment.ordinal == range.after.ordinal {
        range.after.consumed.clamp(first, end)
    } else {
        first
    };
    let to = if segment.ordinal == range.until.ordinal {
        range.until.consumed.clamp(from, end)
    } else {
        end
    };
    ((from - first) as usize, (to - from) as usize)
}

/// Plans the map tasks of a range. A range without events is ready at once. Planning
/// again is a no-op (the same segments make the same tasks, under the same ids).
async fn plan(
    store: &Store,
    settings: &SchedulerSettings,
    range: &NetRange,
) -> Result<(), StoreError> {
    let segments = store
        .segments_between(range.key.table, range.after, range.until)
        .await?;
    let inputs: Vec<NetInput> = segments
        .into_iter()
        .map(|segment| {
            let (offset, count) = clip(&segment, range);
            NetInput {
                segment,
                offset,
                count,
            }
        })
        .filter(|i| i.count > 0)
        .collect();
    if inputs.is_empty() {
        return store.finish_net_range(&range.key, &[]).await;
    }
    let stored: u64 = inputs.iter().map(|i| i.segment.size_bytes as u64).sum();
    let buckets = bucket_count(
        settings.shuffle_buckets,
        stored,
        settings.reduce_target_bytes,
    );
    let target = stored.div_ceil(MAP_TASKS);
    let mut tasks: Vec<NetMapTask> = Vec::new();
    let mut bytes = 0u64;
    for input in inputs {
        let size = input.segment.size_bytes as u64;
        match tasks.last_mut() {
            Some(last) if bytes + size <= target => last.inputs.push(input),
            _ => {
                bytes = 0;
                tasks.push(NetMapTask {
                    schema_id: range.schema_id,
                    key: range.key_columns.clone(),
                    buckets,
                    inputs: vec![input],
                })
            }
        }
        bytes += size;
    }
    let tasks: Vec<(String, serde_json::Value)> = tasks
        .iter()
        .enumerate()
        .map(|(n, t)| (range.key.task_id(TaskKind::NetMap, n), to_json(t)))
        .collect();
    store
        .create_tasks(&range.key, TaskKind::NetMap, &tasks)
        .await
}

/// Moves a computing range on by one step if it can: plans its map tasks if none are
/// (a new range, or one whose creator died before planning it), its reduce tasks once
/// its map tasks are done, records its result once its reduce tasks are, and its failure
/// once a task failed for good. Safe to call from any node at any time.
pub async fn advance(
    store: &Store,
    settings: &SchedulerSettings,
    range: &NetRange,
) -> Result<(), StoreError> {
    if range.state != NetState::Computing {
        return Ok(());
    }
    let key = &range.key;
    let maps = store.task_progress(key, TaskKind::NetMap).await?;
    if maps.planned == 0 {
        return plan(store, settings, range).await;
    }
    let reduces = store.task_progress(key, TaskKind::NetReduce).await?;
    if let Some(failed) = maps.failed.or(reduces.failed) {
        return store.fail_net_range(key, &failed.failure).await;
    }
    if maps.done < maps.planned {
        return Ok(());
    }
    if reduces.planned == 0 {
        let results: Vec<NetMapResult> = results(store, key, TaskKind::NetMap).await?;
        let Some(first) = results.first() else {
            return Ok(());
        };
        let buckets = results.iter().flat_map(|r| r.buckets.iter().cloned());
        let tasks: Vec<(String, serde_json::Value)> =
            reduce_inputs(buckets, settings.reduce_target_bytes)
                .into_iter()
                .enumerate()
                .map(|(n, inputs)| {
                    let task = NetReduceTask {
                        n,
                        schema_id: first.schema_id,
                        key: first.key.clone(),
                        inputs,
                    };
                    (key.task_id(TaskKind::NetReduce, n), to_json(&task))
                })
                .collect();
        if tasks.is_empty() {
            return store.finish_net_range(key, &[]).await;
        }
        return store.create_tasks(key, TaskKind::NetReduce, &tasks).await;
    }
    if reduces.done < reduces.planned {
        return Ok(());
    }
    let outputs: Vec<NetReduceResult> = results(store, key, TaskKind::NetReduce).await?;
    let mut first_event = 0;
    let segments: Vec<NetSegment> = outputs
        .into_iter()
        .filter_map(|r| Some((r.path?, r.events, r.size, r.decoded)))
        .enumerate()
        .map(|(n, (path, events, size, decoded))| {
            let segment = NetSegment {
                segment_no: n as i32,
                first_event,
                event_count: events,
                path,
                size_bytes: size,
                decoded_bytes: decoded,
            };
            first_event += events;
            segment
        })
        .collect();
    store.finish_net_range(key, &segments).await
}

/// The results of the tasks of `kind` of range `key`, in task order; a result that does
/// not parse fails the range.
async fn results<T: for<'de> Deserialize<'de>>(
    store: &Store,
    key: &NetRangeKey,
    kind: TaskKind,
) -> Result<Vec<T>, StoreError> {
    let tasks = store.tasks_of(key, kind).await?;
    let mut parsed = Vec::with_capacity(tasks.len());
    for task in tasks {
        match serde_json::from_value(task.result.unwrap_or_default()) {
            Ok(result) => parsed.push(result),
            Err(e) => {
                let failure = crate::failure::Failure::new(
                    FailureCode::Internal,
                    format!("task {}: {e}", task.id),
                );
                store.fail_net_range(key, &failure).await?;
                return Ok(Vec::new());
            }
        }
    }
    Ok(parsed)
}

fn to_json<T: Serialize>(value: &T) -> serde_json::Value {
    serde_json::to_value(value).expect("task payloads serialize")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::changes::Position;
    use crate::store::TableId;

    fn segment(ordinal: i64, first_event: i64, event_count: i64) -> SegmentRecord {
        SegmentRecord {
            ordinal,
            segment_no: 0,
            first_event,
            event_count,
            layout: "changes".into(),
            path: String::new(),
            size_bytes: 1,
            decoded_bytes: None,
            deleted_rows: None,
            first_row_id: None,
            lineage_sequence_number: None,
            snapshot_id: 1,
            sequence_number: 1,
            committed_at: chrono::Utc::now(),
            schema_id: 0,
            push_version: 1,
        }
    }

    #[test]
    fn segments_are_clipped_to_the_range() {
        let p = |ordinal, consumed| Position { ordinal, consumed };
        let range = NetRange {
            key: NetRangeKey {
                table: TableId::new(),
                range: 1,
            },
            after: p(2, 5),
            until: p(4, 12),
            schema_id: 0,
            key_columns: vec![0],
            state: NetState::Computing,
        };
        // Change set 2: events 0..10 in one segment, of which the first 5 are before.
        assert_eq!(clip(&segment(2, 0, 10), &range), (5, 5));
        // A later segment of change set 2, wholly inside.
        assert_eq!(clip(&segment(2, 10, 10), &range), (0, 10));
        // Change set 3: wholly inside.
        assert_eq!(clip(&segment(3, 0, 7), &range), (0, 7));
        // Change set 4: events 10..20, of which 10 and 11 are inside.
        assert_eq!(clip(&segment(4, 10, 10), &range), (0, 2));
        // Change set 4: events 20..30, all after the end.
        assert_eq!(clip(&segment(4, 20, 10).clone(), &range).1, 0);
        // One change set holding both ends.
        let within = NetRange {
            after: p(3, 2),
            until: p(3, 4),
            ..range
        };
        assert_eq!(clip(&segment(3, 0, 7), &within), (2, 2));
    }
}
