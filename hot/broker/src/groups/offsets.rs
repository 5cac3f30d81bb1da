//! Committed offsets and group membership written to an offsets partition: group
//! commit (one append and one replica wait for every commit queued meanwhile), and the
//! deletion of expired offsets (KIP-211).

use std::sync::Arc;

use bytes::Bytes;
use strata_proto::ErrorCode;
use tokio::sync::oneshot;

use super::{Groups, OFFSETS_TOPIC, Shard};
use crate::error::ApiError;

/// What to do to the shard once a commit's records are durable.
pub(crate) type Apply = Box<dyn FnOnce(&mut Shard) + Send>;

/// One commit's records, its shard update, and where its result goes.
type QueuedRecords = (
    Vec<(Bytes, Option<Bytes>)>,
    Option<Apply>,
    oneshot::Sender<Result<(), (ErrorCode, String)>>,
);

/// Work queued for an offsets partition's appender.
pub(super) enum Item {
    Records {
        records: Vec<(Bytes, Option<Bytes>)>,
        apply: Option<Apply>,
        tx: oneshot::Sender<Result<(), (ErrorCode, String)>>,
    },
}

impl Groups {
    /// Appends records to offsets partition `partition` as its leader and waits until
    /// every in-sync replica has them, then runs `apply` on the partition's shard.
    /// Group commit: while one append of a partition is in flight, the records of other
    /// commits queue, and the next append takes them all in one batch (one write, one
    /// wait for the replicas). The shard sees commits in log order.
    pub(crate) async fn append_offsets_records(
        self: &Arc<Self>,
        partition: i32,
        records: Vec<(Bytes, Option<Bytes>)>,
        apply: Option<Apply>,
    ) -> Result<(), ApiError> {
        let (tx, rx) = oneshot::channel();
        self.enqueue_offsets(partition, Item::Records { records, apply, tx });
        match rx.await {
            Ok(r) => r.map_err(|(code, message)| ApiError::new(code, message)),
            Err(_) => Err(ApiError::new(
                ErrorCode::CoordinatorNotAvailable,
                "the commit was abandoned; retry",
            )),
        }
    }

    fn enqueue_offsets(self: &Arc<Self>, partition: i32, item: Item) {
        let lead = {
            let mut q = self.appends.lock().unwrap_or_else(|e| e.into_inner());
            let (queued, busy) = q.entry(partition).or_default();
            queued.push(item);
            !std::mem::replace(busy, true)
        };
        if lead {
            // Its own task: a request dropped mid-append (its client went away) must not
            // strand the commits queued behind it.
            let groups = self.clone();
            tokio::spawn(async move { groups.flush_offsets(partition).await });
        }
    }

    async fn flush_offsets(self: Arc<Self>, partition: i32) {
        loop {
            let items: Vec<Item> = {
                let mut q = self.appends.lock().unwrap_or_else(|e| e.into_inner());
                let (queued, busy) = q.entry(partition).or_default();
                if queued.is_empty() {
                    *busy = false;
                    return;
                }
                std::mem::take(queued)
            };
            let run = items
                .into_iter()
                .map(|Item::Records { records, apply, tx }| (records, apply, tx))
                .collect();
            self.flush_run(partition, run).await;
        }
    }

    /// Appends a run of commits as one batch, applies them to the shard in order, and
    /// answers them.
    async fn flush_run(&self, partition: i32, run: Vec<QueuedRecords>) {
        if run.is_empty() {
            return;
        }
        let mut records = Vec::new();
        let mut applies = Vec::new();
        let mut waiters = Vec::new();
        for (r, a, tx) in run {
            records.extend(r);
            applies.extend(a);
            waiters.push(tx);
        }
        let result = self
            .append_offsets_batch(partition, records)
            .await
            .map(|_| ())
            .map_err(|e| (e.code, e.message));
        if result.is_ok() {
            // Durable either way; a shard gone meanwhile is reloaded from the log.
            let _ = self.with_shard(partition, |s| {
                for a in applies {
                    a(s);
                }
            });
        }
        for w in waiters {
            let _ = w.send(result.clone());
        }
    }

    /// KIP-211: deletes the committed offsets of offsets partition `partition` that have
    /// expired (its groups empty for `--offsets-retention`, or standalone commits that
    /// old) with tombstones, and the groups left with none.
    pub(super) async fn expire_offsets(
        self: &Arc<Self>,
        partition: i32,
        now: i64,
    ) -> Result<usize, ApiError> {
        let retention = self.config.offsets_retention.as_millis() as i64;
        let expired =
            self.with_shard(partition, |s| s.coordinator.expired_offsets(now, retention))?;
        if expired.is_empty() {
            return Ok(0);
        }
        let mut records = Vec::new();
        for e in &expired {
            for (t, p, _) in &e.offsets {
                records.push((strata_group::offset_tombstone(&e.group_id, t, *p), None));
            }
            if e.group {
                records.push((strata_group::group_tombstone(&e.group_id), None));
            }
        }
        let n = records.len();
        let apply: Apply = Box::new(move |s| s.coordinator.remove_expired(&expired));
        self.append_offsets_records(partition, records, Some(apply))
            .await?;
        Ok(n)
    }

    /// Appends one batch as leader and waits for the in-sync replicas; returns its first
    /// offset.
    async fn append_offsets_batch(
        &self,
        partition: i32,
        records: Vec<(Bytes, Option<Bytes>)>,
    ) -> Result<i64, ApiError> {
        let p = self
            .replicas
            .partition(OFFSETS_TOPIC, partition)
            .filter(|p| p.is_leader())
            .ok_or_else(|| ApiError::new(ErrorCode::NotCoordinator, "not the coordinator"))?;
        let waited = crate::coordinator::append_and_wait(&p, &*self.clock, records)
            .await
            .map_err(|e| {
                ApiError::new(
                    if e.is_retriable() {
                        ErrorCode::CoordinatorNotAvailable
                    } else {
                        e.error_code()
                    },
                    e.to_string(),
                )
            })?;
        match waited {
            Ok(first_offset) => Ok(first_offset),
            Err(ErrorCode::NotLeaderOrFollower) => Err(ApiError::new(
                ErrorCode::NotCoordinator,
                "leadership of the group's offsets moved",
            )),
            Err(ErrorCode::RequestTimedOut) => Err(ApiError::new(
                ErrorCode::RequestTimedOut,
                "the commit was not replicated in time",
            )),
            Err(code) => Err(ApiError::new(code, "the commit was not replicated")),
        }
    }
}
