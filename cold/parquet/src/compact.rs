//! Small-file compaction: a partition's small Parquet files of one UTC day are rewritten
//! into files of about the topic's `parquet.target.file.bytes`, so a low-volume topic
//! (a segment, and so a file, every few minutes) does not leave thousands of tiny files
//! for engines to open.
//!
//! # What is rewritten ([`plan`])
//!
//! A file is *small* below three quarters of the target (Iceberg's
//! `rewrite_data_files` uses the same default for its `min-file-size-bytes`) and when it
//! is not a rewrite already ([`ManifestEntry::compacted_from`]). Runs of
//! small files that follow each other in the manifest, hold rows of one UTC day only, and
//! have nothing unconverted between them (no dead letter, no backfill still short of the
//! files' start) and the same columns ([`ManifestEntry::schema`]) are packed in order into groups of at most the target. A group of two or
//! more files is rewritten when it is full (its files reach three quarters of the target,
//! or the next file would not fit) or when its day is over (by the wall clock): each byte
//! is rewritten about once, into a file of about the target, and a day's last files once
//! more at most, rather than each new file making the day's file grow again. `force`
//! ([`CompactPolicy::force`], `strata tier iceberg compact`) rewrites every group of two
//! or more, whatever its size.
//!
//! # How
//!
//! The inputs are read one at a time (each is small: below the target) and their row
//! groups go through one Arrow writer with the topic's writer properties, row groups cut
//! at the topic's row-group size, into one multipart upload, as a conversion's output
//! does. The new file keeps the inputs' Arrow schema (field ids included) and key-value
//! metadata, with the offset range of the whole group: its key is
//! `date={day}/{first:020}-{last:020}.parquet` of the group, distinct from every input's
//! (a group spans two files or more). Inputs whose schema differs from the first's (a
//! value schema changed in between) end the group there.
//!
//! The manifest update is the commit point, conditioned on the manifest read like every
//! other (see [`crate::sink`]): the group's entries are replaced by the new file's. A
//! crash before it leaves an object no manifest names; the retry writes the same key.
//! Only after the commit are the inputs deleted ([`ExpiredObjects::Delete`]) or left for
//! the Iceberg publisher ([`ExpiredObjects::Keep`]: the table's snapshots still name them
//! until they expire).

use std::collections::BTreeSet;
use std::ops::Range;
use std::sync::Arc;

use arrow::datatypes::{Fields, Schema};
use bytes::Bytes;
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::file::metadata::KeyValue;
use strata_proto::ids::{Offset, PartitionId};

use crate::STRATA_VERSION;
use crate::error::ConvertError;
use crate::schema::{metadata_keys, writer_properties};
use crate::sink::{ExpiredObjects, Manifest, ManifestEntry, ParquetSink, SinkError};
use crate::stream::Upload;

const DAY_MS: i64 = 86_400_000;

/// At most this many passes of a forced compaction.
const FORCED_PASSES: usize = 8;

/// When and which files [`ParquetSink::compact`] rewrites.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompactPolicy {
    /// `parquet.target.file.bytes`: the size files are rewritten into.
    pub target_bytes: u64,
    /// Rewrite every group of two or more small files, not only full groups and days
    /// that are over.
    pub force: bool,
    /// Only these files (keys): those an Iceberg table holds, so that every file a
    /// rewrite replaces is one the table's snapshots name (and their expiry deletes),
    /// never one the table has not taken yet (a rewrite's own, say). `None`: any file.
    pub only: Option<BTreeSet<String>>,
    /// The wall clock, in milliseconds since the epoch: a day before today's is over.
    pub now_ms: i64,
}

impl CompactPolicy {
    /// The automatic policy for `target_bytes` at `now_ms`.
    pub fn new(target_bytes: u64, now_ms: i64) -> CompactPolicy {
        CompactPolicy {
            target_bytes,
            force: false,
            only: None,
            now_ms,
        }
    }

    /// Below three quarters of the target, and not already a rewrite (unless forced:
    /// a rewrite's file can come out smaller than its inputs, compressed together, and
    /// would otherwise be rewritten again and again).
    fn is_small(&self, f: &ManifestEntry) -> bool {
        is_small_file(f.bytes, self.target_bytes) && (self.force || f.compacted_from == 0)
    }
}

/// Whether a file of `bytes` is small for `target_bytes`: below three quarters of it.
pub fn is_small_file(bytes: u64, target_bytes: u64) -> bool {
    u128::from(bytes) * 4 < u128::from(target_bytes) * 3
}

/// A rewrite [`ParquetSink::compact`] committed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Compacted {
    /// The new file's manifest entry.
    pub file: ManifestEntry,
    /// The entries it replaced, in offset order.
    pub replaced: Vec<ManifestEntry>,
}

/// The UTC day (days since the epoch) of every row of `f`, `None` when its rows span days.
fn day(f: &ManifestEntry) -> Option<i64> {
    let d = f.min_timestamp.div_euclid(DAY_MS);
    (d == f.max_timestamp.div_euclid(DAY_MS)).then_some(d)
}

/// Whether no offset between `a` and the file after it, `b`, is unconverted: a dead
/// letter lies there, or a backfill in progress has not reached the files' start.
fn adjacent(manifest: &Manifest, a: &ManifestEntry, b: &ManifestEntry) -> bool {
    let between = |o: Offset| a.last_offset < o && o < b.first_offset;
    if manifest
        .dead_letters
        .iter()
        .any(|d| between(d.first_offset) || between(d.last_offset))
    {
        return false;
    }
    match (manifest.backfill, manifest.start_offset) {
        (Some(_), Some(start)) => !(a.last_offset < start && b.first_offset >= start),
        _ => true,
    }
}

/// The groups of `manifest.files` to rewrite under `policy`, as index ranges in order
/// (see the module's doc).
pub fn plan(manifest: &Manifest, policy: &CompactPolicy) -> Vec<Range<usize>> {
    let files = &manifest.files;
    let today = policy.now_ms.div_euclid(DAY_MS);
    let eligible = |f: &ManifestEntry| {
        policy.is_small(f)
            && day(f).is_some()
            && policy.only.as_ref().is_none_or(|k| k.contains(&f.key))
    };
    let mut out = Vec::new();
    let mut i = 0;
    while i < files.len() {
        if !eligible(&files[i]) {
            i += 1;
            continue;
        }
        // The run of small files of one day from i.
        let run_day = day(&files[i]);
        let mut end = i + 1;
        while end < files.len()
            && eligible(&files[end])
            && day(&files[end]) == run_day
            && files[end].schema == files[end - 1].schema
            && adjacent(manifest, &files[end - 1], &files[end])
        {
            end += 1;
        }
        let over = run_day.is_some_and(|d| d < today);
        // Packed greedily, in order.
        let mut start = i;
        let mut bytes = 0u64;
        for (k, f) in files.iter().enumerate().take(end).skip(i) {
            let b = f.bytes;
            if k > start && bytes.saturating_add(b) > policy.target_bytes {
                // Full: the next file does not fit.
                if k - start >= 2 {
                    out.push(start..k);
                }
                (start, bytes) = (k, 0);
            }
            bytes = bytes.saturating_add(b);
        }
        let full = u128::from(bytes) * 4 >= u128::from(policy.target_bytes) * 3;
        if end - start >= 2 && (full || over || policy.force) {
            out.push(start..end);
        }
        i = end;
    }
    out
}

impl ParquetSink {
    /// Rewrites the partition's small files under `policy` ([`plan`], once per call),
    /// one group at a time, each committed to the manifest before the next; the replaced
    /// objects are then deleted or kept (`objects`). Returns the rewrites committed.
    pub async fn compact(
        &self,
        topic: &str,
        partition: PartitionId,
        policy: &CompactPolicy,
        objects: ExpiredObjects,
    ) -> Result<Vec<Compacted>, SinkError> {
        let mut done = Vec::new();
        for _ in 0..FORCED_PASSES {
            let before = done.len();
            self.compact_pass(topic, partition, policy, objects, &mut done)
                .await?;
            // Automatic compaction leaves rewrites alone; a forced one goes again while
            // it finds rewrites that fit together (a rewrite of tiny files comes out far
            // smaller than its inputs, their per-file overhead gone).
            if !policy.force || done.len() == before {
                break;
            }
        }
        Ok(done)
    }

    /// One pass of [`Self::compact`], planned once: planning again after each rewrite
    /// would find the new file (small, when forced) at the head of the next group and
    /// rewrite it again and again.
    async fn compact_pass(
        &self,
        topic: &str,
        partition: PartitionId,
        policy: &CompactPolicy,
        objects: ExpiredObjects,
        done: &mut Vec<Compacted>,
    ) -> Result<(), SinkError> {
        let (manifest, _) = self.load(topic, partition).await?;
        let groups: Vec<Vec<String>> = plan(&manifest, policy)
            .into_iter()
            .map(|g| manifest.files[g].iter().map(|f| f.key.clone()).collect())
            .collect();
        for keys in groups {
            let (mut manifest, version) = self.load(topic, partition).await?;
            // The group as planned, unless the manifest changed under it (another writer:
            // retention, a leader that took over); then it waits for the next call.
            let Some(at) = manifest.files.iter().position(|f| f.key == keys[0]) else {
                continue;
            };
            let group = at..at + keys.len();
            if manifest.files.len() < group.end
                || manifest.files[group.clone()]
                    .iter()
                    .zip(&keys)
                    .any(|(f, k)| f.key != *k)
            {
                continue;
            }
            let inputs = &manifest.files[group.clone()];
            let Some((file, used)) = self.rewrite(topic, partition, inputs).await? else {
                continue;
            };
            let replaced: Vec<ManifestEntry> = manifest
                .files
                .splice(group.start..group.start + used, [file.clone()])
                .collect();
            let key = self.layout().manifest_key(topic, partition);
            self.commit(&key, &manifest, version).await?;
            if objects == ExpiredObjects::Delete {
                for f in &replaced {
                    self.store.delete(&f.key).await?;
                }
            }
            tracing::debug!(
                topic,
                partition,
                key = %file.key,
                files = replaced.len(),
                "Parquet: small files compacted"
            );
            done.push(Compacted { file, replaced });
        }
        Ok(())
    }

    /// Writes `inputs` (two or more files in offset order) as one file; returns its
    /// entry and how many inputs it holds (the first ones: an input whose schema differs
    /// from the first's ends it), or `None` when that leaves fewer than two.
    async fn rewrite(
        &self,
        topic: &str,
        partition: PartitionId,
        inputs: &[ManifestEntry],
    ) -> Result<Option<(ManifestEntry, usize)>, SinkError> {
        let mut n = inputs.len();
        while n >= 2 {
            match self.write_group(topic, partition, &inputs[..n]).await? {
                Ok(entry) => return Ok(Some((entry, n))),
                // The key names the whole group's offsets: start again with the files
                // before the odd one.
                Err(mismatch) => n = mismatch,
            }
        }
        Ok(None)
    }

    /// Writes all of `inputs` as one file, or `Err(i)` when input `i`'s schema differs
    /// from the first's (nothing is left in the store then).
    async fn write_group(
        &self,
        topic: &str,
        partition: PartitionId,
        inputs: &[ManifestEntry],
    ) -> Result<Result<ManifestEntry, usize>, SinkError> {
        let mut opts = self.options.clone();
        opts.topic = topic.to_string();
        opts.partition = partition;
        let props = writer_properties(&opts)?;
        let first = inputs[0].first_offset;
        let last = inputs[inputs.len() - 1].last_offset;
        let key = self
            .layout()
            .file_key(topic, partition, inputs[0].min_timestamp, first, last);
        let name = |_: i64| key.clone();
        let mut upload = Upload::new(self.store.as_ref(), self.part_size());
        let written = async {
            // The reader puts the file's key-value metadata into its Arrow schema's: the
            // columns are what must match, and the metadata is set below.
            let mut writer: Option<(ArrowWriter<Vec<u8>>, Fields)> = None;
            let mut sent = 0u64;
            for (i, f) in inputs.iter().enumerate() {
                let body: Bytes = self.store.get(&f.key).await?;
                let builder =
                    ParquetRecordBatchReaderBuilder::try_new(body).map_err(ConvertError::from)?;
                let fields = builder.schema().fields().clone();
                let w = match &mut writer {
                    None => {
                        let mut w = ArrowWriter::try_new(
                            Vec::new(),
                            Arc::new(Schema::new(fields.clone())),
                            Some(props.clone()),
                        )
                        .map_err(ConvertError::from)?;
                        let kv = builder.metadata().file_metadata().key_value_metadata();
                        for e in kv.into_iter().flatten() {
                            if ![
                                metadata_keys::FIRST_OFFSET,
                                metadata_keys::LAST_OFFSET,
                                metadata_keys::VERSION,
                            ]
                            .contains(&e.key.as_str())
                            {
                                w.append_key_value_metadata(e.clone());
                            }
                        }
                        &mut writer.insert((w, fields)).0
                    }
                    Some((_, columns)) if *columns != fields => return Ok(Err(i)),
                    Some((w, _)) => w,
                };
                let mut group_bytes = 0usize;
                for batch in builder.build().map_err(ConvertError::from)? {
                    let batch = batch.map_err(ConvertError::from)?;
                    w.write(&batch).map_err(ConvertError::from)?;
                    group_bytes += batch.get_array_memory_size();
                    if group_bytes >= opts.row_group_bytes {
                        w.flush().map_err(ConvertError::from)?;
                        group_bytes = 0;
                    }
                    let buffered = w.inner().len();
                    if buffered >= upload.part_size() {
                        upload.send_parts(w.inner_mut(), 0, &name).await?;
                        sent += (buffered - w.inner().len()) as u64;
                    }
                }
            }
            let (mut w, _) = writer.expect("at least two inputs");
            for (k, v) in [
                (metadata_keys::FIRST_OFFSET, first.to_string()),
                (metadata_keys::LAST_OFFSET, last.to_string()),
                (metadata_keys::VERSION, STRATA_VERSION.to_string()),
            ] {
                w.append_key_value_metadata(KeyValue::new(k.to_string(), v));
            }
            let rest = w.into_inner().map_err(ConvertError::from)?;
            let bytes = sent + rest.len() as u64;
            let key = upload.finish(rest, 0, &name).await?;
            Ok(Ok(ManifestEntry {
                key,
                first_offset: first,
                last_offset: last,
                min_timestamp: inputs.iter().map(|f| f.min_timestamp).min().unwrap_or(0),
                max_timestamp: inputs.iter().map(|f| f.max_timestamp).max().unwrap_or(0),
                rows: inputs.iter().map(|f| f.rows).sum(),
                bytes,
                compacted_from: u32::try_from(inputs.len()).unwrap_or(u32::MAX),
                schema: inputs[0].schema,
                dead_letter_files: inputs
                    .iter()
                    .flat_map(|f| f.dead_letter_files.iter().cloned())
                    .collect(),
            }))
        }
        .await;
        if !matches!(written, Ok(Ok(_))) {
            upload.abort().await;
        }
        written
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::sink::{BackfillCursor, DeadLetter, MANIFEST_FORMAT};

    fn entry(first: Offset, last: Offset, ts: i64, bytes: u64) -> ManifestEntry {
        ManifestEntry {
            key: format!("{first}-{last}"),
            first_offset: first,
            last_offset: last,
            min_timestamp: ts,
            max_timestamp: ts + 10,
            rows: 1,
            bytes,
            compacted_from: 0,
            schema: None,
            dead_letter_files: Vec::new(),
        }
    }

    fn manifest(files: Vec<ManifestEntry>) -> Manifest {
        Manifest {
            format: MANIFEST_FORMAT,
            topic: "t".into(),
            partition: 0,
            next_offset: files.last().map(|f| f.last_offset + 1),
            start_offset: files.first().map(|f| f.first_offset),
            files,
            backfill: None,
            dead_letters: Vec::new(),
        }
    }

    /// Ten files of 10 bytes, offsets 10 apart, on day 1.
    fn ten() -> Vec<ManifestEntry> {
        (0..10)
            .map(|i| entry(i * 10, i * 10 + 9, DAY_MS + i, 10))
            .collect()
    }

    #[test]
    fn full_groups_now_and_the_rest_when_the_day_is_over() {
        let m = manifest(ten());
        let today = CompactPolicy::new(40, DAY_MS + 5);
        // 4 files fit in 40; the last two (20 bytes, below 30) wait.
        assert_eq!(plan(&m, &today), vec![0..4, 4..8]);
        let over = CompactPolicy::new(40, 2 * DAY_MS);
        assert_eq!(plan(&m, &over), vec![0..4, 4..8, 8..10]);
        let force = CompactPolicy {
            force: true,
            ..today.clone()
        };
        assert_eq!(plan(&m, &force), vec![0..4, 4..8, 8..10]);
        // Files at three quarters of the target are not small.
        assert!(plan(&m, &CompactPolicy::new(13, 3 * DAY_MS)).is_empty());
        // A bound on the offsets.
        let bounded = CompactPolicy {
            only: Some(m.files[..5].iter().map(|f| f.key.clone()).collect()),
            ..over.clone()
        };
        assert_eq!(plan(&m, &bounded), vec![0..4]);
    }

    #[test]
    fn groups_stop_at_days_dead_letters_and_a_backfill_gap() {
        let mut files = ten();
        files[5].min_timestamp += DAY_MS;
        files[5].max_timestamp += DAY_MS;
        let over = CompactPolicy::new(1000, 5 * DAY_MS);
        assert_eq!(plan(&manifest(files.clone()), &over), vec![0..5, 6..10]);
        // A file spanning midnight is left alone.
        files[5].min_timestamp -= DAY_MS;
        assert_eq!(plan(&manifest(files), &over), vec![0..5, 6..10]);

        let mut m = manifest(ten());
        m.dead_letters.push(DeadLetter {
            first_offset: 30,
            last_offset: 30,
            reason: "bad".into(),
            at_ms: 0,
        });
        m.files[3].first_offset = 31;
        assert_eq!(plan(&m, &over), vec![0..3, 3..10]);

        let mut m = manifest(ten());
        m.files[6].schema = Some(7);
        assert_eq!(plan(&m, &over), vec![0..6, 7..10]);

        let mut m = manifest(ten());
        m.start_offset = Some(50);
        m.backfill = Some(BackfillCursor { from: 0, next: 45 });
        m.files[4].last_offset = 44;
        assert_eq!(plan(&m, &over), vec![0..5, 5..10]);
    }

    proptest! {
        /// Groups are ordered, disjoint, of two or more small files of one day in a row
        /// within the bound, and hold at most the target.
        #[test]
        fn plans_respect_their_rules(
            sizes in prop::collection::vec((1u64..200, 0i64..3), 0..40),
            target in 1u64..600,
            force in any::<bool>(),
            now_day in 0i64..4,
            only in prop::option::of(prop::collection::btree_set(0usize..40, 0..40)),
        ) {
            let files: Vec<ManifestEntry> = sizes
                .iter()
                .enumerate()
                .map(|(i, &(b, d))| entry(i as i64 * 10, i as i64 * 10 + 9, d * DAY_MS, b))
                .collect();
            let m = manifest(files.clone());
            let only: Option<BTreeSet<String>> =
                only.map(|o| o.iter().filter_map(|&i| files.get(i)).map(|f| f.key.clone()).collect());
            let policy = CompactPolicy {
                target_bytes: target,
                force,
                only: only.clone(),
                now_ms: now_day * DAY_MS,
            };
            let groups = plan(&m, &policy);
            let mut prev_end = 0;
            for g in &groups {
                prop_assert!(g.start >= prev_end);
                prop_assert!(g.len() >= 2);
                prev_end = g.end;
                let fs = &files[g.clone()];
                prop_assert!(fs.iter().map(|f| f.bytes).sum::<u64>() <= target);
                prop_assert!(fs.iter().all(|f| policy.is_small(f)));
                prop_assert!(fs.iter().all(|f| day(f) == day(&fs[0])));
                prop_assert!(only.as_ref().is_none_or(|k| fs.iter().all(|f| k.contains(&f.key))));
            }
            // Without a bound and with force, no two small same-day neighbours that
            // fit together are left apart.
            if force && only.is_none() {
                let grouped = |i: usize| groups.iter().any(|g| g.contains(&i));
                for i in 1..files.len() {
                    let (a, b) = (&files[i - 1], &files[i]);
                    if policy.is_small(a) && policy.is_small(b) && day(a) == day(b)
                        && a.bytes + b.bytes <= target
                    {
                        prop_assert!(grouped(i - 1) || grouped(i));
                    }
                }
            }
        }
    }
}
