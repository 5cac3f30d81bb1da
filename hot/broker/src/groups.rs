//! The broker's side of consumer groups: one [`GroupCoordinator`] per partition of
//! `__consumer_offsets` this broker leads, loaded from that partition's log when it
//! becomes leader and dropped when it stops leading; committed offsets are appended to
//! the partition (acks=all) before they are acknowledged, so they are durable and
//! replicated like data. The partitions are compacted (cleanup.policy=compact, the
//! broker's log cleaner), which keeps each partition to its live state plus what was
//! written since the last pass; offsets of groups that have been empty for
//! `--offsets-retention` are deleted with tombstones (KIP-211).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use strata_group::{Completion, GroupConfig, GroupCoordinator};
use strata_proto::batch::build::{NewRecord, batch};
use strata_proto::{Compression, ErrorCode};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use crate::broker::Broker;
use crate::error::ApiError;
use crate::partition::Partition;

pub const OFFSETS_TOPIC: &str = "__consumer_offsets";

/// The coordinator of the groups of one offsets partition.
pub(crate) struct Shard {
    pub coordinator: GroupCoordinator,
    /// Requests waiting for a rebalance to finish, by ticket.
    waiters: HashMap<u64, oneshot::Sender<Completion>>,
    /// The leader epoch the shard was loaded in.
    epoch: i32,
}

impl Shard {
    /// Every committed offset of every group: (group, topic, partition, offset).
    pub fn live_offsets(&self) -> Vec<(String, String, i32, strata_group::CommittedOffset)> {
        self.coordinator
            .list_groups()
            .into_iter()
            .flat_map(|(g, _, _)| {
                self.coordinator
                    .offsets(&g)
                    .into_iter()
                    .map(move |(t, p, c)| (g.clone(), t, p, c))
            })
            .collect()
    }

    /// Hands finished long polls to their waiting requests.
    pub fn deliver(&mut self, completions: Vec<Completion>) {
        for c in completions {
            let ticket = match &c {
                Completion::Join(t, _) | Completion::Sync(t, _) => *t,
            };
            if let Some(tx) = self.waiters.remove(&ticket) {
                let _ = tx.send(c);
            }
        }
    }

    /// Registers a request waiting for its answer.
    pub fn wait(&mut self, ticket: u64) -> oneshot::Receiver<Completion> {
        let (tx, rx) = oneshot::channel();
        self.waiters.insert(ticket, tx);
        rx
    }
}

#[derive(Default)]
pub struct Groups {
    shards: Mutex<HashMap<i32, Shard>>,
    /// Wakes the coordinator loop at once when metadata changed (an offsets partition
    /// led here now): clients asking meanwhile get COORDINATOR_LOAD_IN_PROGRESS, and
    /// librdkafka gives a commit only a few quick retries.
    wake: tokio::sync::Notify,
    /// Told whenever shards were loaded (a request waiting for its group's load).
    loads: tokio::sync::Notify,
    tickets: AtomicU64,
    /// Per offsets partition: commits waiting for the next append, and whether an
    /// append is in flight.
    appends: Mutex<HashMap<i32, (Vec<Item>, bool)>>,
    /// Per (group, topic, partition): recent (time, lag age) samples, for the trend
    /// behind the time to the retention edge.
    lag_history: Mutex<HashMap<GroupPartition, std::collections::VecDeque<(i64, i64)>>>,
    /// The lag figures last exported, rendered into /metrics by
    /// [`Groups::render_lag_metrics`]: only the (group, partition) pairs that still exist,
    /// where gauges registered with the metrics crate would stay forever.
    exported_lag: Mutex<Vec<Lag>>,
}

/// (group, topic, partition).
type GroupPartition = (String, String, i32);

/// What to do to the shard once a commit's records are durable.
pub(crate) type Apply = Box<dyn FnOnce(&mut Shard) + Send>;

/// One commit's records, its shard update, and where its result goes.
type QueuedRecords = (
    Vec<(Bytes, Option<Bytes>)>,
    Option<Apply>,
    oneshot::Sender<Result<(), (ErrorCode, String)>>,
);

/// Work queued for an offsets partition's appender.
enum Item {
    Records {
        records: Vec<(Bytes, Option<Bytes>)>,
        apply: Option<Apply>,
        tx: oneshot::Sender<Result<(), (ErrorCode, String)>>,
    },
}

/// One partition's lag for one group.
#[derive(Clone, Debug, PartialEq)]
pub struct Lag {
    pub group: String,
    pub topic: String,
    pub partition: i32,
    pub committed: i64,
    pub log_start: i64,
    pub log_end: i64,
    /// Records between the committed offset and the high-water mark.
    pub records: i64,
    /// Bytes those records take in the log, estimated from the partition's local
    /// average record size.
    pub bytes: i64,
    /// How old the oldest unconsumed record is (ms); 0 when caught up, `None` when its
    /// record is not on local disk.
    pub age_ms: Option<i64>,
    /// How long until the group's position falls out of retention at the current
    /// trend of its lag's age (ms); `None` for never (flat or shrinking lag, or
    /// unbounded retention).
    pub headroom_ms: Option<i64>,
    /// The committed offset is below the log start: the records it pointed at are gone.
    pub out_of_retention: bool,
}

/// The window over which the lag's age trend is measured.
const TREND_WINDOW_MS: i64 = 5 * 60 * 1000;

/// Time until the position falls out of retention: the age grows at `rate` (ms of age
/// per ms, 1.0 for a stopped group) from `age` towards `retention_ms`.
pub fn retention_headroom(age_ms: i64, retention_ms: i64, rate: f64) -> Option<i64> {
    if retention_ms < 0 || rate <= 0.0 {
        return None;
    }
    Some((((retention_ms - age_ms).max(0)) as f64 / rate) as i64)
}

impl std::fmt::Debug for Groups {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Groups")
            .field("loaded", &self.loaded())
            .finish_non_exhaustive()
    }
}

impl Groups {
    pub(crate) fn ticket(&self) -> u64 {
        self.tickets.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Runs `f` on the shard of offsets partition `partition`, or answers
    /// NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS.
    pub(crate) fn with_shard<T>(
        &self,
        broker: &Broker,
        partition: i32,
        f: impl FnOnce(&mut Shard) -> T,
    ) -> Result<T, ApiError> {
        let mut shards = self.shards.lock().unwrap_or_else(|e| e.into_inner());
        match shards.get_mut(&partition) {
            Some(s) => Ok(f(s)),
            None => {
                // Leading it, or named its leader by the metadata (becoming leader,
                // or loading): the client should wait, not look elsewhere.
                let leads = broker
                    .partition(OFFSETS_TOPIC, partition)
                    .is_some_and(|p| p.is_leader())
                    || broker
                        .cluster()
                        .topic(OFFSETS_TOPIC)
                        .and_then(|t| t.partition(partition))
                        .is_some_and(|p| p.leader == broker.node_id());
                Err(if leads {
                    ApiError::new(
                        ErrorCode::CoordinatorLoadInProgress,
                        "the group's offsets are loading; retry",
                    )
                } else {
                    ApiError::new(
                        ErrorCode::NotCoordinator,
                        "this broker is not the group's coordinator; find it again",
                    )
                })
            }
        }
    }

    /// Every group this broker coordinates: (id, protocol type, state).
    pub(crate) fn list(&self) -> Vec<(String, String, &'static str)> {
        self.shards
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .flat_map(|s| s.coordinator.list_groups())
            .collect()
    }

    /// The lag of every group this broker coordinates, on the partitions with a
    /// replica here (the figures a lag dashboard and `/metrics` show).
    pub(crate) fn lags(&self, broker: &Broker) -> Vec<Lag> {
        let now = broker.clock.now_ms();
        let committed: Vec<(String, String, i32, i64)> = {
            let shards = self.shards.lock().unwrap_or_else(|e| e.into_inner());
            shards
                .values()
                .flat_map(Shard::live_offsets)
                .map(|(g, t, p, c)| (g, t, p, c.offset))
                .collect()
        };
        let mut history = self.lag_history.lock().unwrap_or_else(|e| e.into_inner());
        // The trend of a (group, partition) no longer committed (a deleted group or
        // topic) is dropped with it.
        let live: std::collections::HashSet<(&str, &str, i32)> = committed
            .iter()
            .map(|(g, t, p, _)| (g.as_str(), t.as_str(), *p))
            .collect();
        history.retain(|(g, t, p), _| live.contains(&(g.as_str(), t.as_str(), *p)));
        drop(live);
        let mut out = Vec::new();
        for (group, topic, index, offset) in committed {
            let Some(p) = broker.partition(&topic, index) else {
                continue;
            };
            let retention_ms = p.config().retention_ms;
            let (start, end) = (p.log_start_offset(), p.high_watermark());
            let records = (end - offset).max(0);
            let age_ms = if records == 0 {
                Some(0)
            } else {
                record_timestamp(&p, offset.max(start)).map(|ts| (now - ts).max(0))
            };
            let key = (group.clone(), topic.clone(), index);
            let samples = history.entry(key).or_default();
            if let Some(age) = age_ms {
                samples.push_back((now, age));
            }
            while samples
                .front()
                .is_some_and(|(t, _)| now - t > TREND_WINDOW_MS)
            {
                samples.pop_front();
            }
            let rate = match (samples.front(), samples.back()) {
                (Some(&(t0, a0)), Some(&(t1, a1))) if t1 - t0 >= 10_000 => {
                    (a1 - a0) as f64 / (t1 - t0) as f64
                }
                // Too little history: a position that has not moved ages at 1 ms/ms.
                _ => {
                    if records > 0 {
                        1.0
                    } else {
                        0.0
                    }
                }
            };
            let headroom_ms = age_ms.and_then(|a| retention_headroom(a, retention_ms, rate));
            let local = (p.log().log_end() - p.log().local_start()).max(1);
            let bytes = (records as f64 * p.log().local_bytes() as f64 / local as f64) as i64;
            out.push(Lag {
                group,
                topic,
                partition: index,
                committed: offset,
                log_start: start,
                log_end: end,
                records,
                bytes,
                age_ms,
                headroom_ms,
                out_of_retention: offset < start,
            });
        }
        out
    }

    /// Appends the last exported lag figures to a Prometheus text exposition:
    /// `strata_group_lag_records`, `strata_group_lag_bytes`, `strata_group_lag_seconds`
    /// and `strata_group_retention_headroom_seconds`, per group, topic and partition.
    pub fn render_lag_metrics(&self, out: &mut String) {
        use std::fmt::Write as _;
        let lags = self.exported_lag.lock().unwrap_or_else(|e| e.into_inner());
        if lags.is_empty() {
            return;
        }
        type Value = fn(&Lag) -> Option<f64>;
        let series: [(&str, &str, Value); 4] = [
            (
                "strata_group_lag_records",
                "Records between the group's committed offset and the high-water mark",
                |l| Some(l.records as f64),
            ),
            (
                "strata_group_lag_bytes",
                "Bytes those records take, from the partition's average record size",
                |l| Some(l.bytes as f64),
            ),
            (
                "strata_group_lag_seconds",
                "Age of the oldest record the group has not consumed",
                |l| l.age_ms.map(|a| a as f64 / 1e3),
            ),
            (
                "strata_group_retention_headroom_seconds",
                "Time until the group's position falls out of retention at its trend",
                // +Inf for never.
                |l| Some(l.headroom_ms.map_or(f64::INFINITY, |h| h as f64 / 1e3)),
            ),
        ];
        for (name, help, value) in series {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
            for l in lags.iter() {
                let Some(v) = value(l) else { continue };
                let v = if v == f64::INFINITY {
                    "+Inf".to_string()
                } else {
                    v.to_string()
                };
                let _ = writeln!(
                    out,
                    "{name}{{group=\"{}\",topic=\"{}\",partition=\"{}\"}} {v}",
                    crate::exposition::escape_label(&l.group),
                    crate::exposition::escape_label(&l.topic),
                    l.partition
                );
            }
        }
    }

    /// A transaction's marker landed in offsets partition `partition` at
    /// `marker_offset`: its pending offset commits are applied or dropped.
    pub(crate) fn complete_txn(
        &self,
        partition: i32,
        producer_id: i64,
        commit: bool,
        marker_offset: i64,
    ) {
        let mut shards = self.shards.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(s) = shards.get_mut(&partition) {
            let done = s
                .coordinator
                .complete_txn(producer_id, commit, marker_offset);
            if !done.is_empty() {
                tracing::debug!(
                    partition,
                    producer_id,
                    commit,
                    offsets = done.len(),
                    "transactional offset commits ended"
                );
            }
        }
    }

    fn loaded(&self) -> Vec<(i32, i32)> {
        self.shards
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(p, s)| (*p, s.epoch))
            .collect()
    }
}

/// Kafka's defaults, with the initial rebalance delay shortened (3 s in Kafka; a new
/// group here waits 300 ms for more members before its first generation).
fn group_config() -> GroupConfig {
    GroupConfig {
        initial_rebalance_delay_ms: 300,
        ..GroupConfig::default()
    }
}

impl Groups {
    /// Has the coordinator loop look at leadership now (after a metadata change).
    pub(crate) fn wake(&self) {
        self.wake.notify_one();
    }

    fn is_loaded(&self, partition: i32) -> bool {
        self.shards
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains_key(&partition)
    }

    /// Waits (up to `timeout`) until offsets partition `partition` is loaded here.
    async fn await_loaded(&self, partition: i32, timeout: Duration) {
        await_load(
            &self.loads,
            || self.is_loaded(partition),
            || self.wake(),
            timeout,
        )
        .await
    }
}

/// Waits (up to `timeout`) until `loaded` holds, waking the loader (`wake`) and
/// looking again each time it says it loaded something (`loads`): a coordinator's
/// request for a partition led here that is still loading.
pub(crate) async fn await_load(
    loads: &tokio::sync::Notify,
    loaded: impl Fn() -> bool,
    wake: impl Fn(),
    timeout: Duration,
) {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let notified = loads.notified();
        if loaded() {
            return;
        }
        wake();
        if tokio::time::timeout_at(deadline, notified).await.is_err() {
            return;
        }
    }
}

impl Broker {
    /// The partition count of the internal topic `name` (compacted, `segment.bytes` of
    /// --offsets-topic-segment-bytes), creating it with `partitions` on first use: the
    /// coordinators' state topics, `__consumer_offsets` and `__transaction_state`.
    pub(crate) async fn internal_topic_partitions(
        self: &Arc<Self>,
        name: &str,
        partitions: i32,
    ) -> Result<i32, ApiError> {
        if let Some(t) = self.cluster().topic(name) {
            return Ok(t.partitions.len() as i32);
        }
        let configs = [
            ("cleanup.policy".to_string(), "compact".to_string()),
            (
                "segment.bytes".to_string(),
                self.config.offsets_topic_segment_bytes.to_string(),
            ),
        ]
        .into_iter()
        .collect();
        match self
            .controller()
            .create_topic(name, partitions, -1, configs)
            .await
        {
            Ok(_) => {}
            Err(e) if e.error_code() == ErrorCode::TopicAlreadyExists => {}
            Err(e) => return Err(e.into()),
        }
        self.refresh_and_apply().await?;
        self.cluster()
            .topic(name)
            .map(|t| t.partitions.len() as i32)
            .ok_or_else(|| {
                ApiError::new(
                    ErrorCode::CoordinatorNotAvailable,
                    format!("{name} is being created; retry"),
                )
            })
    }
}

impl Broker {
    /// The offsets partition of `group`, creating `__consumer_offsets` on first use.
    pub(crate) async fn offsets_partition_for(
        self: &Arc<Self>,
        group: &str,
    ) -> Result<i32, ApiError> {
        // Compacted: the cleaner keeps the latest commit per group and partition (and
        // the latest membership per group) and drops the rest.
        let count = self
            .internal_topic_partitions(OFFSETS_TOPIC, self.config.offsets_topic_partitions)
            .await?;
        let partition = strata_group::partition_for(group, count);
        // A group whose partition is led here but still loading (just created, or
        // leadership just moved here): wait for the load, bounded, rather than answer
        // COORDINATOR_LOAD_IN_PROGRESS, which librdkafka retries for only ~300 ms before
        // failing a commit. Loads take milliseconds; this covers a busy machine.
        // Led here by the metadata, even if this broker has not applied it yet (another
        // request may be opening the partitions right now).
        let led_here = || {
            self.partition(OFFSETS_TOPIC, partition)
                .is_some_and(|p| p.is_leader())
                || self
                    .cluster()
                    .topic(OFFSETS_TOPIC)
                    .and_then(|t| t.partition(partition))
                    .is_some_and(|p| p.leader == self.node_id())
        };
        if !self.groups.is_loaded(partition) && led_here() {
            self.groups
                .await_loaded(partition, Duration::from_secs(5))
                .await;
        }
        Ok(partition)
    }

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
            let mut q = self
                .groups
                .appends
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            let (queued, busy) = q.entry(partition).or_default();
            queued.push(item);
            !std::mem::replace(busy, true)
        };
        if lead {
            // Its own task: a request dropped mid-append (its client went away) must not
            // strand the commits queued behind it.
            let broker = self.clone();
            tokio::spawn(async move { broker.flush_offsets(partition).await });
        }
    }

    async fn flush_offsets(self: Arc<Self>, partition: i32) {
        loop {
            let items: Vec<Item> = {
                let mut q = self
                    .groups
                    .appends
                    .lock()
                    .unwrap_or_else(|e| e.into_inner());
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
            let _ = self.groups.with_shard(self, partition, |s| {
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
    async fn expire_offsets(self: &Arc<Self>, partition: i32, now: i64) -> Result<usize, ApiError> {
        let retention = self.config.offsets_retention.as_millis() as i64;
        let expired = self.groups.with_shard(self, partition, |s| {
            s.coordinator.expired_offsets(now, retention)
        })?;
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
            .partition(OFFSETS_TOPIC, partition)
            .filter(|p| p.is_leader())
            .ok_or_else(|| ApiError::new(ErrorCode::NotCoordinator, "not the coordinator"))?;
        let now = self.clock.now_ms();
        let recs: Vec<NewRecord> = records
            .into_iter()
            .map(|(k, v)| NewRecord {
                key: Some(k),
                value: v,
                headers: vec![],
                timestamp: now,
            })
            .collect();
        let mut b = batch(&recs, Compression::None, None).to_vec();
        let (info, epoch) = p.append(&mut b).map_err(|e| {
            ApiError::new(
                if e.is_retriable() {
                    ErrorCode::CoordinatorNotAvailable
                } else {
                    e.error_code()
                },
                e.to_string(),
            )
        })?;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        match crate::api::wait_for_replicas(&p, info.last_offset + 1, epoch, deadline).await {
            ErrorCode::None => Ok(info.first_offset),
            ErrorCode::NotLeaderOrFollower => Err(ApiError::new(
                ErrorCode::NotCoordinator,
                "leadership of the group's offsets moved",
            )),
            ErrorCode::RequestTimedOut => Err(ApiError::new(
                ErrorCode::RequestTimedOut,
                "the commit was not replicated in time",
            )),
            code => Err(ApiError::new(code, "the commit was not replicated")),
        }
    }
}

/// The timestamp of the record at `offset`, if it is on local disk. A batch that does
/// not decode (its records past the decompression cap, say) gives no age: it is counted
/// in `strata_group_lag_unreadable_total` and the lag is exported without it.
fn record_timestamp(p: &Partition, offset: i64) -> Option<i64> {
    let r = p.read_local(offset, 1).ok()?;
    let b = strata_proto::batch::batches(&r.data).next()?.ok()?;
    let found = b.records().and_then(|records| {
        for rec in records.iter() {
            let rec = rec?;
            if rec.offset >= offset {
                return Ok(Some(rec.timestamp));
            }
        }
        Ok(None)
    });
    found.unwrap_or_else(|e| {
        metrics::counter!("strata_group_lag_unreadable_total").increment(1);
        tracing::debug!(partition = p.index, offset, error = %e, "no lag age: the batch does not decode");
        None
    })
}

/// Exports the lag figures and warns about groups whose position aged out.
fn export_lag(broker: &Broker, warned: &mut std::collections::HashSet<GroupPartition>) {
    let lags = broker.groups.lags(broker);
    let mut out_of_retention = 0;
    for l in &lags {
        let key = (l.group.clone(), l.topic.clone(), l.partition);
        if l.out_of_retention {
            out_of_retention += 1;
            if warned.insert(key) {
                tracing::warn!(
                    group = %l.group, topic = %l.topic, partition = l.partition,
                    committed = l.committed, log_start = l.log_start,
                    "the group's committed offset is below the log start: those records are gone; the consumer's auto.offset.reset decides where it resumes"
                );
            }
        } else {
            warned.remove(&key);
        }
    }
    metrics::gauge!("strata_group_out_of_retention_partitions").set(out_of_retention as f64);
    // A group or topic gone is forgotten.
    let current: std::collections::HashSet<(&str, &str, i32)> = lags
        .iter()
        .map(|l| (l.group.as_str(), l.topic.as_str(), l.partition))
        .collect();
    warned.retain(|(g, t, p)| current.contains(&(g.as_str(), t.as_str(), *p)));
    drop(current);
    *broker
        .groups
        .exported_lag
        .lock()
        .unwrap_or_else(|e| e.into_inner()) = lags;
}

/// Reads an offsets partition's log into a new coordinator.
fn load(p: &Partition, now: i64) -> Result<GroupCoordinator, ApiError> {
    let mut coordinator = GroupCoordinator::new(group_config());
    let end = p.log().log_end();
    let mut at = p.log().local_start();
    // What does not decode is skipped, logged and counted: one bad record (or batch)
    // must never keep every group of this partition from loading.
    let skip = |what: &str, offset: i64, error: &dyn std::fmt::Display| {
        metrics::counter!("strata_group_load_skipped_total", "what" => what.to_string())
            .increment(1);
        tracing::warn!(partition = p.index, offset, error = %error, "skipping an unreadable offsets {what}");
    };
    while at < end {
        let r = p.read_local(at, 1 << 20)?;
        if r.data.is_empty() || r.next_offset <= at {
            break;
        }
        for b in strata_proto::batch::batches(&r.data) {
            let b = match b {
                Ok(b) => b,
                Err(e) => {
                    // The rest of this read does not frame; go on after it.
                    skip("batch", at, &e);
                    break;
                }
            };
            let h = *b.header();
            // A transaction's marker decides its offset commits (TxnOffsetCommit).
            if h.is_control() {
                match strata_proto::control::marker_kind(&b) {
                    Ok(Some(kind)) => coordinator.replay_marker(
                        h.producer_id,
                        kind == strata_proto::control::MarkerKind::Commit,
                        h.base_offset,
                    ),
                    Ok(None) => {}
                    Err(e) => skip("marker", h.base_offset, &e),
                }
                continue;
            }
            let records = match b.records() {
                Ok(r) => r,
                Err(e) => {
                    skip("batch", b.base_offset(), &e);
                    continue;
                }
            };
            for rec in records.iter() {
                let rec = match rec {
                    Ok(r) => r,
                    Err(e) => {
                        skip("batch", b.base_offset(), &e);
                        break;
                    }
                };
                let Some(key) = rec.key else { continue };
                let replayed = if h.is_transactional() {
                    coordinator.replay_txn(h.producer_id, key, rec.value, rec.offset)
                } else {
                    coordinator.replay(key, rec.value)
                };
                if let Err(e) = replayed {
                    skip("record", rec.offset, &e);
                }
            }
        }
        at = r.next_offset;
    }
    // Restored members get a full session from now: their heartbeats went to the
    // previous coordinator.
    coordinator.loaded(now);
    Ok(coordinator)
}

/// Keeps the shards in line with the offsets partitions this broker leads, and ticks
/// them (session and rebalance timeouts).
pub(crate) async fn run(broker: Arc<Broker>, shutdown: CancellationToken) {
    let mut interval = tokio::time::interval(Duration::from_millis(100));
    let mut last_lag = broker.clock.now_ms();
    let mut last_expiry = last_lag;
    let mut warned = std::collections::HashSet::new();
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = interval.tick() => {}
            _ = broker.groups.wake.notified() => {}
        }
        if broker.clock.now_ms() - last_lag >= 5_000 {
            last_lag = broker.clock.now_ms();
            let b = broker.clone();
            let mut w = std::mem::take(&mut warned);
            warned = tokio::task::spawn_blocking(move || {
                export_lag(&b, &mut w);
                w
            })
            .await
            .unwrap_or_default();
        }
        let led: HashMap<i32, i32> = broker
            .topic(OFFSETS_TOPIC)
            .map(|t| {
                t.partitions
                    .iter()
                    .filter(|p| p.is_leader())
                    .map(|p| (p.index, p.leader_epoch()))
                    .collect()
            })
            .unwrap_or_default();
        let loaded = broker.groups.loaded();
        // Drop what this broker no longer leads (or leads in a newer epoch: reload).
        for (p, epoch) in &loaded {
            if led.get(p) != Some(epoch) {
                broker
                    .groups
                    .shards
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(p);
                tracing::info!(partition = p, "unloaded the groups of an offsets partition");
            }
        }
        // Every partition to load now, read in one blocking task (one hop, not one per
        // partition: clients wait with COORDINATOR_LOAD_IN_PROGRESS meanwhile).
        let mut to_load = Vec::new();
        for (&index, &epoch) in &led {
            if loaded.iter().any(|&(p, e)| p == index && e == epoch) {
                continue;
            }
            let Some(p) = broker.partition(OFFSETS_TOPIC, index) else {
                continue;
            };
            // Load only once the high-water mark covers the log (what the previous
            // leader acknowledged is committed here too).
            if p.high_watermark() < p.log().log_end() {
                continue;
            }
            to_load.push((index, epoch, p));
        }
        if !to_load.is_empty() {
            let now = broker.clock.now_ms();
            let results = tokio::task::spawn_blocking(move || {
                to_load
                    .into_iter()
                    .map(|(index, epoch, p)| (index, epoch, load(&p, now)))
                    .collect::<Vec<_>>()
            })
            .await;
            match results {
                Ok(results) => {
                    for (index, epoch, loaded) in results {
                        match loaded {
                            Ok(coordinator) => {
                                broker
                                    .groups
                                    .shards
                                    .lock()
                                    .unwrap_or_else(|e| e.into_inner())
                                    .insert(
                                        index,
                                        Shard {
                                            coordinator,
                                            waiters: HashMap::new(),
                                            epoch,
                                        },
                                    );
                                tracing::info!(
                                    partition = index,
                                    epoch,
                                    "loaded the groups of an offsets partition"
                                );
                            }
                            Err(e) => {
                                tracing::warn!(partition = index, error = %e.message, "cannot load an offsets partition")
                            }
                        }
                    }
                    broker.groups.loads.notify_waiters();
                }
                Err(e) => tracing::warn!(error = %e, "offsets load panicked"),
            }
        }
        let now = broker.clock.now_ms();
        let mut persist = Vec::new();
        let expire =
            now - last_expiry >= broker.config.offsets_retention_check_interval.as_millis() as i64;
        if expire {
            last_expiry = now;
        }
        let mut shard_indexes = Vec::new();
        {
            let mut shards = broker
                .groups
                .shards
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            for (&index, s) in shards.iter_mut() {
                let done = s.coordinator.tick(now);
                s.deliver(done);
                // Groups that became Stable (or Empty after Stable) since the last tick:
                // their members are written, so a new coordinator keeps them.
                let records = s.coordinator.take_persist();
                if !records.is_empty() {
                    persist.push((index, records));
                }
                shard_indexes.push(index);
            }
        }
        for (index, records) in persist {
            let b = broker.clone();
            tokio::spawn(async move {
                let n = records.len();
                if let Err(e) = b
                    .append_offsets_records(
                        index,
                        records.into_iter().map(|(k, v)| (k, Some(v))).collect(),
                        None,
                    )
                    .await
                {
                    // Only the membership is lost: if the coordinator moves before the
                    // next generation is written, the members rejoin.
                    tracing::warn!(partition = index, groups = n, error = %e.message, "cannot write group membership; after a coordinator move the members rejoin");
                }
            });
        }
        if expire {
            for index in shard_indexes {
                let b = broker.clone();
                tokio::spawn(async move {
                    match b.expire_offsets(index, now).await {
                        Ok(0) => {}
                        Ok(n) => {
                            metrics::counter!("strata_group_offsets_expired_total")
                                .increment(n as u64);
                            tracing::info!(
                                partition = index,
                                records = n,
                                "deleted expired committed offsets (offsets retention)"
                            );
                        }
                        Err(e) => {
                            tracing::warn!(partition = index, error = %e.message, "cannot delete expired offsets; the next check retries");
                        }
                    }
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Groups, Lag, retention_headroom};

    #[test]
    fn headroom_follows_the_lag_age_trend() {
        let day = 86_400_000;
        // A stopped group: its oldest unconsumed record ages in real time.
        assert_eq!(retention_headroom(day, 7 * day, 1.0), Some(6 * day));
        // Falling behind at half speed: twice as long.
        assert_eq!(retention_headroom(day, 7 * day, 0.5), Some(12 * day));
        // Flat or shrinking lag, or unbounded retention: never.
        assert_eq!(retention_headroom(day, 7 * day, 0.0), None);
        assert_eq!(retention_headroom(day, 7 * day, -0.3), None);
        assert_eq!(retention_headroom(day, -1, 1.0), None);
        // Already past the edge.
        assert_eq!(retention_headroom(8 * day, 7 * day, 1.0), Some(0));
    }

    #[test]
    fn lag_series_render_escaped_and_only_what_was_last_exported() {
        let groups = Groups::default();
        let mut out = String::new();
        groups.render_lag_metrics(&mut out);
        assert_eq!(out, "", "nothing before the first export");
        let lag = Lag {
            group: "a\"b\\c\nd".to_string(),
            topic: "t".to_string(),
            partition: 3,
            committed: 10,
            log_start: 0,
            log_end: 30,
            records: 20,
            bytes: 2048,
            age_ms: None,
            headroom_ms: None,
            out_of_retention: false,
        };
        *groups.exported_lag.lock().unwrap() = vec![lag];
        groups.render_lag_metrics(&mut out);
        let labels = r#"{group="a\"b\\c\nd",topic="t",partition="3"}"#;
        assert!(
            out.contains(&format!("strata_group_lag_records{labels} 20\n")),
            "{out}"
        );
        assert!(
            out.contains(&format!("strata_group_lag_bytes{labels} 2048\n")),
            "{out}"
        );
        // No age (its record is not local): no series; no headroom: +Inf.
        assert!(!out.contains("strata_group_lag_seconds{"), "{out}");
        assert!(
            out.contains(&format!(
                "strata_group_retention_headroom_seconds{labels} +Inf\n"
            )),
            "{out}"
        );
        assert!(out.contains("# TYPE strata_group_lag_records gauge\n"));
        // The next export replaces the series: a group gone is gone.
        groups.exported_lag.lock().unwrap().clear();
        let mut again = String::new();
        groups.render_lag_metrics(&mut again);
        assert_eq!(again, "");
    }
}
