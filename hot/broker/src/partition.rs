//! One partition replica hosted by this broker: its log, its replica state (leader or
//! follower, high-water mark, ISR; strata-replica's sans-IO state machine), its remote
//! tier.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, Weak};

use strata_log::{
    AppendInfo, CleanOutcome, Cleanable, Clock, Log, LogConfig, LogError, OffsetMap, ReadResult,
    RecoveryCheckpoint, RecoveryReport, SharedRecoveryPoint,
};
use strata_proto::{Offset, PartitionId, RemoteStorageFormat, TopicConfig, TopicId};
use strata_replica::{
    AlterPartitionRequest, Command, FetchOutcome, FollowerFetch, PartitionReplica, PartitionState,
    ReplicaConfig, Role,
};
use strata_tier::{RemotePartition, TieredLog, Tiering};
use tokio::sync::watch;

const PARTITION_METADATA: &str = "partition.metadata";
const HIGH_WATERMARK_FILE: &str = "high-watermark";
/// A partition with no append for this long gives its tail buffer's memory back
/// (`strata_log::tail_budget`).
const TAIL_IDLE_MS: i64 = 30_000;

/// Where a partition sends the AlterPartition requests its replica state machine asks
/// for (ISR changes); the broker forwards them to the controller and feeds the answers
/// back through [`Partition::on_alter_partition_response`].
pub type AlterPartitionSender =
    tokio::sync::mpsc::UnboundedSender<(Arc<Partition>, AlterPartitionRequest)>;

/// A partition hosted here.
#[derive(Debug)]
pub struct Partition {
    pub topic: Arc<str>,
    pub topic_id: TopicId,
    pub index: PartitionId,
    /// The local log. Appends, replicated appends and truncation go here, never
    /// through the tier: a produce is broker -> partition -> log.
    local: Arc<Log>,
    /// The log as readers see it, local and remote (the same local log, and below its
    /// start the bucket); the archiver reads and trims it on its own thread.
    log: Arc<TieredLog>,
    /// This partition, to hand to the AlterPartition sender.
    me: Weak<Partition>,
    alter_partitions: AlterPartitionSender,
    dir: PathBuf,
    clock: Arc<dyn Clock>,
    /// The high-water mark; fetchers and acks=all produce requests wait on it.
    hwm: crate::waker::Mark,
    /// The log end; followers' long-poll fetches wait on it.
    leo: crate::waker::Mark,
    replica: Mutex<PartitionReplica>,
    config: RwLock<TopicConfig>,
    /// The ISR last applied, to tell shrinks from expands in the metrics.
    last_isr: Mutex<Vec<i32>>,
    /// What the log cleaner has done here (compacted topics).
    cleaner_stats: Mutex<CleanerStats>,
    /// Produce and fetch traffic and hot keys, as leader.
    traffic: crate::traffic::Traffic,
    /// A `high-watermark` file of an earlier version may be in the directory: removed
    /// once the broker's checkpoint file holds the mark (`crate::checkpoints`).
    own_hw_file: std::sync::atomic::AtomicBool,
}

/// A compacted partition's cleaner history on this broker (since it started).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CleanerStats {
    pub passes: u64,
    pub reclaimed_bytes: u64,
    /// When the last pass ended (ms).
    pub last_pass_ms: Option<i64>,
    /// Passes that started after the oldest uncleaned record was max.compaction.lag.ms old.
    pub max_compaction_lag_breaches: u64,
}

pub use strata_tier::ParquetCoverage;

impl Partition {
    /// Opens (recovering) the partition's log in `dir`. It serves nothing until metadata
    /// makes it leader or follower ([`Partition::apply_state`]).
    #[allow(clippy::too_many_arguments)] // each argument is one fact about the partition
    pub fn open(
        dir: &Path,
        topic: Arc<str>,
        topic_id: TopicId,
        index: PartitionId,
        config: TopicConfig,
        clock: Arc<dyn Clock>,
        log_config: LogConfig,
        node_id: i32,
        tiering: &Tiering,
        alter_partitions: AlterPartitionSender,
        saved: Option<crate::checkpoints::Saved>,
    ) -> Result<(Arc<Partition>, RecoveryReport), LogError> {
        // The recovery point is kept in the broker's checkpoint file.
        let recovery = RecoveryCheckpoint::Shared {
            hint: saved.map(|s| s.entry.recovery_point),
            clean: saved.is_some_and(|s| s.clean_stop),
        };
        let saved = saved.map(|s| s.entry);
        let (log, report) = Log::open_with(dir, log_config, clock.clone(), recovery)?;
        let meta = dir.join(PARTITION_METADATA);
        if read_topic_id(dir) != Some(topic_id) {
            std::fs::write(&meta, format!("version: 0\ntopic_id: {topic_id}\n")).map_err(
                |source| LogError::Io {
                    op: "write",
                    path: meta.clone(),
                    source,
                },
            )?;
        }
        // Kafka's replication-offset-checkpoint: the mark a restarted replica starts from
        // (never past its own log end).
        let own_hw_file = dir.join(HIGH_WATERMARK_FILE);
        let hw_on_disk = saved
            .map(|e| e.high_watermark)
            .or_else(|| read_offset(&own_hw_file));
        let hwm_seed = hw_on_disk
            .unwrap_or(log.log_start_offset())
            .clamp(log.log_start_offset(), log.log_end_offset());
        let hwm = crate::waker::Mark::new(hwm_seed);
        let leo = crate::waker::Mark::new(log.log_end_offset());
        let replica = PartitionReplica::new(node_id, ReplicaConfig::default(), hwm_seed);
        let local = Arc::new(log);
        let log = Arc::new(tiering.log(local.clone(), topic.clone(), topic_id, index));
        log.set_policy(
            config.remote_storage_enable,
            config.parquet_enable,
            config.remote_storage_format == RemoteStorageFormat::Parquet,
        );
        Ok((
            Arc::new_cyclic(|me| Partition {
                topic,
                topic_id,
                index,
                local,
                log,
                me: me.clone(),
                alter_partitions,
                dir: dir.to_path_buf(),
                clock,
                hwm,
                leo,
                replica: Mutex::new(replica),
                config: RwLock::new(config),
                last_isr: Mutex::new(Vec::new()),
                cleaner_stats: Mutex::new(CleanerStats::default()),
                traffic: crate::traffic::Traffic::default(),
                own_hw_file: std::sync::atomic::AtomicBool::new(own_hw_file.exists()),
            }),
            report,
        ))
    }

    fn replica(&self) -> MutexGuard<'_, PartitionReplica> {
        self.replica.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn role(&self) -> Role {
        self.replica().role()
    }

    pub fn is_leader(&self) -> bool {
        self.replica().is_leader()
    }

    pub fn leader_epoch(&self) -> i32 {
        self.replica().leader_epoch()
    }

    pub fn partition_epoch(&self) -> i32 {
        self.replica().partition_epoch()
    }

    pub fn isr(&self) -> Vec<i32> {
        self.replica().isr()
    }

    pub fn is_under_replicated(&self) -> bool {
        self.replica().is_under_replicated()
    }

    /// Whether acks=all may be accepted now: the ISR has min.insync.replicas members.
    pub fn acks_all_allowed(&self) -> bool {
        let min = self.config().min_insync_replicas.max(1) as usize;
        self.replica().acks_all_allowed(min)
    }

    /// Where an acks=all request needing `offset`, appended in leader epoch `epoch`,
    /// stands. Another epoch means leadership moved meanwhile: this log may have been
    /// truncated and refilled (lost and won back between two looks), so the offset no
    /// longer says the batch is there; the producer retries (Kafka fails parked
    /// produces in makeFollower).
    pub fn ack_status(&self, offset: Offset, epoch: i32) -> strata_replica::AckStatus {
        let min = self.config().min_insync_replicas.max(1) as usize;
        let r = self.replica();
        if r.leader_epoch() != epoch {
            return strata_replica::AckStatus::NotLeaderOrFollower;
        }
        r.check_enough_replicas_reach_offset(offset, min)
    }

    /// Waits until every in-sync replica has `offset` (the high-water mark passed it) while
    /// leader epoch `epoch`, the one the batch was appended in, lasts: the acks=all wait of
    /// a produce, and of the coordinators' own appends. NOT_ENOUGH_REPLICAS_AFTER_APPEND if
    /// the ISR fell below min.insync.replicas, NOT_LEADER_OR_FOLLOWER if the epoch ended,
    /// REQUEST_TIMED_OUT at `deadline`.
    pub async fn wait_acked(
        &self,
        offset: Offset,
        epoch: i32,
        deadline: tokio::time::Instant,
    ) -> strata_proto::ErrorCode {
        use std::time::Duration;
        use strata_proto::ErrorCode;
        use strata_replica::AckStatus;
        let mut hwm = self.watch_high_watermark();
        loop {
            match self.ack_status(offset, epoch) {
                AckStatus::Done => return ErrorCode::None,
                AckStatus::NotEnoughReplicasAfterAppend => {
                    return ErrorCode::NotEnoughReplicasAfterAppend;
                }
                AckStatus::NotLeaderOrFollower => return ErrorCode::NotLeaderOrFollower,
                AckStatus::Waiting => {}
            }
            // The ISR can shrink without the mark moving: look again now and then.
            let tick = tokio::time::Instant::now() + Duration::from_millis(100);
            match tokio::time::timeout_at(deadline.min(tick), hwm.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => return ErrorCode::NotLeaderOrFollower,
                Err(_) if tokio::time::Instant::now() >= deadline => {
                    return ErrorCode::RequestTimedOut;
                }
                Err(_) => {}
            }
        }
    }

    /// The log as readers see it, local and remote (fetch, list offsets, the tier).
    pub fn log(&self) -> &Arc<TieredLog> {
        &self.log
    }

    /// A read of the local log with where it ended (the offsets topic's loader, which
    /// walks it batch by batch).
    pub fn read_local(&self, offset: Offset, max_bytes: usize) -> Result<ReadResult, LogError> {
        self.local.read(offset, max_bytes, None)
    }

    /// The leader epoch at or below `epoch` and where it ends (OffsetForLeaderEpoch).
    pub fn end_offset_for_epoch(&self, epoch: i32) -> Option<(i32, Offset)> {
        self.local.end_offset_for_epoch(epoch)
    }

    /// A producer's state in this log (KIP-890's check that a transactional batch
    /// continues an ongoing transaction).
    pub fn producer_entry(&self, producer_id: i64) -> Option<strata_log::ProducerEntry> {
        self.local.producer_entry(producer_id)
    }

    /// A copy of every producer's state here (DescribeProducers).
    pub fn producer_state(&self) -> strata_log::ProducerState {
        self.local.producer_state()
    }

    /// Whether a local read at `offset` may wait on the device (it is not in the tail
    /// buffer or the read cache): the fetch then runs it where it cannot stall other
    /// connections.
    pub fn read_may_wait(&self, offset: Offset) -> bool {
        self.local.read_may_wait(offset)
    }

    /// Moves the local log start up to `offset` (a follower following its leader's
    /// start, the offsets topic dropping what a checkpoint covers); returns the start.
    pub fn advance_log_start(&self, offset: Offset) -> Result<Offset, LogError> {
        self.local.advance_log_start(offset)
    }

    /// Periodic work on the local log: roll by segment.ms, flush by flush.ms, local
    /// retention (when `retention`; segments go only as [`Self::may_delete_locally`]
    /// allows). Failures are logged; the next round tries again. Checkpoints are the
    /// broker's (`Broker::checkpoint_partitions`).
    pub fn housekeeping(&self, retention: bool) {
        let log = &self.local;
        if let Err(e) = log.maybe_roll() {
            tracing::warn!(topic = %self.topic, partition = self.index, error = %e, "segment roll failed");
        }
        if let Err(e) = log.maybe_flush() {
            tracing::warn!(topic = %self.topic, partition = self.index, error = %e, "flush failed");
        }
        log.prune_stable_transactions(self.high_watermark());
        // An idle partition gives its tail buffer back to the broker-wide budget.
        log.release_idle_tail(TAIL_IDLE_MS);
        if retention {
            match log.apply_retention(&mut |seg| {
                self.may_delete_locally(seg.base_offset, seg.next_offset)
            }) {
                Ok(out) if !out.deleted.is_empty() => {
                    tracing::info!(topic = %self.topic, partition = self.index, segments = out.deleted.len(), log_start = out.log_start_offset, "retention deleted segments");
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(topic = %self.topic, partition = self.index, error = %e, "retention failed")
                }
            }
        }
    }

    /// Where this partition's log stands for the cleaner, below its high-water mark;
    /// `None` when the topic is not compacted (or the log cannot be read: the pass that
    /// follows reports it).
    pub fn cleanable(&self) -> Option<Cleanable> {
        let now = self.clock.now_ms();
        match self.local.cleanable(now, self.high_watermark()) {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(topic = %self.topic, partition = self.index, error = %e, "cannot assess the log for cleaning");
                None
            }
        }
    }

    /// One cleaner pass over the local log, below the high-water mark (Kafka cleans
    /// only what every in-sync replica has).
    pub fn clean(
        &self,
        map: &mut OffsetMap,
        throttle: &mut dyn FnMut(u64),
    ) -> Result<CleanOutcome, LogError> {
        let now = self.clock.now_ms();
        self.local.clean(map, now, self.high_watermark(), throttle)
    }

    /// The partition's clock.
    pub fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    /// Records a finished cleaner pass; `breached`: it started past max.compaction.lag.ms.
    pub fn record_clean(&self, out: &CleanOutcome, breached: bool) {
        let mut s = self.cleaner_stats.lock().unwrap_or_else(|e| e.into_inner());
        s.passes += 1;
        s.reclaimed_bytes += out.bytes_reclaimed();
        s.last_pass_ms = Some(self.clock.now_ms());
        s.max_compaction_lag_breaches += breached as u64;
    }

    /// Produce and fetch traffic here (as leader) and the hottest keys.
    pub fn traffic(&self) -> &crate::traffic::Traffic {
        &self.traffic
    }

    pub fn cleaner_stats(&self) -> CleanerStats {
        *self.cleaner_stats.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Readies the log for a clean stop (`strata_log::Log::prepare_shutdown`; the
    /// broker then writes the checkpoints). Returns whether it could.
    pub fn prepare_shutdown(&self) -> bool {
        match self.local.prepare_shutdown() {
            Ok(_) => true,
            Err(e) => {
                tracing::warn!(topic = %self.topic, partition = self.index, error = %e, "flush on shutdown failed");
                false
            }
        }
    }

    /// The remote tier, if attached.
    pub fn remote(&self) -> Option<Arc<RemotePartition>> {
        self.log.remote()
    }

    /// Whether this partition's topic tiers to object storage.
    pub fn tiered(&self) -> bool {
        self.config().remote_storage_enable
    }

    /// The earliest offset a consumer can read, remote included (KIP-405).
    pub fn log_start_offset(&self) -> Offset {
        self.log.log_start()
    }

    /// Whether local retention may delete segment [base, next) (see
    /// [`TieredLog::may_delete_locally`]).
    pub fn may_delete_locally(&self, base: Offset, next: Offset) -> bool {
        self.log.may_delete_locally(base, next)
    }

    pub fn high_watermark(&self) -> Offset {
        self.hwm.get()
    }

    /// The offset after the last record in the local log (committed or not).
    pub fn log_end_offset(&self) -> Offset {
        self.local.log_end_offset()
    }

    /// The last stable offset (KIP-98): where read_committed consumers stop.
    pub fn last_stable_offset(&self) -> Offset {
        self.log.last_stable_offset(self.high_watermark())
    }

    /// Topics with parquet.enable: the offset below which the log is in Parquet files.
    pub fn parquet_progress(&self) -> Offset {
        self.log.parquet_progress()
    }

    pub fn parquet_coverage(&self) -> Option<ParquetCoverage> {
        self.log.parquet_coverage()
    }

    /// The replica state the archiver works from.
    pub fn leadership(&self) -> strata_tier::Leadership {
        let r = self.replica();
        strata_tier::Leadership {
            leader: r.is_leader(),
            leader_epoch: r.leader_epoch(),
            high_watermark: self.high_watermark(),
        }
    }

    /// Sets the high-water mark after the log was reset (recovery from the remote tier).
    pub fn reset_high_watermark(&self, hwm: Offset) {
        self.hwm.set(hwm);
        self.leo.set(self.local.log_end_offset());
    }

    /// A receiver that changes whenever the high-water mark moves.
    pub fn watch_high_watermark(&self) -> watch::Receiver<Offset> {
        self.hwm.subscribe()
    }

    /// Registers a long-polling fetch's waker: woken when the high-water mark moves
    /// (a consumer's) or the log end (a follower's).
    pub fn register_fetch(&self, waker: &std::sync::Arc<crate::waker::FetchWaker>, follower: bool) {
        if follower {
            self.leo.register(waker)
        } else {
            self.hwm.register(waker)
        }
    }

    pub fn config(&self) -> TopicConfig {
        self.config
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub fn set_config(&self, config: TopicConfig, log_config: LogConfig) {
        self.local.set_config(log_config);
        self.log.set_policy(
            config.remote_storage_enable,
            config.parquet_enable,
            config.remote_storage_format == RemoteStorageFormat::Parquet,
        );
        *self.config.write().unwrap_or_else(|e| e.into_inner()) = config;
    }

    /// Applies the controller's view of the partition: becomes leader or follower when
    /// the leader epoch or partition epoch moved.
    pub fn apply_state(&self, node_id: i32, state: &PartitionState) -> Result<(), LogError> {
        let now = self.clock.now_ms();
        let cmds = {
            let mut r = self.replica();
            let unchanged = (r.leader_epoch(), r.partition_epoch())
                == (state.leader_epoch, state.partition_epoch)
                && !matches!(r.role(), Role::Offline);
            if unchanged {
                return Ok(());
            }
            if state.leader == node_id {
                r.become_leader(now, state, &*self.local)
            } else {
                r.become_follower(now, state, &*self.local)
            }
        };
        // The leader counts every ISR change it sees, its own AlterPartitions (below)
        // and the controller's (a fenced broker leaves the ISR).
        let mut last = self.last_isr.lock().unwrap_or_else(|e| e.into_inner());
        if state.leader == node_id && !last.is_empty() {
            count_isr_change(&last, &state.isr);
        }
        *last = state.isr.clone();
        drop(last);
        self.execute(cmds)
    }

    /// Carries out the replica state machine's commands; AlterPartition requests go to
    /// the controller through the broker's sender.
    fn execute(&self, cmds: Vec<Command>) -> Result<(), LogError> {
        let alters = self.execute_collecting(cmds)?;
        self.send_alter_partitions(alters);
        Ok(())
    }

    fn send_alter_partitions(&self, reqs: Vec<AlterPartitionRequest>) {
        let Some(me) = self.me.upgrade() else { return };
        for req in reqs {
            if self.alter_partitions.send((me.clone(), req)).is_err() {
                tracing::debug!(topic = %self.topic, partition = self.index, "the broker stopped; an AlterPartition request is dropped");
            }
        }
    }

    /// [`Self::execute`], returning the AlterPartition requests instead of sending them.
    fn execute_collecting(
        &self,
        cmds: Vec<Command>,
    ) -> Result<Vec<AlterPartitionRequest>, LogError> {
        let mut out = Vec::new();
        for c in cmds {
            match c {
                Command::AssignEpochStart { leader_epoch, .. } => {
                    self.local.assign_epoch_start(leader_epoch)?;
                }
                Command::AlterPartition(req) => out.push(req),
                Command::HighWatermarkAdvanced(h) => {
                    self.hwm.raise(h);
                }
                Command::IsrChanged {
                    isr,
                    partition_epoch,
                } => {
                    tracing::info!(topic = %self.topic, partition = self.index, ?isr, partition_epoch, "ISR changed");
                    let mut last = self.last_isr.lock().unwrap_or_else(|e| e.into_inner());
                    count_isr_change(&last, &isr);
                    *last = isr;
                }
                Command::Truncate(offset) => {
                    // At the log end too: the epoch cache may hold an epoch this replica
                    // started as leader and appended nothing in, which the leader lacks;
                    // kept, every fetch would name it and diverge again.
                    let leo = self.local.log_end_offset();
                    if offset <= leo {
                        if offset < leo {
                            tracing::info!(topic = %self.topic, partition = self.index, offset, "truncating to the leader's log");
                        }
                        self.local.truncate_to(offset)?;
                        self.leo.set(self.local.log_end_offset());
                    }
                }
                Command::TruncateFullyAndStartAt(offset) => {
                    tracing::info!(topic = %self.topic, partition = self.index, offset, "restarting the log at the leader's start");
                    self.local.truncate_fully_and_start_at(offset)?;
                    self.hwm.set(offset);
                    self.leo.set(offset);
                }
            }
        }
        Ok(out)
    }

    /// Appends as leader (the caller checked leadership and acks). Returns the leader
    /// epoch the batch was appended in: an acks=all wait holds only while it lasts.
    ///
    /// An append that will wait on the device (an fsync by the flush policy, a roll)
    /// runs in `tokio::task::block_in_place` when called on a worker of a multi-thread
    /// runtime: the worker's other tasks (other connections, other partitions) move to
    /// another thread meanwhile, instead of waiting milliseconds behind one partition's
    /// fsync. Other appends (a copy into the tail buffer and one write) run inline.
    pub fn append(&self, records: &mut [u8]) -> Result<(AppendInfo, i32), LogError> {
        if self.local.append_may_wait(records.len()) {
            crate::blocking::may_wait("append", || self.append_inline(records))
        } else {
            self.append_inline(records)
        }
    }

    fn append_inline(&self, records: &mut [u8]) -> Result<(AppendInfo, i32), LogError> {
        let epoch = self.leader_epoch();
        let info = self.local.append(records, epoch)?;
        self.after_local_append()?;
        if !info.duplicate {
            self.traffic
                .on_produce(records, info.record_count, self.clock.now_ms());
        }
        Ok((info, epoch))
    }

    /// Appends a batch a coordinator writes for a producer (leader; TxnOffsetCommit).
    pub fn append_coordinator(&self, records: &mut [u8]) -> Result<(AppendInfo, i32), LogError> {
        let epoch = self.leader_epoch();
        let info = self.local.append_coordinator(records, epoch)?;
        self.after_local_append()?;
        Ok((info, epoch))
    }

    /// Appends a transaction marker (leader; WriteTxnMarkers).
    pub fn append_marker(
        &self,
        marker: &strata_proto::control::Marker,
    ) -> Result<(AppendInfo, i32), LogError> {
        let epoch = self.leader_epoch();
        let info = self.local.append_marker(marker, epoch)?;
        self.after_local_append()?;
        Ok((info, epoch))
    }

    /// The replica state machine's part of a leader's append.
    fn after_local_append(&self) -> Result<(), LogError> {
        let leo = self.local.log_end_offset();
        self.leo.raise(leo);
        let cmds = self.replica().on_local_append(self.clock.now_ms(), leo);
        self.execute(cmds)
    }

    /// Appends batches fetched from the leader (follower).
    pub fn append_replicated(
        &self,
        records: &mut [u8],
        leader_hwm: Offset,
    ) -> Result<(), LogError> {
        if !records.is_empty() {
            self.local.append_replicated(records)?;
        }
        let leo = self.local.log_end_offset();
        self.leo.set(leo);
        let cmds = self.replica().on_fetch_response(leader_hwm, leo);
        self.execute(cmds)?;
        Ok(())
    }

    /// A follower's fetch (leader side).
    pub fn on_follower_fetch(&self, fetch: &FollowerFetch) -> (FetchOutcome, Result<(), LogError>) {
        let outcome = self
            .replica()
            .on_follower_fetch(self.clock.now_ms(), fetch, &*self.local);
        let result = self.execute(outcome.commands.clone());
        (outcome, result)
    }

    /// The leader's answer to where our logs part (follower side).
    pub fn on_diverging_epoch(&self, epoch: i32, end_offset: Offset) -> Result<(), LogError> {
        let outcome = self
            .replica()
            .on_epoch_end_offset(Some((epoch, end_offset)), &*self.local);
        self.execute(outcome.commands)?;
        Ok(())
    }

    /// The leader says our fetch offset is out of its range (follower side).
    pub fn on_fetch_out_of_range(
        &self,
        leader_log_start: Offset,
        leader_log_end: Offset,
    ) -> Result<(), LogError> {
        let cmds =
            self.replica()
                .on_fetch_out_of_range(leader_log_start, leader_log_end, &*self.local);
        self.execute(cmds)?;
        Ok(())
    }

    /// Periodic leader duties: ISR shrink after replica.lag.time.max.ms.
    pub fn tick(&self) -> Result<(), LogError> {
        let cmds = self.replica().tick(self.clock.now_ms());
        self.execute(cmds)
    }

    /// The controller's answer to an AlterPartition this replica asked for; returns the
    /// request to retry, if the state machine wants one (the sender retries it after a
    /// pause).
    pub fn on_alter_partition_response(
        &self,
        req: &AlterPartitionRequest,
        result: Result<strata_replica::CommittedIsr, strata_replica::AlterPartitionError>,
    ) -> Result<Vec<AlterPartitionRequest>, LogError> {
        let cmds = self
            .replica()
            .on_alter_partition_response(self.clock.now_ms(), req, result);
        self.execute_collecting(cmds)
    }

    /// The follower's fetch position: its log end and the epoch of its last batch.
    pub fn fetch_position(&self) -> (Offset, Option<i32>) {
        (self.local.log_end_offset(), self.local.latest_epoch())
    }

    /// What the broker's checkpoint file is to hold for this partition now
    /// (`crate::checkpoints`), and the recovery point to hand back to
    /// [`Self::checkpoint_saved`] once it does.
    pub(crate) fn checkpoint_entry(&self) -> (crate::checkpoints::Entry, SharedRecoveryPoint) {
        // The mark may be above what was fsynced; an open clamps it to the log end.
        let high_watermark = self.high_watermark();
        let rp = self.local.recovery_checkpoint();
        (
            crate::checkpoints::Entry {
                topic_id: self.topic_id,
                recovery_point: rp.offset,
                high_watermark,
            },
            rp,
        )
    }

    /// The broker's checkpoint file holds what [`Self::checkpoint_entry`] gave: the
    /// partition's own checkpoint files go (unless written since).
    pub(crate) fn checkpoint_saved(&self, rp: SharedRecoveryPoint) {
        use std::sync::atomic::Ordering;
        if let Err(e) = self.local.recovery_checkpoint_saved(rp) {
            tracing::warn!(topic = %self.topic, partition = self.index, error = %e, "cannot remove the partition's own recovery point file");
        }
        if self.own_hw_file.swap(false, Ordering::Relaxed) {
            let _ = std::fs::remove_file(self.dir.join(HIGH_WATERMARK_FILE));
        }
    }

    /// The partition's directory name (its key in the broker's checkpoint file).
    pub(crate) fn dir_name(&self) -> Option<&str> {
        self.dir.file_name()?.to_str()
    }
}

/// Kafka's IsrExpandsPerSec / IsrShrinksPerSec, as counters.
fn count_isr_change(old: &[i32], new: &[i32]) {
    if new.iter().any(|r| !old.contains(r)) {
        metrics::counter!("strata_isr_expands_total").increment(1);
    }
    if old.iter().any(|r| !new.contains(r)) {
        metrics::counter!("strata_isr_shrinks_total").increment(1);
    }
}

fn read_offset(path: &Path) -> Option<Offset> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// The topic id recorded in a partition directory, if any.
pub fn read_topic_id(dir: &Path) -> Option<TopicId> {
    let text = std::fs::read_to_string(dir.join(PARTITION_METADATA)).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("topic_id: "))
        .and_then(|v| v.trim().parse().ok())
}
