//! Compaction of a compacted topic's remote tier, so that the bucket keeps what a fully
//! local compacted log would (the latest record per key, tombstones within
//! `delete.retention.ms`) instead of every overwritten value.
//!
//! A compacted partition uploads only cleaned segments (below its local cleaner
//! checkpoint), but once uploaded they are not cleaned again by the local cleaner, and
//! the local copy goes once offloaded. So the leader's archiver runs a remote pass after
//! the local cleaner has moved: the same algorithm as the local pass (strata-log's
//! `map_keys`, `Filter` and `SegmentBuilder`), over the log as a reader from offset 0 sees
//! it:
//!
//! 1. The offset map takes every key from the remote checkpoint (kept in memory: after a
//!    restart the first pass maps from the remote start) up to the local cleaner's
//!    checkpoint: the remote segments below the local log start, then the local log.
//!    If the map fills, the pass stops there and the next one goes on.
//! 2. The remote segments below that point are rewritten, in groups of at most
//!    `segment.bytes`, each group into one segment over the same offsets (the header of
//!    the group's last batch stays, so segments stay contiguous), read straight from the
//!    store in ranges and written to a staging file beside the partition directory.
//! 3. A group whose batches all stay as they were is left alone; another is uploaded
//!    under a new name and swapped in with the manifest's `Replace` (a conditional
//!    commit: refused if retention or another writer changed the run meanwhile). The
//!    replaced objects are deleted by the orphan sweep once its grace has passed since
//!    the replacement, so reads already on them finish. A crash between the upload and
//!    the commit leaves objects no manifest names: orphans, swept the same way.
//!
//! Cost: every pass reads the remote segments below its end point once (a GET per
//! 8 MiB) and the dirty part twice, and writes what changed; passes run only when the
//! local cleaner has moved since the last one.

use std::collections::HashMap;
use std::io::BufWriter;
use std::path::PathBuf;
use std::sync::Arc;

use strata_log::{
    Filter, FilterStats, OffsetMap, SegmentBuilder, TxnCleaner, group_segments, map_keys,
};
use strata_proto::batch;
use strata_proto::{Offset, ProducerId};

use crate::error::TierError;
use crate::manifest::RemoteSegment;
use crate::remote::RemotePartition;
use crate::tiered_log::TieredLog;

/// How much of a remote segment one store read fetches.
const READ_CHUNK: u64 = 8 << 20;

/// What a remote pass did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RemoteCleanOutcome {
    /// Keys the offset map took.
    pub keys: usize,
    /// The remote checkpoint after the pass.
    pub cleaned_to: Offset,
    pub segments_before: usize,
    pub segments_after: usize,
    pub bytes_before: u64,
    pub bytes_after: u64,
    pub records_removed: u64,
    /// Groups whose commit the manifest refused (it changed meanwhile).
    pub groups_abandoned: usize,
}

/// A partition's remote-compaction state, kept by its archiver.
#[derive(Debug, Default)]
pub struct RemoteCleaner {
    /// The remote tier is cleaned below this; `None` until the first pass.
    cleaned_to: Option<Offset>,
    /// The local cleaner checkpoint the last pass started from.
    local_seen: Option<Offset>,
}

/// The settings of a pass.
#[derive(Clone, Copy, Debug)]
pub struct RemoteCleanSettings {
    /// Memory of the pass's offset map.
    pub map_bytes: usize,
    pub segment_bytes: u64,
    pub index_interval: u64,
    pub delete_retention_ms: i64,
    /// The leader epoch the replacements are committed under.
    pub leader_epoch: i32,
    pub now_ms: i64,
}

impl RemoteCleaner {
    /// Whether a pass would do anything: the local cleaner has moved since the last one.
    pub fn due(&self, log: &TieredLog) -> bool {
        log.remote().is_some()
            && log
                .local()
                .cleaned_to()
                .is_some_and(|c| self.local_seen != Some(c))
    }

    /// One pass (see the module docs); `None` when none was due.
    pub async fn run(
        &mut self,
        log: &TieredLog,
        settings: RemoteCleanSettings,
    ) -> Result<Option<RemoteCleanOutcome>, TierError> {
        let Some(remote) = log.remote() else {
            return Ok(None);
        };
        let local = log.local();
        let Some(local_cleaned) = local.cleaned_to() else {
            return Ok(None);
        };
        if self.local_seen == Some(local_cleaned) || remote.is_fenced() {
            return Ok(None);
        }
        let segments: Vec<RemoteSegment> = remote.manifest_snapshot().segments().to_vec();
        let Some(first) = segments.first() else {
            self.local_seen = Some(local_cleaned);
            return Ok(None);
        };
        let from = self
            .cleaned_to
            .unwrap_or(first.base_offset)
            .max(first.base_offset);
        let local_start = local.log_start_offset();
        let mut out = RemoteCleanOutcome::default();
        // Every aborted transaction of the range (the bucket's below the local start,
        // then the local log's): their records are neither mapped nor kept, as in the
        // local pass.
        let (mut aborted, _) = remote
            .aborted_transactions(first.base_offset, Offset::MAX, local_start)
            .await?;
        aborted.extend(local.aborted_transactions(local_start, Offset::MAX));
        let mut map_txns = TxnCleaner::new(aborted.clone());

        // 1. The offset map: the remote segments below the local start, then the local
        // log up to its cleaner checkpoint.
        let mut map = OffsetMap::with_memory(settings.map_bytes);
        let mut end = from;
        let mut stopped = None;
        for s in segments
            .iter()
            .filter(|s| s.next_offset > from && s.base_offset < local_start)
        {
            for_each_chunk(&remote, s, &mut |chunk| {
                if stopped.is_none() {
                    stopped = map_keys(chunk, &mut map, &mut map_txns)?;
                }
                Ok(())
            })
            .await?;
            if stopped.is_some() {
                break;
            }
            end = s.next_offset;
        }
        if stopped.is_none() && local_cleaned > end.max(local_start) {
            tokio::task::block_in_place(|| {
                local.read_range_chunks(end.max(local_start), local_cleaned, &mut |chunk| {
                    if stopped.is_none() {
                        stopped = map_keys(&chunk, &mut map, &mut map_txns)?;
                    }
                    Ok(())
                })
            })?;
            if stopped.is_none() {
                end = local_cleaned;
            }
        }
        if let Some(at) = stopped {
            end = at;
        }
        out.keys = map.len();

        // 2-3. Rewrite the remote segments below `end`, group by group.
        let producer_last: HashMap<ProducerId, Offset> = local
            .producer_state()
            .entries()
            .map(|(pid, e)| (pid, e.last_offset()))
            .collect();
        let filter = Filter {
            map: &map,
            end,
            now: settings.now_ms,
            delete_retention_ms: settings.delete_retention_ms,
            producer_last: &producer_last,
        };
        let staging = staging_file(log);
        let doomed: Vec<RemoteSegment> = segments
            .iter()
            .filter(|s| s.base_offset < end)
            .copied()
            .collect();
        let spans = |s: &RemoteSegment| (s.base_offset, s.next_offset, s.size_bytes);
        let mut txns = TxnCleaner::new(aborted);
        for group in group_segments(&doomed, settings.segment_bytes, spans) {
            let result =
                rewrite_group(&remote, group, &filter, &mut txns, &staging, settings).await;
            let _ = std::fs::remove_file(&staging);
            let (replaced, stats) = match result {
                Ok(Some(x)) => x,
                Ok(None) => continue,
                Err(TierError::Manifest(_)) => {
                    out.groups_abandoned += 1;
                    continue;
                }
                Err(e) => return Err(e),
            };
            out.segments_before += group.len();
            out.segments_after += 1;
            out.bytes_before += group.iter().map(|s| s.size_bytes).sum::<u64>();
            out.bytes_after += replaced.size_bytes;
            out.records_removed += stats.records_removed;
        }
        out.cleaned_to = end;
        self.cleaned_to = Some(end);
        self.local_seen = Some(local_cleaned);
        if out.segments_before > 0 {
            metrics::counter!("strata_tier_compacted_bytes_total")
                .increment(out.bytes_before.saturating_sub(out.bytes_after));
        }
        Ok(Some(out))
    }
}

/// Filters one group of remote segments into one segment in `staging` and swaps it in;
/// `None` when nothing in it changes.
async fn rewrite_group(
    remote: &Arc<RemotePartition>,
    group: &[RemoteSegment],
    filter: &Filter<'_>,
    txns: &mut TxnCleaner,
    staging: &PathBuf,
    settings: RemoteCleanSettings,
) -> Result<Option<(RemoteSegment, FilterStats)>, TierError> {
    let file = std::fs::File::create(staging)?;
    let mut builder = SegmentBuilder::new(
        group[0].base_offset,
        settings.index_interval,
        BufWriter::with_capacity(1 << 20, file),
    );
    let mut stats = FilterStats::default();
    let mut last_header = None;
    for s in group {
        for_each_chunk(remote, s, &mut |chunk| {
            tokio::task::block_in_place(|| {
                for b in batch::batches(chunk) {
                    let b = b?;
                    last_header = Some(*b.header());
                    if let Some(kept) = filter.batch(&b, txns, &mut stats)? {
                        builder.push(kept)?;
                    }
                }
                Ok(())
            })
        })
        .await?;
    }
    // The ABORT markers this group keeps, with their index entries.
    let kept_aborts = txns.take_kept();
    let last = group[group.len() - 1];
    let built = builder.finish(last.next_offset, || {
        last_header.ok_or(strata_log::LogError::NoBatch {
            offset: last.base_offset,
            end: last.next_offset,
        })
    })?;
    if !(stats.changed || built.emptied_last) {
        return Ok(None);
    }
    let file = built
        .out
        .into_inner()
        .map_err(|e| TierError::Io(e.into_error()))?;
    file.sync_all()?;
    let replaced = remote
        .replace(
            group,
            staging,
            built.size,
            built.index.encode(),
            &kept_aborts,
            built.max_timestamp,
            settings.leader_epoch,
        )
        .await?;
    tracing::info!(
        partition = %remote.key().prefix(),
        base = replaced.base_offset, next = replaced.next_offset,
        segments = group.len(), before = group.iter().map(|s| s.size_bytes).sum::<u64>(),
        after = replaced.size_bytes,
        "compacted remote segments"
    );
    Ok(Some((replaced, stats)))
}

/// Hands `f` the whole batches of a remote segment's `.log`, read from the store in
/// ranges of [`READ_CHUNK`] (a batch across two reads is handed over once whole).
async fn for_each_chunk(
    remote: &RemotePartition,
    s: &RemoteSegment,
    f: &mut (dyn FnMut(&[u8]) -> Result<(), strata_log::LogError> + Send),
) -> Result<(), TierError> {
    let mut carry: Vec<u8> = Vec::new();
    let mut pos = 0u64;
    while pos < s.size_bytes {
        let to = (pos + READ_CHUNK).min(s.size_bytes);
        let data = remote.read_segment_range(s, pos..to).await?;
        if data.is_empty() {
            break;
        }
        pos += data.len() as u64;
        carry.extend_from_slice(&data);
        let whole = whole_batches(&carry);
        f(&carry[..whole])?;
        carry.drain(..whole);
    }
    if !carry.is_empty() || pos < s.size_bytes {
        return Err(TierError::Corrupt {
            key: remote.key().segment_object(s, "log"),
            reason: format!(
                "the object ends in a partial batch or short of its recorded size ({pos} of {} bytes)",
                s.size_bytes
            ),
        });
    }
    Ok(())
}

/// How many leading bytes of `buf` are whole batches.
fn whole_batches(buf: &[u8]) -> usize {
    let mut at = 0;
    while let Ok(h) = batch::parse_header(&buf[at..]) {
        if at + h.total_size() > buf.len() {
            break;
        }
        at += h.total_size();
    }
    at
}

/// Where a pass writes the segment it is building: beside the partition's directory.
fn staging_file(log: &TieredLog) -> PathBuf {
    let dir = log.local().dir();
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    dir.with_file_name(format!(".remote-clean.{name}"))
}
