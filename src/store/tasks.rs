//! Tasks: claimed with `FOR UPDATE SKIP LOCKED`, leased with an expiry and an epoch,
//! retried a bounded number of times.
//! Must not reach: `changelog`, `workers` (PostgreSQL only).

use std::time::Duration;

use super::task_signals::{TaskEvent, announce};
use super::{Store, StoreError, TableId, TaskKind};
use crate::changes::{ChangeSetKey, NetRangeKey, ShuffleKey};
use crate::failure::{Failure, FailureCode};

/// A task this node claimed.
#[derive(Clone, Debug)]
pub struct ClaimedTask {
    pub id: String,
    pub table_id: TableId,
    pub snapshot_id: i64,
    /// The change set the task computes, by the ordinal it will be published at.
    pub ordinal: i64,
    pub kind: String,
    pub payload: serde_json::Value,
    pub attempts: i32,
    pub owner: String,
    pub epoch: i64,
    /// The net range the task computes, if it is one's.
    pub net_range: Option<i64>,
}

impl ClaimedTask {
    /// The change set the task computes.
    pub fn key(&self) -> ChangeSetKey {
        ChangeSetKey {
            table: self.table_id,
            ordinal: self.ordinal,
            snapshot_id: self.snapshot_id,
        }
    }

    /// The key of its shuffle file `name`, under what it computes.
    pub fn shuffle_file(&self, name: &str) -> String {
        match self.net_key() {
            Some(net) => net.shuffle_file(&self.id, name),
            None => self.key().shuffle_file(&self.id, name),
        }
    }

    /// The net range the task computes, if it is one's.
    pub fn net_key(&self) -> Option<NetRangeKey> {
        self.net_range.map(|range| NetRangeKey {
            table: self.table_id,
            range,
        })
    }
}

/// What a group of tasks computes: a change set, or a net range (whose tasks have ordinal
/// and snapshot 0, since change sets start at ordinal 1).
#[derive(Clone, Copy, Debug)]
pub struct TaskScope {
    table: TableId,
    ordinal: i64,
    snapshot_id: i64,
    net_range: Option<i64>,
}

impl From<&ChangeSetKey> for TaskScope {
    fn from(key: &ChangeSetKey) -> Self {
        Self {
            table: key.table,
            ordinal: key.ordinal,
            snapshot_id: key.snapshot_id,
            net_range: None,
        }
    }
}

impl From<&NetRangeKey> for TaskScope {
    fn from(key: &NetRangeKey) -> Self {
        Self {
            table: key.table,
            ordinal: 0,
            snapshot_id: 0,
            net_range: Some(key.range),
        }
    }
}

/// A task as its coordinator sees it.
#[derive(Clone, Debug)]
pub struct TaskStatus {
    pub id: String,
    pub state: String,
    pub result: Option<serde_json::Value>,
    pub error: Option<String>,
}

/// Where the tasks of one kind of a change set stand.
#[derive(Debug)]
pub struct TaskProgress {
    pub planned: i64,
    pub done: i64,
    pub failed: Option<TaskFailure>,
}

/// Why a task failed for good.
#[derive(Debug)]
pub struct TaskFailure {
    pub failure: Failure,
    /// The data is wrong, or the task kept killing its workers: retrying the snapshot
    /// will not help. Otherwise its attempts ran out on passing failures.
    pub permanent: bool,
}

impl Store {
    /// Creates tasks of `scope` unless they exist (same ids: planning again is a no-op).
    /// A net range's are created only while it is being computed, so that a node planning
    /// late cannot revive the tasks of a range another node finished.
    pub async fn create_tasks(
        &self,
        scope: impl Into<TaskScope>,
        kind: TaskKind,
        tasks: &[(String, serde_json::Value)],
    ) -> Result<(), StoreError> {
        let key = scope.into();
        let (ids, payloads): (Vec<String>, Vec<serde_json::Value>) = tasks.iter().cloned().unzip();
        sqlx::query!(
            "INSERT INTO tasks (id, table_id, snapshot_id, ordinal, kind, payload, net_range) \
             SELECT u.id, $1, $2, $3, $4, u.payload, $7 \
               FROM unnest($5::text[], $6::jsonb[]) AS u(id, payload) \
              WHERE $7::bigint IS NULL OR EXISTS ( \
                    SELECT 1 FROM net_ranges WHERE id = $7 AND state = 'computing') \
             ON CONFLICT (id) DO NOTHING",
            key.table.0,
            key.snapshot_id,
            key.ordinal,
            kind.as_str(),
            &ids,
            &payloads,
            key.net_range
        )
        .execute(&self.pool)
        .await?;
        self.signal_tasks(TaskEvent::Created).await
    }

    /// Wakes this node's waiters for `event` at once, and every node's once PostgreSQL
    /// delivers the announcement.
    async fn signal_tasks(&self, event: TaskEvent) -> Result<(), StoreError> {
        self.tasks.signal(event);
        announce(&self.pool, event).await
    }

    /// Claims the oldest task that is pending or whose holder's lease expired. Tasks that
    /// used up `max_attempts` are failed instead of claimed again.
    pub async fn claim_task(
        &self,
        owner: &str,
        ttl: Duration,
        max_attempts: i32,
    ) -> Result<Option<ClaimedTask>, StoreError> {
        sqlx::query!(
            "UPDATE tasks SET state = 'failed', permanent = true, \
               error_code = CASE WHEN error IS NULL THEN 'worker_lost' ELSE error_code END, \
               error = coalesce(error, 'its worker stopped answering ' || attempts || ' times') \
             WHERE state = 'running' AND expires_at <= now() AND attempts >= $1",
            max_attempts
        )
        .execute(&self.pool)
        .await?;
        // `owner!`: the column is nullable, but the claim has just set it.
        Ok(sqlx::query_as!(
            ClaimedTask,
            r#"UPDATE tasks t SET state = 'running', owner = $1, epoch = t.epoch + 1,
                      attempts = t.attempts + 1, expires_at = now() + make_interval(secs => $2)
                WHERE t.id = (SELECT id FROM tasks
                               WHERE (state = 'pending'
                                      AND (not_before IS NULL OR not_before <= now()))
                                  OR (state = 'running' AND expires_at <= now())
                               ORDER BY created_at, id LIMIT 1 FOR UPDATE SKIP LOCKED)
            RETURNING t.id, t.table_id AS "table_id: TableId", t.snapshot_id, t.ordinal, t.kind,
                      t.payload, t.attempts, t.owner AS "owner!", t.epoch, t.net_range"#,
            owner,
            ttl.as_secs_f64()
        )
        .fetch_optional(&self.pool)
        .await?)
    }

    /// Extends a claimed task's lease; `LeaseLost` when another node took it over.
    pub async fn renew_task(&self, task: &ClaimedTask, ttl: Duration) -> Result<(), StoreError> {
        let done = sqlx::query!(
            "UPDATE tasks SET expires_at = now() + make_interval(secs => $4) \
             WHERE id = $1 AND owner = $2 AND epoch = $3 AND state = 'running'",
            task.id,
            task.owner,
            task.epoch,
            ttl.as_secs_f64()
        )
        .execute(&self.pool)
        .await?;
        match done.rows_affected() {
            1 => Ok(()),
            _ => Err(StoreError::LeaseLost(task.id.clone())),
        }
    }

    /// Records a task's result, unless another node took the task over meanwhile.
    pub async fn complete_task(
        &self,
        task: &ClaimedTask,
        result: &serde_json::Value,
    ) -> Result<(), StoreError> {
        let done = sqlx::query!(
            "UPDATE tasks SET state = 'done', result = $4, error = NULL, expires_at = NULL \
             WHERE id = $1 AND owner = $2 AND epoch = $3 AND state = 'running'",
            task.id,
            task.owner,
            task.epoch,
            result
        )
        .execute(&self.pool)
        .await?;
        match done.rows_affected() {
            1 => self.signal_tasks(TaskEvent::Settled).await,
            _ => Err(StoreError::LeaseLost(task.id.clone())),
        }
    }

    /// Records a failure: the task is retried while attempts remain, unless `permanent`.
    pub async fn fail_task(
        &self,
        task: &ClaimedTask,
        failure: &Failure,
        permanent: bool,
        max_attempts: i32,
    ) -> Result<(), StoreError> {
        // Attempt n waits 2^(n-1) seconds (at most a minute) before the next one.
        sqlx::query!(
            "UPDATE tasks SET error = $4, error_code = $7, expires_at = NULL, permanent = $5, \
               state = CASE WHEN $5 OR attempts >= $6 THEN 'failed' ELSE 'pending' END, \
               not_before = now() + make_interval(secs => least(60, 2 ^ (attempts - 1))) \
             WHERE id = $1 AND owner = $2 AND epoch = $3 AND state = 'running'",
            task.id,
            task.owner,
            task.epoch,
            failure.message,
            permanent,
            max_attempts,
            failure.code.as_str()
        )
        .execute(&self.pool)
        .await?;
        self.signal_tasks(TaskEvent::Settled).await
    }

    /// How many tasks of one kind of `scope` there are and are done, and the failure of
    /// a failed one: cheap enough to ask every few milliseconds.
    pub async fn task_progress(
        &self,
        scope: impl Into<TaskScope>,
        kind: TaskKind,
    ) -> Result<TaskProgress, StoreError> {
        let key = scope.into();
        // One failed task speaks for the change set: a permanent one if there is one.
        let row = sqlx::query!(
            r#"SELECT count(*) AS "planned!", count(*) FILTER (WHERE state = 'done') AS "done!",
                      (array_agg(coalesce(error, 'failed') ORDER BY permanent DESC, id)
                         FILTER (WHERE state = 'failed'))[1] AS error,
                      (array_agg(error_code ORDER BY permanent DESC, id)
                         FILTER (WHERE state = 'failed'))[1] AS code,
                      bool_or(permanent) FILTER (WHERE state = 'failed') AS permanent
                 FROM tasks
                WHERE table_id = $1 AND ordinal = $2 AND snapshot_id = $3 AND kind = $4
                  AND net_range IS NOT DISTINCT FROM $5"#,
            key.table.0,
            key.ordinal,
            key.snapshot_id,
            kind.as_str(),
            key.net_range
        )
        .fetch_one(&self.pool)
        .await?;
        Ok(TaskProgress {
            planned: row.planned,
            done: row.done,
            failed: row.error.map(|message| TaskFailure {
                failure: Failure::new(
                    row.code
                        .as_deref()
                        .and_then(FailureCode::parse)
                        .unwrap_or(FailureCode::Internal),
                    message,
                ),
                permanent: row.permanent.unwrap_or(false),
            }),
        })
    }

    /// The tasks of one kind of `scope`, by id.
    pub async fn tasks_of(
        &self,
        scope: impl Into<TaskScope>,
        kind: TaskKind,
    ) -> Result<Vec<TaskStatus>, StoreError> {
        let key = scope.into();
        Ok(sqlx::query_as!(
            TaskStatus,
            "SELECT id, state, result, error FROM tasks \
             WHERE table_id = $1 AND ordinal = $2 AND snapshot_id = $3 AND kind = $4 \
               AND net_range IS NOT DISTINCT FROM $5 \
             ORDER BY id",
            key.table.0,
            key.ordinal,
            key.snapshot_id,
            kind.as_str(),
            key.net_range
        )
        .fetch_all(&self.pool)
        .await?)
    }

    /// Forgets the tasks of change set `key` (to plan it afresh).
    pub async fn delete_change_set_tasks(&self, key: &ChangeSetKey) -> Result<(), StoreError> {
        sqlx::query!(
            "DELETE FROM tasks WHERE table_id = $1 AND ordinal = $2 AND snapshot_id = $3",
            key.table.0,
            key.ordinal,
            key.snapshot_id
        )
        .execute(&self.pool)
        .await?;
        Ok(())
    }
}
