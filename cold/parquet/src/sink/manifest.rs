//! A partition's progress manifest, `_manifest.json`: its format, reading it (and
//! listing a topic's files through it), and the conditional write that keeps each offset
//! range converted once.

use std::sync::atomic::Ordering;

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use strata_proto::ids::{Offset, PartitionId};
use strata_store::{BlobStore, ErrorKind, PutMode, Version};

use super::{ParquetLayout, ParquetSink, SinkError};

/// The version of the manifest format written by this code.
pub const MANIFEST_FORMAT: u32 = 1;

/// The manifest's file name inside a partition's directory.
pub const MANIFEST_NAME: &str = "_manifest.json";

/// One file in a partition's manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManifestEntry {
    /// The object's key, relative to the store's root.
    pub key: String,
    /// The segment's offset range, control and aborted records included.
    pub first_offset: Offset,
    pub last_offset: Offset,
    /// Over the rows (milliseconds since the epoch, UTC).
    pub min_timestamp: i64,
    pub max_timestamp: i64,
    pub rows: u64,
    /// The file's size.
    pub bytes: u64,
    /// How many files small-file compaction rewrote into this one (0: a converted
    /// segment). Compaction leaves such a file alone unless forced
    /// ([`crate::compact`]).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub compacted_from: u32,
    /// A fingerprint of the file's columns (names, types, field ids): compaction only
    /// groups files with the same one. `None` in manifests written before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<u64>,
    /// JSON values: the dead-letter files of the rows whose value did not fit the value
    /// schema (raw value and reason, [`crate::schema::dead_letter_schema`]), in offset
    /// order. They live and expire with this file; a compaction's file takes its inputs'.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dead_letter_files: Vec<DeadLetterFile>,
}

/// A dead-letter file: rows of a JSON topic whose value did not fit its value schema,
/// in [`ParquetLayout::dead_letters`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeadLetterFile {
    pub key: String,
    /// The first and last row's offsets.
    pub first_offset: Offset,
    pub last_offset: Offset,
    pub rows: u64,
    pub bytes: u64,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// A partition's progress: `_manifest.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// [`MANIFEST_FORMAT`].
    pub format: u32,
    pub topic: String,
    pub partition: PartitionId,
    /// The first offset not yet converted: the last segment's last offset + 1. `None`
    /// until the first segment is done. Files may end before it (segments without rows).
    pub next_offset: Option<Offset>,
    /// In offset order, without overlaps. Expired files are removed.
    pub files: Vec<ManifestEntry>,
    /// The first offset the files cover from: where conversion began, or where a
    /// finished backfill began. `None` until the first segment is done (manifests from
    /// before this field: the first file's first offset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_offset: Option<Offset>,
    /// A backfill in progress below `start_offset`: files cover `[from, next)` and
    /// `[start_offset, next_offset)`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backfill: Option<BackfillCursor>,
    /// Offset ranges no file holds because their batches cannot be converted, in offset
    /// order, without overlaps with each other or the files (see the sink module's "Dead
    /// letters"). Absent from manifests written before dead letters, and when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dead_letters: Vec<DeadLetter>,
}

/// Offsets set aside because their batches cannot be converted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeadLetter {
    pub first_offset: Offset,
    /// Inclusive, as a file's.
    pub last_offset: Offset,
    /// The conversion error of the first batch at fault.
    pub reason: String,
    /// When it was recorded, in milliseconds since the epoch (UTC).
    pub at_ms: i64,
}

/// How far a backfill below a manifest's start has come.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackfillCursor {
    /// Where the backfill began.
    pub from: Offset,
    /// The first offset it has not converted yet.
    pub next: Offset,
}

impl Manifest {
    fn empty(topic: &str, partition: PartitionId) -> Manifest {
        Manifest {
            format: MANIFEST_FORMAT,
            topic: topic.to_string(),
            partition,
            next_offset: None,
            files: Vec::new(),
            start_offset: None,
            backfill: None,
            dead_letters: Vec::new(),
        }
    }

    /// The first offset the files cover contiguously up to `next_offset` (a backfill in
    /// progress below it does not count until it reaches it).
    pub fn covered_start(&self) -> Option<Offset> {
        self.start_offset
            .or_else(|| self.files.first().map(|f| f.first_offset))
            .or(self.next_offset)
    }
}

/// A partition's manifest as a reader wants it: one GET, no version (a fresh, empty one
/// when there is none yet). Readers that serve fetches from the files call this; writers
/// go through [`ParquetSink`].
pub async fn read_manifest(
    store: &dyn BlobStore,
    layout: &ParquetLayout,
    topic: &str,
    partition: PartitionId,
) -> Result<Manifest, SinkError> {
    let key = layout.manifest_key(topic, partition);
    match store.get(&key).await {
        Ok(body) => parse_manifest(&key, &body, topic, partition),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(Manifest::empty(topic, partition)),
        Err(e) => Err(e.into()),
    }
}

/// The manifest stored under `key` for `topic`/`partition`, checked.
fn parse_manifest(
    key: &str,
    body: &[u8],
    topic: &str,
    partition: PartitionId,
) -> Result<Manifest, SinkError> {
    let bad = |reason: String| SinkError::BadManifest {
        key: key.to_string(),
        reason,
    };
    let manifest: Manifest = serde_json::from_slice(body).map_err(|e| bad(e.to_string()))?;
    if manifest.format != MANIFEST_FORMAT {
        return Err(bad(format!("unknown format {}", manifest.format)));
    }
    if manifest.topic != topic || manifest.partition != partition {
        return Err(bad(format!(
            "belongs to {}/{}",
            manifest.topic, manifest.partition
        )));
    }
    Ok(manifest)
}

/// A file of a topic, with its partition: what [`ParquetSink::topic_files`] returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicFile {
    pub partition: PartitionId,
    pub entry: ManifestEntry,
}

impl ParquetSink {
    /// The partition's files, in offset order (empty when nothing was written yet).
    pub async fn files(
        &self,
        topic: &str,
        partition: PartitionId,
    ) -> Result<Vec<ManifestEntry>, SinkError> {
        Ok(self.load(topic, partition).await?.0.files)
    }

    /// The partition's whole manifest (a fresh, empty one when there is none yet).
    pub async fn manifest(
        &self,
        topic: &str,
        partition: PartitionId,
    ) -> Result<Manifest, SinkError> {
        Ok(self.load(topic, partition).await?.0)
    }

    /// The partitions of `topic` that have a manifest, ascending. Lists the topic's
    /// directory: for readers and tools, not for the broker's hot path.
    pub async fn partitions(&self, topic: &str) -> Result<Vec<PartitionId>, SinkError> {
        let dir = self.layout.topic_dir(topic);
        let mut out: Vec<PartitionId> = self
            .store
            .list(&dir)
            .await?
            .iter()
            .filter_map(|m| {
                let rest = m.path.strip_prefix(&dir)?.strip_prefix("/partition=")?;
                let (p, name) = rest.split_once('/')?;
                (name == MANIFEST_NAME).then(|| p.parse().ok())?
            })
            .collect();
        out.sort_unstable();
        out.dedup();
        Ok(out)
    }

    /// Every file of `topic`, all partitions merged, ordered by partition then offset.
    pub async fn topic_files(&self, topic: &str) -> Result<Vec<TopicFile>, SinkError> {
        let mut out = Vec::new();
        for partition in self.partitions(topic).await? {
            out.extend(
                self.files(topic, partition)
                    .await?
                    .into_iter()
                    .map(|entry| TopicFile { partition, entry }),
            );
        }
        Ok(out)
    }

    /// The manifest and the version it was read at (`None`: there is none yet).
    pub(crate) async fn load(
        &self,
        topic: &str,
        partition: PartitionId,
    ) -> Result<(Manifest, Option<Version>), SinkError> {
        let key = self.layout.manifest_key(topic, partition);
        // Head before get: if a writer slips in between, the version is older than the
        // body and the conditional commit fails, rather than overwriting the newer one.
        let version = match self.store.head(&key).await {
            Ok(meta) => meta.version(),
            Err(e) if e.kind() == ErrorKind::NotFound => {
                return Ok((Manifest::empty(topic, partition), None));
            }
            Err(e) => return Err(e.into()),
        };
        let body = match self.store.get(&key).await {
            Ok(body) => body,
            // Deleted between head and get: an operator's cleanup. Start over as empty,
            // conditioned on there still being none.
            Err(e) if e.kind() == ErrorKind::NotFound => {
                return Ok((Manifest::empty(topic, partition), None));
            }
            Err(e) => return Err(e.into()),
        };
        let manifest = parse_manifest(&key, &body, topic, partition)?;
        Ok((manifest, Some(version)))
    }

    /// Writes the manifest, conditioned on `read` (see the sink module's "Concurrent writers").
    pub(crate) async fn commit(
        &self,
        key: &str,
        manifest: &Manifest,
        read: Option<Version>,
    ) -> Result<(), SinkError> {
        let body = serde_json::to_vec_pretty(manifest).map_err(|e| SinkError::BadManifest {
            key: key.to_string(),
            reason: e.to_string(),
        })?;
        let body = Bytes::from(body);
        let mode = match read {
            None => PutMode::Create,
            Some(v)
                if (v.e_tag.is_none() && v.version.is_none())
                    || self.no_compare_and_swap.load(Ordering::Relaxed) =>
            {
                PutMode::Overwrite
            }
            Some(v) => PutMode::Update(v),
        };
        let conditional = mode != PutMode::Overwrite;
        match self.store.put(key, body.clone(), mode).await {
            Ok(_) => Ok(()),
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::AlreadyExists | ErrorKind::PreconditionFailed
                ) =>
            {
                Err(SinkError::Conflict {
                    key: key.to_string(),
                })
            }
            // The local directory has no compare-and-swap: single writer (the leader).
            Err(e) if conditional && e.kind() == ErrorKind::Unsupported => {
                self.no_compare_and_swap.store(true, Ordering::Relaxed);
                tracing::debug!(store = %self.store, "no conditional update: Parquet manifests rely on a single writer");
                self.store.put(key, body, PutMode::Overwrite).await?;
                Ok(())
            }
            Err(e) => Err(e.into()),
        }
    }
}
