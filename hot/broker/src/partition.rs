//! One partition replica hosted by this broker.

use std::path::Path;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, RwLock};

use strata_log::{AppendInfo, Clock, Log, LogConfig, LogError, RecoveryReport};
use strata_proto::{Offset, PartitionId, TopicConfig, TopicId};
use strata_tier::RemotePartition;
use tokio::sync::watch;

const PARTITION_METADATA: &str = "partition.metadata";

/// A partition: its log, its high-water mark, its leader epoch.
#[derive(Debug)]
pub struct Partition {
    pub topic: Arc<str>,
    pub topic_id: TopicId,
    pub index: PartitionId,
    pub log: Log,
    /// The high-water mark. With one replica it is the log-end offset; fetchers waiting
    /// for data watch it.
    hwm: watch::Sender<Offset>,
    leader_epoch: AtomicI32,
    config: RwLock<TopicConfig>,
    /// The remote tier, once attached (topics with remote.storage.enable=true).
    remote: RwLock<Option<Arc<RemotePartition>>>,
}

impl Partition {
    /// Opens (recovering) the partition's log in `dir`.
    // Every argument is one fact about the partition; a struct for them would only move
    // the list to the caller.
    #[allow(clippy::too_many_arguments)]
    pub fn open(
        dir: &Path,
        topic: Arc<str>,
        topic_id: TopicId,
        index: PartitionId,
        config: TopicConfig,
        leader_epoch: i32,
        clock: Arc<dyn Clock>,
        log_config: LogConfig,
    ) -> Result<(Partition, RecoveryReport), LogError> {
        let (log, report) = Log::open(dir, log_config, clock)?;
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
        let (hwm, _) = watch::channel(log.log_end_offset());
        Ok((
            Partition {
                topic,
                topic_id,
                index,
                log,
                hwm,
                leader_epoch: AtomicI32::new(leader_epoch),
                config: RwLock::new(config),
                remote: RwLock::new(None),
            },
            report,
        ))
    }

    /// The remote tier, if attached.
    pub fn remote(&self) -> Option<Arc<RemotePartition>> {
        self.remote
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub fn set_remote(&self, remote: Arc<RemotePartition>) {
        *self.remote.write().unwrap_or_else(|e| e.into_inner()) = Some(remote);
    }

    /// Whether this partition's topic tiers to object storage.
    pub fn tiered(&self) -> bool {
        self.config().remote_storage_enable
    }

    /// The earliest offset a consumer can read: the remote start when the remote tier
    /// holds data below the local start (KIP-405), else the local start.
    pub fn log_start_offset(&self) -> Offset {
        let local = self.log.log_start_offset();
        match self.remote().and_then(|r| r.log_start_offset()) {
            Some(remote) => remote.min(local),
            None => local,
        }
    }

    /// Whether local segment [base, next) may be deleted by local retention: always
    /// for topics that do not tier; only once offloaded for those that do ("not deleted
    /// until offloaded").
    pub fn may_delete_locally(&self, base: Offset, next: Offset) -> bool {
        if !self.tiered() {
            return true;
        }
        // Offloaded, or below the remote start (remote retention expired it: it is
        // below the log start and no reader may see it).
        self.remote().is_some_and(|r| {
            r.is_offloaded(base, next) || r.log_start_offset().is_some_and(|s| next <= s)
        })
    }

    pub fn high_watermark(&self) -> Offset {
        *self.hwm.borrow()
    }

    /// Sets the high-water mark after the log was reset (recovery from the remote tier).
    pub fn reset_high_watermark(&self, hwm: Offset) {
        self.hwm.send_replace(hwm);
    }

    /// A receiver that changes whenever the high-water mark moves.
    pub fn watch_high_watermark(&self) -> watch::Receiver<Offset> {
        self.hwm.subscribe()
    }

    pub fn leader_epoch(&self) -> i32 {
        self.leader_epoch.load(Ordering::Acquire)
    }

    pub fn config(&self) -> TopicConfig {
        self.config
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub fn set_config(&self, config: TopicConfig, log_config: LogConfig) {
        self.log.set_config(log_config);
        *self.config.write().unwrap_or_else(|e| e.into_inner()) = config;
    }

    /// Appends as leader and advances the high-water mark (one replica: the ISR is this
    /// broker alone).
    pub fn append(&self, records: &mut [u8]) -> Result<AppendInfo, LogError> {
        let info = self.log.append(records, self.leader_epoch())?;
        let leo = self.log.log_end_offset();
        // Concurrent appends may finish out of order: the mark only moves forward.
        self.hwm.send_if_modified(|h| {
            if leo > *h {
                *h = leo;
                true
            } else {
                false
            }
        });
        Ok(info)
    }
}

/// The topic id recorded in a partition directory, if any.
pub fn read_topic_id(dir: &Path) -> Option<TopicId> {
    let text = std::fs::read_to_string(dir.join(PARTITION_METADATA)).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("topic_id: "))
        .and_then(|v| v.trim().parse().ok())
}
