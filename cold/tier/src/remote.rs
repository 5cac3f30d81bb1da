//! One partition's remote tier: its manifest, uploads, reads and retention.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use strata_cache::{ChunkCache, ReaderId};
use strata_log::txn_index::{self, AbortedTxn};
use strata_log::{Indexes, RemoteEndState, SealedSegment, SegmentInfo, Window, epoch, find_window};
use strata_proto::Offset;
use strata_proto::batch::{self, HEADER_LEN, RecordBatch};
use strata_store::{BlobStore, ErrorKind, FileMode, PutMode};
use uuid::Uuid;

use crate::error::TierError;
use crate::layout::{self, PartitionKey};
use crate::manifest::{Manifest, ManifestError, ManifestOp, RemoteSegment};
use crate::manifest_store;

/// Bytes a remote read takes beyond max_bytes, to cover the walk from the sparse index
/// entry to the wanted batch (as the local read does).
const READ_SLACK: u64 = 64 * 1024;
/// Segment indexes kept in memory per partition.
const INDEX_CACHE_ENTRIES: usize = 64;

/// What a remote read returned: whole batches, as a local read would.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemoteRead {
    pub data: Bytes,
    pub next_offset: Offset,
}

/// A partition's remote tier.
#[derive(Debug)]
pub struct RemotePartition {
    key: PartitionKey,
    store: Arc<dyn BlobStore>,
    cache: Arc<ChunkCache>,
    manifest: RwLock<Manifest>,
    /// Serialises commits (one writer per partition on this broker).
    writer: tokio::sync::Mutex<()>,
    /// Set when another leader committed: no more commits until reloaded as leader.
    fenced: std::sync::atomic::AtomicBool,
    /// Downloaded segment indexes (the local `.index` and `.timeindex` formats, decoded
    /// by strata-log).
    indexes: Mutex<HashMap<Uuid, Arc<Indexes>>>,
    /// Downloaded aborted-transaction indexes, as `indexes`.
    txn_indexes: Mutex<HashMap<Uuid, Arc<Vec<AbortedTxn>>>>,
    /// Segments a compaction pass replaced (by object stem), and when (ms): their
    /// objects are deleted once the grace has passed since then ([`Self::delete_retired`]),
    /// for reads still on them; the orphan sweep leaves them alone until then.
    retired: Mutex<HashMap<String, (RemoteSegment, i64)>>,
}

impl RemotePartition {
    /// Loads the partition's manifest from the store.
    pub async fn open(
        key: PartitionKey,
        store: Arc<dyn BlobStore>,
        cache: Arc<ChunkCache>,
    ) -> Result<RemotePartition, TierError> {
        let manifest = manifest_store::load(&store, &key).await?;
        Ok(RemotePartition {
            key,
            store,
            cache,
            retired: Mutex::new(HashMap::new()),
            manifest: RwLock::new(manifest),
            writer: tokio::sync::Mutex::new(()),
            fenced: Default::default(),
            indexes: Mutex::new(HashMap::new()),
            txn_indexes: Mutex::new(HashMap::new()),
        })
    }

    pub fn key(&self) -> &PartitionKey {
        &self.key
    }

    fn manifest(&self) -> std::sync::RwLockReadGuard<'_, Manifest> {
        self.manifest.read().unwrap_or_else(|e| e.into_inner())
    }

    /// The first offset in object storage, if any.
    pub fn log_start_offset(&self) -> Option<Offset> {
        self.manifest().log_start_offset()
    }

    /// The remote log start, kept after every remote segment expired (0 before any
    /// upload): see [`Manifest::start_bound`].
    pub fn start_bound(&self) -> Offset {
        self.manifest().start_bound()
    }

    /// The offset after the last offloaded record, if any.
    pub fn end_offset(&self) -> Option<Offset> {
        self.manifest().end_offset()
    }

    pub fn remote_bytes(&self) -> u64 {
        self.manifest().total_bytes()
    }

    pub fn segment_count(&self) -> usize {
        self.manifest().len()
    }

    /// The newest committed segment's commit time.
    pub fn last_commit_ms(&self) -> Option<i64> {
        self.manifest().segments().last().map(|s| s.committed_at_ms)
    }

    pub fn is_fenced(&self) -> bool {
        self.fenced.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Whether local segment [base, next) is in object storage (and so may be deleted
    /// locally).
    pub fn is_offloaded(&self, base: Offset, next: Offset) -> bool {
        self.manifest().covers(base, next)
    }

    /// A snapshot of the manifest (for status and tests).
    /// Whether a remote segment holds `offset`.
    pub fn holds(&self, offset: Offset) -> bool {
        self.manifest().find_offset(offset).is_some()
    }

    pub fn manifest_snapshot(&self) -> Manifest {
        self.manifest().clone()
    }

    /// Uploads a sealed local segment as strata-log describes it (its files, its
    /// producer-state snapshot and its leader-epoch slice), then commits it to the
    /// manifest. The segment must continue the manifest.
    pub async fn offload_sealed(
        &self,
        seg: &SealedSegment,
        leader_epoch: i32,
    ) -> Result<RemoteSegment, TierError> {
        let epochs = (!seg.leader_epochs.is_empty()).then(|| epoch::encode(&seg.leader_epochs));
        let txn_index = (!seg.aborted.is_empty()).then(|| txn_index::encode(&seg.aborted));
        self.upload(
            &seg.info,
            seg.producer_snapshot.as_deref(),
            epochs,
            txn_index,
            leader_epoch,
        )
        .await
    }

    /// [`Self::offload_sealed`] of a segment given by its files alone (no leader epochs).
    pub async fn offload(
        &self,
        seg: &SegmentInfo,
        producer_snapshot: Option<&Path>,
        leader_epoch: i32,
    ) -> Result<RemoteSegment, TierError> {
        self.upload(seg, producer_snapshot, None, None, leader_epoch)
            .await
    }

    async fn upload(
        &self,
        seg: &SegmentInfo,
        producer_snapshot: Option<&Path>,
        leader_epochs: Option<Vec<u8>>,
        txn_index: Option<Vec<u8>>,
        leader_epoch: i32,
    ) -> Result<RemoteSegment, TierError> {
        let _w = self.writer.lock().await;
        if self.is_fenced() {
            return Err(TierError::Fenced {
                seq: self.manifest().seq(),
            });
        }
        let rs = RemoteSegment {
            base_offset: seg.base_offset,
            next_offset: seg.next_offset,
            size_bytes: seg.size_bytes,
            max_timestamp: seg.max_timestamp,
            leader_epoch,
            id: Uuid::new_v4(),
            has_producer_state: producer_snapshot.is_some(),
            has_leader_epochs: leader_epochs.is_some(),
            has_txn_index: txn_index.is_some(),
            committed_at_ms: now_ms(),
        };
        // Objects first (unique names: a crash leaves only unnamed orphans), then the
        // manifest entry that makes them visible.
        self.store
            .put_file(
                &self.key.segment_object(&rs, "log"),
                &seg.log_path,
                FileMode::Create,
            )
            .await?;
        let index = std::fs::read(&seg.index_path)?;
        let timeindex = std::fs::read(&seg.time_index_path)?;
        self.store
            .put(
                &self.key.segment_object(&rs, "index"),
                Bytes::from(index),
                PutMode::Create,
            )
            .await?;
        self.store
            .put(
                &self.key.segment_object(&rs, "timeindex"),
                Bytes::from(timeindex),
                PutMode::Create,
            )
            .await?;
        if let Some(p) = producer_snapshot {
            self.store
                .put(
                    &self.key.segment_object(&rs, "state"),
                    Bytes::from(std::fs::read(p)?),
                    PutMode::Create,
                )
                .await?;
        }
        for (ext, bytes) in [("epochs", leader_epochs), ("txnindex", txn_index)] {
            if let Some(bytes) = bytes {
                self.store
                    .put(
                        &self.key.segment_object(&rs, ext),
                        Bytes::from(bytes),
                        PutMode::Create,
                    )
                    .await?;
            }
        }
        self.commit(vec![ManifestOp::Add(rs)]).await?;
        metrics::counter!("strata_tier_uploaded_bytes_total").increment(rs.size_bytes);
        metrics::counter!("strata_tier_uploaded_segments_total").increment(1);
        Ok(rs)
    }

    /// Commits ops (the writer lock is held by the caller): validate against the
    /// manifest, write the delta with no lock held, apply it. Every
    /// [`manifest_store::SNAPSHOT_EVERY`] commits a snapshot is written.
    async fn commit(&self, ops: Vec<ManifestOp>) -> Result<(), TierError> {
        let delta = manifest_store::prepare(&self.manifest(), ops)?;
        match manifest_store::put_delta(&self.store, &self.key, &delta).await {
            Ok(()) => {}
            Err(TierError::Fenced { seq }) => {
                self.fenced
                    .store(true, std::sync::atomic::Ordering::Release);
                tracing::warn!(partition = %self.key.prefix(), seq, "fenced by another leader's manifest commit");
                return Err(TierError::Fenced { seq });
            }
            Err(e) => return Err(e),
        }
        let snapshot = {
            let mut m = self.manifest.write().unwrap_or_else(|e| e.into_inner());
            m.apply_delta(&delta)?;
            manifest_store::needs_snapshot(&m).then(|| (m.seq(), Bytes::from(m.encode_snapshot())))
        };
        if let Some((seq, bytes)) = snapshot
            && let Err(e) = manifest_store::write_snapshot(&self.store, &self.key, seq, bytes).await
        {
            tracing::warn!(partition = %self.key.prefix(), error = %e, "manifest compaction failed");
        }
        Ok(())
    }

    /// Moves the remote log start forward to `offset` (published in the manifest first),
    /// then deletes the objects of the segments wholly below it. Returns them.
    pub async fn advance_start(&self, offset: Offset) -> Result<Vec<RemoteSegment>, TierError> {
        let _w = self.writer.lock().await;
        let doomed: Vec<RemoteSegment> = {
            let m = self.manifest();
            if m.log_start_offset().is_none_or(|s| offset <= s) {
                return Ok(vec![]);
            }
            m.segments_below(offset).to_vec()
        };
        self.commit(vec![ManifestOp::AdvanceStart {
            log_start_offset: offset,
        }])
        .await?;
        for s in &doomed {
            self.delete_segment_objects(s).await;
            self.indexes
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&s.id);
        }
        metrics::counter!("strata_tier_deleted_segments_total").increment(doomed.len() as u64);
        Ok(doomed)
    }

    async fn delete_segment_objects(&self, s: &RemoteSegment) {
        for ext in layout::SEGMENT_OBJECTS {
            let k = self.key.segment_object(s, ext);
            if let Err(e) = self.store.delete(&k).await {
                // Left for orphan cleanup, which retries.
                tracing::warn!(key = %k, error = %e, "cannot delete a remote segment object");
            }
        }
    }

    /// Remote retention (retention.ms / retention.bytes bound the whole log, KIP-405):
    /// the oldest remote segments past either bound are dropped. `local_bytes_beyond` is
    /// the size of the local data not yet offloaded, which counts towards the total.
    pub async fn apply_retention(
        &self,
        now_ms: i64,
        retention_ms: Option<i64>,
        retention_bytes: Option<u64>,
        local_bytes_beyond: u64,
    ) -> Result<Vec<RemoteSegment>, TierError> {
        let target = {
            let m = self.manifest();
            let mut total = m.total_bytes() + local_bytes_beyond;
            let mut target = None;
            for s in m.segments() {
                let by_time = retention_ms.is_some_and(|ms| now_ms - s.max_timestamp > ms);
                let by_size =
                    retention_bytes.is_some_and(|b| total.saturating_sub(s.size_bytes) >= b);
                if !(by_time || by_size) {
                    break;
                }
                total -= s.size_bytes;
                target = Some(s.next_offset);
            }
            target
        };
        match target {
            Some(offset) => self.advance_start(offset).await,
            None => Ok(vec![]),
        }
    }

    /// Deletes objects under this partition's `segments/` that the manifest does not name
    /// and that are older than `grace` (uploads cut short by a crash or a fencing).
    pub async fn cleanup_orphans(&self, grace: Duration) -> Result<usize, TierError> {
        let named: std::collections::HashSet<String> = self
            .manifest()
            .segments()
            .iter()
            .map(|s| s.object_stem())
            .collect();
        let cutoff = SystemTime::now()
            .checked_sub(grace)
            .unwrap_or(SystemTime::UNIX_EPOCH);
        let mut removed = 0;
        for o in self.store.list(&self.key.segments_prefix()).await? {
            let name = o.path.rsplit('/').next().unwrap_or("");
            let Some(stem) = layout::segment_stem(name) else {
                continue;
            };
            // Unnamed: an upload cut short (crash, fencing), a segment retention
            // dropped whose delete failed, or one a compaction pass replaced (kept for
            // the grace from its replacement). Young objects may be an upload in
            // progress.
            let retired_recently = self
                .retired
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(stem)
                .is_some_and(|&(_, at)| now_ms() - at < grace.as_millis() as i64);
            if !named.contains(stem) && o.last_modified <= cutoff && !retired_recently {
                self.store.delete(&o.path).await?;
                removed += 1;
            }
        }
        if removed > 0 {
            tracing::info!(partition = %self.key.prefix(), removed, "removed orphan objects");
        }
        let horizon = now_ms() - grace.as_millis() as i64;
        self.retired
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|_, (_, at)| *at > horizon);
        Ok(removed)
    }

    /// Deletes the objects of the segments a compaction pass replaced more than `grace`
    /// ago (reads that found them in an older manifest have had that long); returns how
    /// many segments' objects went. A failed delete is left to the orphan sweep.
    pub async fn delete_retired(&self, grace: Duration) -> usize {
        let horizon = now_ms() - grace.as_millis() as i64;
        let due: Vec<RemoteSegment> = {
            let mut retired = self.retired.lock().unwrap_or_else(|e| e.into_inner());
            let due: Vec<RemoteSegment> = retired
                .values()
                .filter(|(_, at)| *at <= horizon)
                .map(|(s, _)| *s)
                .collect();
            for s in &due {
                retired.remove(&s.object_stem());
            }
            due
        };
        for s in &due {
            self.delete_segment_objects(s).await;
        }
        due.len()
    }

    /// Bytes `range` of a remote segment's `.log` object, straight from the store (a
    /// compaction pass reads whole segments once: through the chunk cache they would
    /// only push out what readers use).
    pub async fn read_segment_range(
        &self,
        s: &RemoteSegment,
        range: std::ops::Range<u64>,
    ) -> Result<Bytes, TierError> {
        let k = self.key.segment_object(s, "log");
        Ok(self.store.read(&k, Some(range)).await?.data)
    }

    /// The key of a remote segment's `.log` object and where in it the batch holding
    /// `offset` starts (0 at or below its base): what a reader streaming the object from
    /// there needs (Parquet backfill). Through the segment's offset index, then a walk
    /// of at most an index interval of headers.
    pub async fn batch_position(
        &self,
        s: &RemoteSegment,
        offset: Offset,
    ) -> Result<(String, u64), TierError> {
        let key = self.key.segment_object(s, "log");
        if offset <= s.base_offset {
            return Ok((key, 0));
        }
        let idx = self.index(s).await?;
        let rel = (offset - s.base_offset).clamp(0, u32::MAX as i64) as u32;
        let mut pos = idx.position_for(rel) as u64;
        let size = s.size_bytes;
        let corrupt = |key: &str, reason: String| TierError::Corrupt {
            key: key.to_string(),
            reason,
        };
        while pos < size {
            let data = self
                .store
                .get_range(&key, pos..pos + READ_SLACK.min(size - pos))
                .await?;
            let mut at = 0usize;
            while at + HEADER_LEN <= data.len() {
                let h = batch::parse_header(&data[at..])
                    .map_err(|e| corrupt(&key, format!("at byte {}: {e}", pos + at as u64)))?;
                if h.last_offset() >= offset {
                    return Ok((key, pos + at as u64));
                }
                at += h.total_size();
            }
            if at == 0 {
                break;
            }
            pos += at as u64;
        }
        Err(corrupt(
            &key,
            format!("offset {offset} not found before the end of the segment"),
        ))
    }

    /// Replaces the run `group` of this manifest's segments (consecutive, in order) by
    /// one cleaned segment covering the same offsets: its `.log` from `log_file`
    /// (`size` bytes), its indexes, its aborted transactions (`aborted`: the ABORT
    /// markers it keeps, uploaded as its `.txnindex` when there are any), and the
    /// producer snapshot and leader epochs of the group's last segment (the state at
    /// the same end offset). Objects first, then the
    /// manifest's `Replace`; the replaced objects are retired, and the orphan sweep
    /// deletes them after its grace period. A manifest that changed meanwhile (a
    /// retention pass, another writer) refuses the commit: the new objects are then
    /// deleted and [`TierError::Manifest`] returned.
    #[allow(clippy::too_many_arguments)]
    pub async fn replace(
        &self,
        group: &[RemoteSegment],
        log_file: &Path,
        size: u64,
        index: (Vec<u8>, Vec<u8>),
        aborted: &[AbortedTxn],
        max_timestamp: i64,
        leader_epoch: i32,
    ) -> Result<RemoteSegment, TierError> {
        let (first, last) = match (group.first(), group.last()) {
            (Some(f), Some(l)) => (*f, *l),
            _ => {
                return Err(TierError::Manifest(ManifestError::NotReplaceable {
                    next: 0,
                }));
            }
        };
        let _w = self.writer.lock().await;
        if self.is_fenced() {
            return Err(TierError::Fenced {
                seq: self.manifest().seq(),
            });
        }
        let rs = RemoteSegment {
            base_offset: first.base_offset,
            next_offset: last.next_offset,
            size_bytes: size,
            max_timestamp,
            leader_epoch,
            id: Uuid::new_v4(),
            has_producer_state: last.has_producer_state,
            has_leader_epochs: last.has_leader_epochs,
            has_txn_index: !aborted.is_empty(),
            committed_at_ms: now_ms(),
        };
        let uploaded = async {
            self.store
                .put_file(
                    &self.key.segment_object(&rs, "log"),
                    log_file,
                    FileMode::Create,
                )
                .await?;
            let mut objects = vec![("index", index.0), ("timeindex", index.1)];
            if !aborted.is_empty() {
                objects.push(("txnindex", txn_index::encode(aborted)));
            }
            for (ext, bytes) in objects {
                self.store
                    .put(
                        &self.key.segment_object(&rs, ext),
                        Bytes::from(bytes),
                        PutMode::Create,
                    )
                    .await?;
            }
            for (ext, present) in [
                ("state", last.has_producer_state),
                ("epochs", last.has_leader_epochs),
            ] {
                if present {
                    let b = self.store.get(&self.key.segment_object(&last, ext)).await?;
                    self.store
                        .put(&self.key.segment_object(&rs, ext), b, PutMode::Create)
                        .await?;
                }
            }
            self.commit(vec![ManifestOp::Replace {
                replaced: group.iter().map(|s| s.id).collect(),
                with: rs,
            }])
            .await
        }
        .await;
        if let Err(e) = uploaded {
            // Nothing names them; the orphan sweep would get them too, after its grace.
            self.delete_segment_objects(&rs).await;
            return Err(e);
        }
        let at = now_ms();
        {
            let mut retired = self.retired.lock().unwrap_or_else(|e| e.into_inner());
            for s in group {
                retired.insert(s.object_stem(), (*s, at));
            }
        }
        let mut indexes = self.indexes.lock().unwrap_or_else(|e| e.into_inner());
        for s in group {
            indexes.remove(&s.id);
        }
        Ok(rs)
    }

    async fn index(&self, s: &RemoteSegment) -> Result<Arc<Indexes>, TierError> {
        if let Some(i) = self
            .indexes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&s.id)
        {
            return Ok(i.clone());
        }
        let ik = self.key.segment_object(s, "index");
        let tk = self.key.segment_object(s, "timeindex");
        let (index, timeindex) = futures::try_join!(self.store.get(&ik), self.store.get(&tk))?;
        let parsed = Indexes::decode(&index, &timeindex).map_err(|_| TierError::Corrupt {
            key: ik,
            reason: "index length is not whole entries".into(),
        })?;
        let parsed = Arc::new(parsed);
        let mut g = self.indexes.lock().unwrap_or_else(|e| e.into_inner());
        if g.len() >= INDEX_CACHE_ENTRIES {
            // Any entry will do: indexes are small and cheap to fetch again.
            if let Some(k) = g.keys().next().copied() {
                g.remove(&k);
            }
        }
        g.insert(s.id, parsed.clone());
        Ok(parsed)
    }

    /// The aborted transactions a read_committed fetch of `[from, upper)` carries, from
    /// the `.txnindex` objects of the remote segments that start below `below` (the
    /// local start: the local log answers for markers from there on), as
    /// [`txn_index::collect`] finds them. Also returns whether the search ended (an
    /// entry's last stable offset reached `upper`): if not, the local log continues it.
    pub async fn aborted_transactions(
        &self,
        from: Offset,
        upper: Offset,
        below: Offset,
    ) -> Result<(Vec<AbortedTxn>, bool), TierError> {
        let segments: Vec<RemoteSegment> = self
            .manifest()
            .segments()
            .iter()
            .filter(|s| s.has_txn_index && s.next_offset > from && s.base_offset < below)
            .copied()
            .collect();
        let mut out = Vec::new();
        for s in segments {
            let entries = self.txn_index(&s).await?;
            let local = |e: &&AbortedTxn| e.last_offset < below;
            if txn_index::collect(entries.iter().filter(local), from, upper, &mut out) {
                return Ok((out, true));
            }
        }
        Ok((out, false))
    }

    async fn txn_index(&self, s: &RemoteSegment) -> Result<Arc<Vec<AbortedTxn>>, TierError> {
        if let Some(i) = self
            .txn_indexes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&s.id)
        {
            return Ok(i.clone());
        }
        let k = self.key.segment_object(s, "txnindex");
        let bytes = self.store.get(&k).await?;
        let entries = txn_index::decode(&bytes).map_err(|e| TierError::Corrupt {
            key: k,
            reason: e.to_string(),
        })?;
        let entries = Arc::new(entries);
        let mut g = self.txn_indexes.lock().unwrap_or_else(|e| e.into_inner());
        if g.len() >= INDEX_CACHE_ENTRIES
            && let Some(k) = g.keys().next().copied()
        {
            g.remove(&k);
        }
        g.insert(s.id, entries.clone());
        Ok(entries)
    }

    /// Reads whole batches from object storage starting with the batch that holds
    /// `offset`, up to `max_bytes` (at least one whole batch), from one segment, through
    /// the chunk cache. The bytes are exactly what a local read of that segment returned.
    pub async fn read(
        &self,
        offset: Offset,
        max_bytes: usize,
        reader: ReaderId,
    ) -> Result<RemoteRead, TierError> {
        let seg = *self
            .manifest()
            .find_offset(offset)
            .ok_or(TierError::NotRemote { offset })?;
        let idx = self.index(&seg).await?;
        let rel = (offset - seg.base_offset).clamp(0, u32::MAX as i64) as u32;
        let mut pos = idx.position_for(rel) as u64;
        let key = self.key.segment_object(&seg, "log");
        let size = seg.size_bytes;
        loop {
            if pos >= size {
                return Err(TierError::Corrupt {
                    key,
                    reason: format!("offset {offset} not found before the end of the segment"),
                });
            }
            let want = (max_bytes as u64)
                .saturating_add(READ_SLACK)
                .min(size - pos);
            let data = self.cache.read(&key, size, pos..pos + want, reader).await?;
            let corrupt = |at: u64, e: batch::BatchError| TierError::Corrupt {
                key: key.clone(),
                reason: format!("at byte {at}: {e}"),
            };
            let window = find_window(&data, offset, max_bytes, None)
                .map_err(|e| corrupt(pos + e.at as u64, e.error))?;
            let read = match window {
                Window::Found {
                    start,
                    end,
                    next_offset,
                } => RemoteRead {
                    data: data.slice(start..end),
                    next_offset,
                },
                // Not even one batch header before the end: the object is shorter than
                // the manifest says, or ends in a torn batch. (Retrying the same position
                // would loop forever.)
                Window::NotFound { skip: 0 } => {
                    return Err(TierError::Corrupt {
                        key,
                        reason: format!(
                            "offset {offset} not found: {} bytes at byte {pos} do not hold a batch header",
                            data.len()
                        ),
                    });
                }
                Window::NotFound { skip } => {
                    pos += skip as u64;
                    continue;
                }
                Window::Incomplete {
                    start,
                    len,
                    next_offset,
                } => {
                    // KIP-74: the first batch whole, even past max_bytes.
                    let at = pos + start as u64;
                    if at + len as u64 > size {
                        return Err(corrupt(
                            at,
                            batch::BatchError::Truncated {
                                need: len,
                                have: (size - at) as usize,
                            },
                        ));
                    }
                    // Exactly those bytes: the batch.
                    let data = self
                        .cache
                        .read(&key, size, at..at + len as u64, reader)
                        .await?;
                    RemoteRead { data, next_offset }
                }
                // Only with a max_offset.
                Window::PastMaxOffset => RemoteRead {
                    data: Bytes::new(),
                    next_offset: offset,
                },
            };
            metrics::counter!("strata_tier_remote_read_bytes_total")
                .increment(read.data.len() as u64);
            return Ok(read);
        }
    }

    /// The first remote record at or after `timestamp`: its offset and timestamp.
    pub async fn offset_for_timestamp(
        &self,
        timestamp: i64,
        reader: ReaderId,
    ) -> Result<Option<(Offset, i64)>, TierError> {
        let (mut seg, start) = {
            let m = self.manifest();
            match (m.find_timestamp(timestamp), m.log_start_offset()) {
                (Some(s), Some(start)) => (*s, start),
                _ => return Ok(None),
            }
        };
        loop {
            let idx = self.index(&seg).await?;
            let from_rel = idx.start_for_timestamp(timestamp);
            let mut pos = idx.position_for(from_rel) as u64;
            let key = self.key.segment_object(&seg, "log");
            while pos < seg.size_bytes {
                let head = self
                    .cache
                    .read(
                        &key,
                        seg.size_bytes,
                        pos..(pos + HEADER_LEN as u64).min(seg.size_bytes),
                        reader,
                    )
                    .await?;
                let h = batch::parse_header(&head).map_err(|e| TierError::Corrupt {
                    key: key.clone(),
                    reason: e.to_string(),
                })?;
                let n = h.total_size() as u64;
                if h.max_timestamp >= timestamp && h.next_offset() > start {
                    let bytes = self
                        .cache
                        .read(&key, seg.size_bytes, pos..pos + n, reader)
                        .await?;
                    let (b, _) = RecordBatch::parse(&bytes).map_err(|e| TierError::Corrupt {
                        key: key.clone(),
                        reason: e.to_string(),
                    })?;
                    let recs = b.records().map_err(|e| TierError::Corrupt {
                        key: key.clone(),
                        reason: e.to_string(),
                    })?;
                    for r in recs.iter() {
                        let r = r.map_err(|e| TierError::Corrupt {
                            key: key.clone(),
                            reason: e.to_string(),
                        })?;
                        if r.offset >= start && r.timestamp >= timestamp {
                            return Ok(Some((r.offset, r.timestamp)));
                        }
                    }
                }
                pos += n;
            }
            match self.manifest().next_segment(&seg) {
                Some(next) => seg = *next,
                None => return Ok(None),
            }
        }
    }

    /// Reloads the manifest from the store (after a fencing, or when becoming leader).
    pub async fn reload(&self) -> Result<(), TierError> {
        let _w = self.writer.lock().await;
        let m = manifest_store::load(&self.store, &self.key).await?;
        *self.manifest.write().unwrap_or_else(|e| e.into_inner()) = m;
        self.fenced
            .store(false, std::sync::atomic::Ordering::Release);
        Ok(())
    }

    /// What a local log restarting at the remote end takes from the last remote
    /// segment: its producer snapshot and its leader epochs, where it has them (a
    /// missing or undecodable epoch slice is left out: the log then starts without one,
    /// as it did before slices were uploaded).
    pub async fn end_state(&self) -> Result<RemoteEndState, TierError> {
        let Some(last) = self.manifest().segments().last().copied() else {
            return Ok(RemoteEndState::default());
        };
        let producer_snapshot = self.producer_state(&last).await?.map(|b| b.to_vec());
        let leader_epochs = if last.has_leader_epochs {
            match self
                .store
                .get(&self.key.segment_object(&last, "epochs"))
                .await
            {
                Ok(b) => epoch::decode(&b),
                Err(e) if e.kind() == ErrorKind::NotFound => None,
                Err(e) => return Err(e.into()),
            }
        } else {
            None
        };
        Ok(RemoteEndState {
            producer_snapshot,
            leader_epochs,
        })
    }

    /// Downloads a remote segment's producer-state snapshot, if it has one.
    pub async fn producer_state(&self, s: &RemoteSegment) -> Result<Option<Bytes>, TierError> {
        if !s.has_producer_state {
            return Ok(None);
        }
        match self.store.get(&self.key.segment_object(s, "state")).await {
            Ok(b) => Ok(Some(b)),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e.into()),
        }
    }
}

pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
