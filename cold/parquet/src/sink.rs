//! Writes converted segments to the object store, exactly once per offset range: the piece
//! the archiver calls after a segment is sealed (docs/architecture.md, "Data flows",
//! Offload).
//!
//! # Layout
//!
//! ```text
//! {prefix}/parquet/topic={topic}/partition={p}/date={YYYY-MM-DD}/{first:020}-{last:020}.parquet
//! {prefix}/parquet/topic={topic}/partition={p}/_manifest.json
//! ```
//!
//! `prefix` is everything before `parquet/` in the bucket's layout: the cluster id
//! (docs/architecture.md, "Object layout in the bucket"); an empty prefix puts `parquet/`
//! at the store's root. The date is the UTC day of the
//! file's first row's timestamp; offsets are zero-padded so that names sort in offset
//! order. `first` and `last` are the segment's offset range, control and aborted records
//! included, so the files of a partition cover its log without gaps (see [`crate`]).
//! Hive-style `key=value` directories let engines prune on topic, partition and date.
//!
//! # Streaming, and atomicity
//!
//! A segment is converted in two passes over a [`ByteSource`] read a few MiB at a time
//! (see [`crate::stream`] for why two): the file's row groups are uploaded as they are
//! written, in parts of [`ParquetSink::part_size`] (the store's, 8 MiB by default) of
//! one multipart upload under the file's final key, so memory is a row group, a part and
//! a read buffer rather than the segment and the file. A file smaller than one part goes
//! up in one PUT. Either way a reader sees the old object, the new one, or none, never a
//! part: S3 (and memory) make a multipart upload's object visible only when it is
//! completed, and on the local-directory backend both a PUT and a multipart upload write
//! a temporary file next to the target (`{key}#{n}`, which listings skip), fsync it and
//! rename it over the key. An upload that fails (a part, the completion, the conversion
//! itself half-way) is aborted before the error is returned, so no parts are left behind
//! to be billed.
//!
//! # Exactly once
//!
//! Each partition has a progress manifest, `_manifest.json` ([`Manifest`]): the files in
//! offset order and `next_offset`, the first offset not yet converted. [`ParquetSink::
//! write_segment`] reads it first: a segment wholly below `next_offset` is skipped (already
//! done: a retry, or a crash after the manifest update); a segment that does not start at
//! `next_offset` is refused with [`SinkError::NotContiguous`] (a gap or a partial overlap).
//! Otherwise the file is uploaded under its deterministic key and then the manifest is
//! updated.
//! A crash between the two leaves a file the manifest does not name; the retry converts
//! the same bytes to the same key and overwrites it, so there is never a second file
//! covering the same offsets. A segment without data rows (only control records or
//! aborted transactions) writes no file but still advances `next_offset`.
//!
//! # Dead letters
//!
//! A batch the converter can never read (it fails its CRC, does not decompress or
//! decompresses past the process-wide cap, its records do not parse: see
//! [`ConvertError::is_bad_data`]) would stop the partition's conversion at that segment
//! forever, and local retention with it. [`ParquetSink::write_segment_or_dead_letter`]
//! (and [`ParquetSink::write_backfill_or_dead_letter`] below the start) instead set the
//! bad batches aside: after a conversion of the whole segment fails on bad data, each
//! batch is checked on its own (CRC, records, control record), the runs of good batches
//! are written as files as usual and each run of bad ones becomes a [`DeadLetter`] in the
//! manifest (its offsets, the first batch's error, the time) that moves `next_offset`
//! past it. A dead letter is committed like a file, conditioned on the manifest read and
//! only where the files end, so a retry after a crash neither records it twice nor skips
//! more than the bad batches. Batches that do not frame, or come out of offset order,
//! make the rest of the segment one dead letter (their offsets cannot be trusted). What
//! is not the data's fault (the store, the value schema, a pending transaction) is
//! returned as an error as before, for the caller to retry. Dead letters wholly below
//! the log start expire with the files.
//!
//! # Concurrent writers
//!
//! The manifest update is a read-modify-write conditioned on the version read: `Create`
//! when there was no manifest, `Update(etag)` otherwise, so on S3 and in memory a second
//! writer that raced in between gets [`SinkError::Conflict`] rather than losing an update.
//! The local-directory backend has no compare-and-swap (`Update` is unsupported there);
//! the sink then falls back to an unconditional overwrite and relies on the single-writer
//! rule that the tier manifest also follows: only the partition leader offloads.
//!
//! # CPU
//!
//! The conversion is CPU-bound and runs on the calling task, between the awaits of its
//! reads and part uploads (a local source's reads block on the disk). The offloader
//! should call [`ParquetSink::write_source`] and its siblings from a thread allowed to
//! block for the duration of a conversion (the archiver's Parquet thread, `block_on`).

use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use strata_proto::BatchHeader;
use strata_proto::batch::{BatchError, RecordBatch};
use strata_proto::ids::{Offset, PartitionId};
use strata_store::{BlobStore, ErrorKind, PutMode, StoreError, Version};

use crate::error::ConvertError;
use crate::options::ConvertOptions;
use crate::schema::writer_properties;
use crate::source::{BatchReader, ByteSource, ReadError, SliceSource, SourceError};
use crate::stream::{self, Scan, StreamError};
use crate::txn::{TxnMarker, control_marker};

/// The version of the manifest format written by this code.
pub const MANIFEST_FORMAT: u32 = 1;

/// The manifest's file name inside a partition's directory.
pub const MANIFEST_NAME: &str = "_manifest.json";

/// Where Parquet files and manifests go in the bucket.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ParquetLayout {
    /// Everything before `parquet/`, without a trailing '/'; may be empty.
    pub prefix: String,
}

impl ParquetLayout {
    pub fn new(prefix: impl Into<String>) -> ParquetLayout {
        ParquetLayout {
            prefix: prefix.into(),
        }
    }

    /// `{prefix}/parquet/topic={topic}`
    pub fn topic_dir(&self, topic: &str) -> String {
        if self.prefix.is_empty() {
            format!("parquet/topic={topic}")
        } else {
            format!("{}/parquet/topic={topic}", self.prefix)
        }
    }

    /// `{prefix}/parquet/topic={topic}/partition={p}`
    pub fn partition_dir(&self, topic: &str, partition: PartitionId) -> String {
        format!("{}/partition={partition}", self.topic_dir(topic))
    }

    /// `{prefix}/parquet/topic={topic}/partition={p}/_manifest.json`
    pub fn manifest_key(&self, topic: &str, partition: PartitionId) -> String {
        format!("{}/{MANIFEST_NAME}", self.partition_dir(topic, partition))
    }

    /// The layout of the dead-letter files: the same tree under `{prefix}/dead_letters`
    /// (`{prefix}/dead_letters/parquet/topic={topic}/partition={p}/date=…/{first}-{last}.parquet`,
    /// the offsets those of the file's first and last row). A tree of its own: no
    /// topic's files or table are under it, and a glob over a topic's files never meets
    /// one.
    pub fn dead_letters(&self) -> ParquetLayout {
        ParquetLayout::new(if self.prefix.is_empty() {
            DEAD_LETTERS_DIR.to_string()
        } else {
            format!("{}/{DEAD_LETTERS_DIR}", self.prefix)
        })
    }

    /// `{partition dir}/date={YYYY-MM-DD}/{first:020}-{last:020}.parquet`, the date being
    /// the UTC day of `first_timestamp` (milliseconds since the epoch).
    pub fn file_key(
        &self,
        topic: &str,
        partition: PartitionId,
        first_timestamp: i64,
        first_offset: Offset,
        last_offset: Offset,
    ) -> String {
        format!(
            "{}/date={}/{first_offset:020}-{last_offset:020}.parquet",
            self.partition_dir(topic, partition),
            utc_date(first_timestamp)
        )
    }
}

/// `YYYY-MM-DD` of a millisecond timestamp, in UTC (proleptic Gregorian calendar; Howard
/// Hinnant's `civil_from_days`). Years outside 0..=9999 are printed as they come.
pub fn utc_date(timestamp_ms: i64) -> String {
    let days = timestamp_ms.div_euclid(86_400_000);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

/// What retention does with the objects of the files it drops from a manifest
/// ([`ParquetSink::expire_with`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExpiredObjects {
    Delete,
    /// Left for the Iceberg publisher, which deletes them with the snapshots naming them.
    Keep,
}

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

/// Where dead-letter files and tables live under a cluster's root
/// ([`ParquetLayout::dead_letters`]).
pub const DEAD_LETTERS_DIR: &str = "dead_letters";

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
    /// order, without overlaps with each other or the files (see the module's "Dead
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

/// A file [`ParquetSink::write_segment`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WrittenFile {
    pub key: String,
    pub first_offset: Offset,
    pub last_offset: Offset,
    pub min_timestamp: i64,
    pub max_timestamp: i64,
    pub rows: u64,
    pub bytes: u64,
    /// Values that did not fit the JSON value schema, kept whole in `_raw`.
    pub raw_fallbacks: u64,
    /// Those rows again, in dead-letter files (raw value and reason).
    pub dead_letter_files: Vec<DeadLetterFile>,
}

impl WrittenFile {
    fn entry(&self, schema: u64) -> ManifestEntry {
        ManifestEntry {
            key: self.key.clone(),
            first_offset: self.first_offset,
            last_offset: self.last_offset,
            min_timestamp: self.min_timestamp,
            max_timestamp: self.max_timestamp,
            rows: self.rows,
            bytes: self.bytes,
            compacted_from: 0,
            schema: Some(schema),
            dead_letter_files: self.dead_letter_files.clone(),
        }
    }
}

/// A file of a topic, with its partition: what [`ParquetSink::topic_files`] returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicFile {
    pub partition: PartitionId,
    pub entry: ManifestEntry,
}

/// What [`ParquetSink::write_segment_or_dead_letter`] (or its backfill twin) did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SegmentOutcome {
    /// The files written, in offset order.
    pub files: Vec<WrittenFile>,
    /// The dead letters this call recorded, in offset order (one a retry finds recorded
    /// already is not reported again).
    pub dead_letters: Vec<DeadLetter>,
}

/// Why writing, listing or expiring failed.
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    /// The segment does not convert (see [`ConvertError::is_retryable`]).
    #[error(transparent)]
    Convert(#[from] ConvertError),
    /// The object store failed (see [`ErrorKind::is_retriable`]).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The input could not be read (see [`SourceError::is_retryable`]).
    #[error(transparent)]
    Source(#[from] SourceError),
    /// The segment does not start where the partition's files end: a gap, or an overlap
    /// with what is already written.
    #[error("segment starts at offset {got}, the partition's Parquet files end before {expected}")]
    NotContiguous { expected: Offset, got: Offset },
    /// The manifest changed between our read and our write: another writer (a leader
    /// that took over). Reload and decide again; a retry skips what the other wrote.
    #[error("the Parquet manifest {key} was changed by another writer")]
    Conflict { key: String },
    /// The manifest does not parse or does not belong to this partition.
    #[error("Parquet manifest {key}: {reason}")]
    BadManifest { key: String, reason: String },
}

impl SinkError {
    /// Whether the same call can succeed later.
    pub fn is_retryable(&self) -> bool {
        match self {
            SinkError::Convert(e) => e.is_retryable(),
            SinkError::Store(e) => e.kind().is_retriable(),
            SinkError::Source(e) => e.is_retryable(),
            SinkError::Conflict { .. } => true,
            SinkError::NotContiguous { .. } | SinkError::BadManifest { .. } => false,
        }
    }

    /// Whether the segment's own bytes are at fault ([`ConvertError::is_bad_data`]):
    /// what [`ParquetSink::write_segment_or_dead_letter`] sets aside.
    pub fn is_bad_data(&self) -> bool {
        matches!(self, SinkError::Convert(e) if e.is_bad_data())
    }
}

/// Where a salvaged segment's files and dead letters go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    /// Continuing `next_offset`.
    Log,
    /// Continuing the backfill's cursor below the files' start.
    Backfill,
}

impl From<ReadError> for SinkError {
    fn from(e: ReadError) -> Self {
        match e {
            ReadError::Convert(e) => SinkError::Convert(e),
            ReadError::Source(e) => SinkError::Source(e),
        }
    }
}

impl From<StreamError> for SinkError {
    fn from(e: StreamError) -> Self {
        match e {
            StreamError::Read(e) => e.into(),
            StreamError::Store(e) => SinkError::Store(e),
        }
    }
}

/// One framed batch of a segment: its header and where its bytes are (from the start
/// of the range salvaged).
#[derive(Debug, Clone, Copy)]
struct View {
    header: BatchHeader,
    start: u64,
    end: u64,
}

impl View {
    fn base_offset(&self) -> Offset {
        self.header.base_offset
    }

    fn last_offset(&self) -> Offset {
        self.header.last_offset()
    }
}

/// Writes a partition's segments as Parquet files and keeps its manifest.
#[derive(Debug, Clone)]
pub struct ParquetSink {
    pub(crate) store: Arc<dyn BlobStore>,
    layout: ParquetLayout,
    pub(crate) options: ConvertOptions,
    /// The size of a file's upload parts; `None`: the store's
    /// [`UploadConfig::part_size`](strata_store::UploadConfig::part_size).
    part_size: Option<usize>,
    /// Set once the store answered a conditional `Update` with `Unsupported` (the local
    /// directory): later commits overwrite directly instead of asking again.
    no_compare_and_swap: Arc<AtomicBool>,
}

impl ParquetSink {
    /// `options` are the conversion options but for `topic` and `partition`, which each
    /// call sets.
    pub fn new(
        store: Arc<dyn BlobStore>,
        layout: ParquetLayout,
        options: ConvertOptions,
    ) -> ParquetSink {
        ParquetSink {
            store,
            layout,
            options,
            part_size: None,
            no_compare_and_swap: Arc::default(),
        }
    }

    /// Uploads files in parts of `bytes` (a file smaller than one part goes up in one
    /// PUT) instead of the store's part size. S3 refuses parts below
    /// [`strata_store::MIN_PART_SIZE`] but the last; tests and benchmarks use smaller
    /// ones with other backends.
    pub fn with_part_size(mut self, bytes: usize) -> ParquetSink {
        self.part_size = Some(bytes.max(1));
        self
    }

    /// The size of an upload's parts, and so the most of a file held in memory besides
    /// the row group being built.
    pub fn part_size(&self) -> usize {
        self.part_size.unwrap_or_else(|| {
            usize::try_from(self.store.upload_config().part_size).unwrap_or(8 << 20)
        })
    }

    pub fn layout(&self) -> &ParquetLayout {
        &self.layout
    }

    /// The fingerprint of the columns of the files this sink writes
    /// ([`ManifestEntry::schema`]): FNV-1a of their Arrow fields, ids included.
    pub fn schema_fingerprint(&self) -> u64 {
        // A canonical text of the columns (not `Debug` of the fields, whose metadata maps
        // print in no fixed order), so every broker and every run agrees.
        fn describe(fields: &arrow::datatypes::Fields, out: &mut String) {
            for f in fields {
                describe_field(f, out);
            }
        }
        fn describe_field(f: &arrow::datatypes::Field, out: &mut String) {
            use arrow::datatypes::DataType;
            let id = f
                .metadata()
                .get(parquet::arrow::PARQUET_FIELD_ID_META_KEY)
                .map_or("", String::as_str);
            out.push_str(&format!("{}#{id}:{}:", f.name(), f.is_nullable()));
            match f.data_type() {
                DataType::Struct(members) => {
                    out.push_str("struct(");
                    describe(members, out);
                    out.push(')');
                }
                DataType::List(item) => {
                    out.push_str("list(");
                    describe_field(item, out);
                    out.push(')');
                }
                other => out.push_str(&format!("{other}")),
            }
            out.push(';');
        }
        let mut text = String::new();
        describe(
            crate::schema::file_schema(&self.options.value_format).fields(),
            &mut text,
        );
        text.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        })
    }

    /// Converts a sealed segment (its raw v2 batches) and writes it, at most once per
    /// offset range. Returns the file, or `None` when nothing was written: the segment was
    /// already done (skipped), or it has no data rows (its range still counts as done).
    ///
    /// A transaction still open at the segment's end fails with the retryable
    /// [`ConvertError::PendingTransaction`] under the default [`crate::PendingTxnPolicy`];
    /// [`write_segment_with_markers`](Self::write_segment_with_markers) passes the markers
    /// of the following segments.
    pub async fn write_segment(
        &self,
        topic: &str,
        partition: PartitionId,
        batches: &[u8],
    ) -> Result<Option<WrittenFile>, SinkError> {
        let src = SliceSource(batches);
        self.write(topic, partition, &src, 0..src.len(), None).await
    }

    /// [`write_segment`](Self::write_segment) from a [`ByteSource`], read a few MiB at
    /// a time: the streaming form the archiver uses (see [`crate::stream`]).
    pub async fn write_source(
        &self,
        topic: &str,
        partition: PartitionId,
        src: &dyn ByteSource,
    ) -> Result<Option<WrittenFile>, SinkError> {
        self.write(topic, partition, src, 0..src.len(), None).await
    }

    /// [`write_segment`](Self::write_segment) with the transaction markers that follow the
    /// segment (from [`crate::scan_markers`] over the next segments), which settle the
    /// transactions open at its end. They replace the options' `later_markers`.
    pub async fn write_segment_with_markers(
        &self,
        topic: &str,
        partition: PartitionId,
        batches: &[u8],
        later_markers: &[TxnMarker],
    ) -> Result<Option<WrittenFile>, SinkError> {
        let src = SliceSource(batches);
        self.write(topic, partition, &src, 0..src.len(), Some(later_markers))
            .await
    }

    /// [`write_segment`](Self::write_segment), but a segment whose batches are bad data
    /// ([`ConvertError::is_bad_data`]) does not fail: its good batches are written as
    /// files and the bad ones recorded as dead letters (see the module's "Dead letters").
    /// `range` is the offsets the bytes stand for (from the first batch's base to the
    /// segment's next offset): batches that do not frame are set aside up to its end.
    /// Other errors (the store, a conflict, a gap, the options, a pending transaction)
    /// are returned as by `write_segment`, nothing set aside.
    pub async fn write_segment_or_dead_letter(
        &self,
        topic: &str,
        partition: PartitionId,
        batches: &[u8],
        range: Range<Offset>,
    ) -> Result<SegmentOutcome, SinkError> {
        self.write_source_or_dead_letter(topic, partition, &SliceSource(batches), range)
            .await
    }

    /// [`write_segment_or_dead_letter`](Self::write_segment_or_dead_letter) from a
    /// [`ByteSource`].
    pub async fn write_source_or_dead_letter(
        &self,
        topic: &str,
        partition: PartitionId,
        src: &dyn ByteSource,
        range: Range<Offset>,
    ) -> Result<SegmentOutcome, SinkError> {
        let (out, _) = self
            .convert_or_salvage(Target::Log, topic, partition, src, range)
            .await?;
        Ok(out)
    }

    /// [`write_backfill`](Self::write_backfill) that sets bad batches aside as
    /// [`write_segment_or_dead_letter`](Self::write_segment_or_dead_letter) does; the
    /// dead letters continue the backfill's cursor. Returns what it wrote and recorded,
    /// and whether the backfill is complete.
    pub async fn write_backfill_or_dead_letter(
        &self,
        topic: &str,
        partition: PartitionId,
        batches: &[u8],
        range: Range<Offset>,
    ) -> Result<(SegmentOutcome, bool), SinkError> {
        self.write_backfill_source_or_dead_letter(topic, partition, &SliceSource(batches), range)
            .await
    }

    /// [`write_backfill_or_dead_letter`](Self::write_backfill_or_dead_letter) from a
    /// [`ByteSource`].
    pub async fn write_backfill_source_or_dead_letter(
        &self,
        topic: &str,
        partition: PartitionId,
        src: &dyn ByteSource,
        range: Range<Offset>,
    ) -> Result<(SegmentOutcome, bool), SinkError> {
        self.convert_or_salvage(Target::Backfill, topic, partition, src, range)
            .await
    }

    /// Converts all of `src` to `target` ([`Self::write`] or [`Self::backfill`]); when
    /// that fails on bad data, salvages it ([`Self::salvage`]). Returns what it wrote and
    /// recorded, and whether a backfill is complete (always `true` for the log).
    async fn convert_or_salvage(
        &self,
        target: Target,
        topic: &str,
        partition: PartitionId,
        src: &dyn ByteSource,
        range: Range<Offset>,
    ) -> Result<(SegmentOutcome, bool), SinkError> {
        let converted = match target {
            Target::Log => self
                .write(topic, partition, src, 0..src.len(), None)
                .await
                .map(|file| (file, true)),
            Target::Backfill => {
                self.backfill(topic, partition, src, 0..src.len(), None)
                    .await
            }
        };
        match converted {
            Ok((file, done)) => Ok((
                SegmentOutcome {
                    files: file.into_iter().collect(),
                    dead_letters: Vec::new(),
                },
                done,
            )),
            Err(SinkError::Convert(e)) if e.is_bad_data() => {
                self.salvage(target, topic, partition, src, range, &e).await
            }
            Err(e) => Err(e),
        }
    }

    /// After a conversion of `bytes` failed on bad data (`error`): checks each batch on
    /// its own, writes the runs of good batches and records the runs of bad ones, in
    /// offset order. Returns, for a backfill, whether it is complete.
    async fn salvage(
        &self,
        target: Target,
        topic: &str,
        partition: PartitionId,
        src: &dyn ByteSource,
        mut range: Range<Offset>,
        error: &ConvertError,
    ) -> Result<(SegmentOutcome, bool), SinkError> {
        let (mut views, mut framing) = frame(src).await?;
        if target == Target::Backfill {
            // Only what lies below the files' start, as write_backfill converts.
            let (manifest, _) = self.load(topic, partition).await?;
            let Some(start) = manifest.covered_start() else {
                return Err(SinkError::BadManifest {
                    key: self.layout.manifest_key(topic, partition),
                    reason: "a backfill needs converted files to fill in below".into(),
                });
            };
            if let Some(at) = views.iter().position(|v| v.last_offset() >= start) {
                if views[at].base_offset() < start {
                    return Err(SinkError::NotContiguous {
                        expected: start,
                        got: views[at].base_offset(),
                    });
                }
                views.truncate(at);
                framing = None;
            }
            range.end = range.end.min(start);
        }
        let n = views.len();
        let mut bad: Vec<Option<String>> = vec![None; n];
        check_batches(src, &views, self.options.verify_crc, &mut bad).await?;
        if bad.iter().all(Option::is_none) && !matches!(error, ConvertError::Framing { .. }) {
            // Nothing a batch check finds (an Arrow or Parquet writer error): the error
            // names the batch, or the whole segment is set aside.
            mark_bad(error, &views, 0, n, &mut bad);
        }

        let mut out = SegmentOutcome::default();
        let mut done = false;
        // Where the files (and dead letters) end, as far as this segment goes.
        let mut pos = range.start;
        let mut cur = 0;
        while cur < n {
            let run_bad = bad[cur].is_some();
            let mut j = (cur..n).find(|&i| bad[i].is_some() != run_bad).unwrap_or(n);
            if run_bad {
                if pos >= range.end {
                    // Batches past the range the caller named: not this segment's.
                    break;
                }
                let mut next = views.get(j).map_or(range.end, |v| v.base_offset());
                if next <= pos {
                    // The next good batch's offsets go backwards: nothing after is trusted.
                    (next, j) = (range.end, n);
                }
                let next = next.min(range.end);
                let count = j - cur;
                let mut reason = bad[cur].clone().unwrap_or_default();
                if count > 1 {
                    reason.push_str(&format!(" (the first of {count} batches in a row)"));
                }
                let (recorded, d) = self
                    .set_aside(target, topic, partition, pos..next, &reason)
                    .await?;
                out.dead_letters.extend(recorded);
                done = d;
                pos = next;
                cur = j;
                continue;
            }
            let part = views[cur].start..views[j - 1].end;
            // Transactions open at the run's end may end in the good batches after it.
            let later: Option<Vec<TxnMarker>> = if j < n {
                let mut m = self.options.later_markers.clone();
                m.extend(good_markers(src, &views[j..], &bad[j..]).await?);
                Some(m)
            } else {
                None
            };
            let written = match target {
                Target::Log => self
                    .write(topic, partition, src, part, later.as_deref())
                    .await
                    .map(|f| (f, false)),
                Target::Backfill => {
                    self.backfill(topic, partition, src, part, later.as_deref())
                        .await
                }
            };
            match written {
                Ok((file, d)) => {
                    out.files.extend(file);
                    done = d;
                    pos = views[j - 1].last_offset() + 1;
                    cur = j;
                }
                // Something the batch checks missed: set it aside and go again.
                Err(SinkError::Convert(e)) if e.is_bad_data() => {
                    mark_bad(&e, &views, cur, j, &mut bad)
                }
                Err(e) => return Err(e),
            }
        }
        // The bytes after the last batch that frames, up to the segment's end.
        if let Some(e) = framing
            && pos < range.end
        {
            let (recorded, d) = self
                .set_aside(target, topic, partition, pos..range.end, &e.to_string())
                .await?;
            out.dead_letters.extend(recorded);
            done = d;
        }
        Ok((out, done))
    }

    /// Records `offsets` as a dead letter of `target`; for a backfill, also whether it
    /// is complete.
    async fn set_aside(
        &self,
        target: Target,
        topic: &str,
        partition: PartitionId,
        offsets: Range<Offset>,
        reason: &str,
    ) -> Result<(Option<DeadLetter>, bool), SinkError> {
        let (first, last) = (offsets.start, offsets.end - 1);
        match target {
            Target::Log => Ok((
                self.dead_letter(topic, partition, first, last, reason)
                    .await?,
                false,
            )),
            Target::Backfill => {
                self.dead_letter_backfill(topic, partition, first, last, reason)
                    .await
            }
        }
    }

    async fn write(
        &self,
        topic: &str,
        partition: PartitionId,
        src: &dyn ByteSource,
        range: Range<u64>,
        later_markers: Option<&[TxnMarker]>,
    ) -> Result<Option<WrittenFile>, SinkError> {
        // The first pass: framing, checks and fates, without writing (see `stream`).
        let scan = stream::scan(src, range.clone(), self.options.verify_crc, None).await?;
        let (first, last) = scan.offsets.ok_or(ConvertError::Empty)?;
        let manifest_key = self.layout.manifest_key(topic, partition);
        let (mut manifest, version) = self.load(topic, partition).await?;
        if let Some(end) = manifest.next_offset {
            if last < end {
                tracing::debug!(
                    topic,
                    partition,
                    first,
                    last,
                    "Parquet: segment already written, skipped"
                );
                return Ok(None);
            }
            if first != end {
                return Err(SinkError::NotContiguous {
                    expected: end,
                    got: first,
                });
            }
        }

        let written = self
            .put_file(topic, partition, src, range, scan, later_markers)
            .await?;

        if let Some(w) = &written {
            manifest.files.push(w.entry(self.schema_fingerprint()));
        }
        if manifest.next_offset.is_none() {
            manifest.start_offset = Some(first);
        }
        manifest.next_offset = Some(last + 1);
        self.commit(&manifest_key, &manifest, version).await?;
        Ok(written)
    }

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

    /// Retention: deletes the files wholly below `log_start_offset` (last offset <
    /// log start) and removes them, and the dead letters wholly below it, from the
    /// manifest; returns how many files. The objects go first, then the manifest, so a
    /// crash in between only leaves entries whose objects are gone, which a re-run
    /// removes (deleting a missing object succeeds).
    pub async fn expire(
        &self,
        topic: &str,
        partition: PartitionId,
        log_start_offset: Offset,
    ) -> Result<usize, SinkError> {
        self.expire_with(topic, partition, log_start_offset, ExpiredObjects::Delete)
            .await
    }

    /// [`Self::expire`], leaving the expired files' objects in place with
    /// [`ExpiredObjects::Keep`]: an Iceberg table still names them until its next commit,
    /// and whoever publishes it deletes them once no snapshot it keeps holds them.
    pub async fn expire_with(
        &self,
        topic: &str,
        partition: PartitionId,
        log_start_offset: Offset,
        objects: ExpiredObjects,
    ) -> Result<usize, SinkError> {
        let manifest_key = self.layout.manifest_key(topic, partition);
        let (mut manifest, version) = self.load(topic, partition).await?;
        let (expired, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut manifest.files)
            .into_iter()
            .partition(|f| f.last_offset < log_start_offset);
        let letters = manifest.dead_letters.len();
        manifest
            .dead_letters
            .retain(|d| d.last_offset >= log_start_offset);
        if expired.is_empty() && manifest.dead_letters.len() == letters {
            return Ok(0);
        }
        if objects == ExpiredObjects::Delete {
            for f in &expired {
                for d in &f.dead_letter_files {
                    self.store.delete(&d.key).await?;
                }
                self.store.delete(&f.key).await?;
            }
        }
        // The files now cover the log from past the last one gone.
        if let Some(last) = expired.last() {
            manifest.start_offset = manifest.start_offset.map(|s| s.max(last.last_offset + 1));
        }
        manifest.files = kept;
        self.commit(&manifest_key, &manifest, version).await?;
        Ok(expired.len())
    }

    /// Backfill: converts a segment that lies below where the partition's files start
    /// (offloaded before parquet.enable was set), continuing the backfill's cursor. Only
    /// the batches below the files' start are converted; a segment wholly behind the
    /// cursor is skipped (a retry). When the cursor reaches the start, the manifest's
    /// start moves down to where the backfill began. Returns the file written, if any,
    /// and whether the backfill is complete.
    pub async fn write_backfill(
        &self,
        topic: &str,
        partition: PartitionId,
        batches: &[u8],
    ) -> Result<(Option<WrittenFile>, bool), SinkError> {
        let src = SliceSource(batches);
        self.backfill(topic, partition, &src, 0..src.len(), None)
            .await
    }

    async fn backfill(
        &self,
        topic: &str,
        partition: PartitionId,
        src: &dyn ByteSource,
        range: Range<u64>,
        later_markers: Option<&[TxnMarker]>,
    ) -> Result<(Option<WrittenFile>, bool), SinkError> {
        let manifest_key = self.layout.manifest_key(topic, partition);
        let (mut manifest, version) = self.load(topic, partition).await?;
        let Some(start) = manifest.covered_start() else {
            return Err(SinkError::BadManifest {
                key: manifest_key,
                reason: "a backfill needs converted files to fill in below".into(),
            });
        };
        // Only whole batches below the start (the first pass stops there).
        let scan = stream::scan(src, range.clone(), self.options.verify_crc, Some(start)).await?;
        if let Some(got) = scan.straddle {
            return Err(SinkError::NotContiguous {
                expected: start,
                got,
            });
        }
        let Some((first, last)) = scan.offsets else {
            return Ok((None, manifest.backfill.is_none()));
        };
        let below = range.start..range.start + scan.end;
        let from = match manifest.backfill {
            Some(c) if last < c.next => return Ok((None, false)),
            Some(c) if first != c.next => {
                return Err(SinkError::NotContiguous {
                    expected: c.next,
                    got: first,
                });
            }
            Some(c) => c.from,
            None => first,
        };
        let written = self
            .put_file(topic, partition, src, below, scan, later_markers)
            .await?;
        if let Some(w) = &written {
            let at = manifest
                .files
                .partition_point(|f| f.first_offset < w.first_offset);
            manifest
                .files
                .insert(at, w.entry(self.schema_fingerprint()));
        }
        let done = last + 1 >= start;
        if done {
            manifest.start_offset = Some(from);
            manifest.backfill = None;
        } else {
            manifest.backfill = Some(BackfillCursor {
                from,
                next: last + 1,
            });
        }
        self.commit(&manifest_key, &manifest, version).await?;
        Ok((written, done))
    }

    /// Restarts a backfill's cursor at `offset`: the records below it expired before the
    /// backfill reached them, so no file can hold them.
    pub async fn restart_backfill(
        &self,
        topic: &str,
        partition: PartitionId,
        offset: Offset,
    ) -> Result<(), SinkError> {
        let manifest_key = self.layout.manifest_key(topic, partition);
        let (mut manifest, version) = self.load(topic, partition).await?;
        if manifest.backfill.is_some_and(|c| c.next >= offset) {
            return Ok(());
        }
        if manifest.covered_start().is_some_and(|s| offset >= s) {
            manifest.backfill = None;
            manifest.start_offset = Some(offset);
        } else {
            manifest.backfill = Some(BackfillCursor {
                from: offset,
                next: offset,
            });
        }
        self.commit(&manifest_key, &manifest, version).await
    }

    /// Moves the partition's next offset up to `offset` without a file: the records in
    /// between expired (retention deleted them) before they were converted, so no file
    /// can hold them. Never moves it back.
    pub async fn skip_to(
        &self,
        topic: &str,
        partition: PartitionId,
        offset: Offset,
    ) -> Result<(), SinkError> {
        let manifest_key = self.layout.manifest_key(topic, partition);
        let (mut manifest, version) = self.load(topic, partition).await?;
        if manifest.next_offset.is_some_and(|n| n >= offset) {
            return Ok(());
        }
        manifest.next_offset = Some(offset);
        self.commit(&manifest_key, &manifest, version).await
    }

    /// Records `[first, last]` as a dead letter (offsets no file will hold: their batches
    /// cannot be converted, for `reason`) and moves the next offset past it, under the
    /// rules of a file: it must start where the files end (else
    /// [`SinkError::NotContiguous`]), and a range already behind the next offset is
    /// skipped, so a retry after a crash records it once and skips nothing more. Returns
    /// the dead letter, or `None` when it was done already (or the range is empty).
    pub async fn dead_letter(
        &self,
        topic: &str,
        partition: PartitionId,
        first: Offset,
        last: Offset,
        reason: &str,
    ) -> Result<Option<DeadLetter>, SinkError> {
        if last < first {
            return Ok(None);
        }
        let manifest_key = self.layout.manifest_key(topic, partition);
        let (mut manifest, version) = self.load(topic, partition).await?;
        match manifest.next_offset {
            Some(end) if last < end => return Ok(None),
            Some(end) if first != end => {
                return Err(SinkError::NotContiguous {
                    expected: end,
                    got: first,
                });
            }
            Some(_) => {}
            None => manifest.start_offset = Some(first),
        }
        let letter = DeadLetter {
            first_offset: first,
            last_offset: last,
            reason: reason.to_string(),
            at_ms: now_ms(),
        };
        insert_dead_letter(&mut manifest.dead_letters, letter.clone());
        manifest.next_offset = Some(last + 1);
        self.commit(&manifest_key, &manifest, version).await?;
        Ok(Some(letter))
    }

    /// [`dead_letter`](Self::dead_letter) below the files' start, continuing the
    /// backfill's cursor as [`write_backfill`](Self::write_backfill) does; also returns
    /// whether the backfill is complete.
    async fn dead_letter_backfill(
        &self,
        topic: &str,
        partition: PartitionId,
        first: Offset,
        last: Offset,
        reason: &str,
    ) -> Result<(Option<DeadLetter>, bool), SinkError> {
        let manifest_key = self.layout.manifest_key(topic, partition);
        let (mut manifest, version) = self.load(topic, partition).await?;
        let Some(start) = manifest.covered_start() else {
            return Err(SinkError::BadManifest {
                key: manifest_key,
                reason: "a backfill needs converted files to fill in below".into(),
            });
        };
        if last < first || first >= start {
            return Ok((None, manifest.backfill.is_none()));
        }
        if last >= start {
            return Err(SinkError::NotContiguous {
                expected: start,
                got: first,
            });
        }
        let from = match manifest.backfill {
            Some(c) if last < c.next => return Ok((None, false)),
            Some(c) if first != c.next => {
                return Err(SinkError::NotContiguous {
                    expected: c.next,
                    got: first,
                });
            }
            Some(c) => c.from,
            None => first,
        };
        let letter = DeadLetter {
            first_offset: first,
            last_offset: last,
            reason: reason.to_string(),
            at_ms: now_ms(),
        };
        insert_dead_letter(&mut manifest.dead_letters, letter.clone());
        let done = last + 1 >= start;
        if done {
            manifest.start_offset = Some(from);
            manifest.backfill = None;
        } else {
            manifest.backfill = Some(BackfillCursor {
                from,
                next: last + 1,
            });
        }
        self.commit(&manifest_key, &manifest, version).await?;
        Ok((Some(letter), done))
    }

    /// The second pass over `range` (which `scan` went through): converts it and
    /// uploads the file under its deterministic key as it is written; `None` when the
    /// batches hold no data rows. Errors of the first pass other than framing come out
    /// here, after the caller's manifest checks, as they did from the in-memory
    /// conversion.
    async fn put_file(
        &self,
        topic: &str,
        partition: PartitionId,
        src: &dyn ByteSource,
        range: Range<u64>,
        mut scan: Scan,
        later_markers: Option<&[TxnMarker]>,
    ) -> Result<Option<WrittenFile>, SinkError> {
        let mut opts = self.options.clone();
        opts.topic = topic.to_string();
        opts.partition = partition;
        if let Some(markers) = later_markers {
            opts.later_markers = markers.to_vec();
        }
        let props = writer_properties(&opts)?;
        if let Some(e) = scan.problem.take() {
            return Err(e.into());
        }
        let Some((first, last)) = scan.offsets else {
            return Err(ConvertError::Empty.into());
        };
        // The key is a function of the segment's bytes (the first row's date, the
        // offsets), so a retry after a crash before the manifest update overwrites the
        // same object.
        let key = |first_ts: i64| {
            self.layout
                .file_key(topic, partition, first_ts, first, last)
        };
        let dead_letters = self.layout.dead_letters();
        let dead_letter_key = |first_ts: i64, first: Offset, last: Offset| {
            dead_letters.file_key(topic, partition, first_ts, first, last)
        };
        let streamed = stream::convert_and_upload(
            src,
            range,
            scan,
            &opts,
            props,
            self.store.as_ref(),
            self.part_size(),
            &key,
            &dead_letter_key,
        )
        .await?;
        Ok(streamed.and_then(|f| {
            let s = f.summary;
            let (min_timestamp, max_timestamp) = (s.min_timestamp?, s.max_timestamp?);
            Some(WrittenFile {
                key: f.key,
                first_offset: s.first_offset,
                last_offset: s.last_offset,
                min_timestamp,
                max_timestamp,
                rows: s.rows,
                bytes: f.bytes,
                raw_fallbacks: s.raw_fallbacks,
                dead_letter_files: f.dead_letter_files,
            })
        }))
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

    /// Writes the manifest, conditioned on `read` (see the module's "Concurrent writers").
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

/// The batches that frame, with their byte ranges, and the framing error that stopped
/// them, if one did. Keeps a header per batch, not the bytes.
async fn frame(src: &dyn ByteSource) -> Result<(Vec<View>, Option<ConvertError>), SourceError> {
    let mut views = Vec::new();
    let mut reader = BatchReader::new(src, 0..src.len());
    while let Some(framed) = reader.next().await {
        let framed = match framed {
            Ok(f) => f,
            Err(ReadError::Convert(e)) => return Ok((views, Some(e))),
            Err(ReadError::Source(e)) => return Err(e),
        };
        match framed.batch() {
            Ok(b) => views.push(View {
                header: *b.header(),
                start: framed.start,
                end: framed.end,
            }),
            Err(e) => return Ok((views, Some(e))),
        }
    }
    Ok((views, None))
}

/// Marks (with the reason) each batch the converter would fail on, checked on its own;
/// from the first batch out of offset order on, every batch. Reads the batches of
/// `views` (contiguous, in order) once more.
async fn check_batches(
    src: &dyn ByteSource,
    views: &[View],
    verify_crc: bool,
    bad: &mut [Option<String>],
) -> Result<(), SinkError> {
    let (Some(first), Some(last)) = (views.first(), views.last()) else {
        return Ok(());
    };
    let mut reader = BatchReader::new(src, first.start..last.end);
    let mut previous: Option<Offset> = None;
    for (i, v) in views.iter().enumerate() {
        let h = v.header;
        if let Some(p) = previous
            && h.base_offset <= p
        {
            let reason = ConvertError::OutOfOrder {
                base_offset: h.base_offset,
                previous_last_offset: p,
            }
            .to_string();
            for b in &mut bad[i..] {
                b.get_or_insert_with(|| reason.clone());
            }
            return Ok(());
        }
        previous = Some(h.last_offset());
        let framed = match reader.next().await {
            Some(Ok(f)) => f,
            Some(Err(e)) => return Err(e.into()),
            None => return Err(ConvertError::Empty.into()),
        };
        if let Err(e) = framed.batch().and_then(|b| check_batch(&b, verify_crc)) {
            bad[i] = Some(e.to_string());
        }
    }
    Ok(())
}

/// What the converter checks of one batch: its record count, CRC, control record, and
/// records (decompressed under the process-wide cap, each parsed, offsets in order).
fn check_batch(b: &RecordBatch<'_>, verify_crc: bool) -> Result<(), ConvertError> {
    let h = *b.header();
    let err = |source| ConvertError::Batch {
        base_offset: h.base_offset,
        source,
    };
    if h.last_offset_delta < 0 {
        return Err(err(BatchError::BadRecordCount {
            count: h.record_count,
            last_offset_delta: h.last_offset_delta,
        }));
    }
    if verify_crc {
        b.validate_crc().map_err(err)?;
    }
    if h.is_control() {
        return control_marker(b).map(|_| ());
    }
    let records = b.records().map_err(err)?;
    let mut last: Option<Offset> = None;
    for r in records.iter() {
        let r = r.map_err(err)?;
        if r.offset < h.base_offset
            || r.offset > h.last_offset()
            || last.is_some_and(|l| r.offset <= l)
        {
            return Err(err(BatchError::InvalidRecord(
                "record offsets out of order or outside the batch",
            )));
        }
        last = Some(r.offset);
    }
    Ok(())
}

/// Marks what `error`, from converting `views[from..to]`, puts at fault: the batch it
/// names, everything from a batch out of order on, or else all of `from..to`. Marks at
/// least one batch of `from..to`.
fn mark_bad(
    error: &ConvertError,
    views: &[View],
    from: usize,
    to: usize,
    bad: &mut [Option<String>],
) {
    let reason = error.to_string();
    let named = error
        .batch_offset()
        .and_then(|o| (from..to).find(|&i| views[i].base_offset() == o));
    let out_of_order = matches!(error, ConvertError::OutOfOrder { .. })
        .then(|| (from + 1..to).find(|&i| views[i].base_offset() <= views[i - 1].last_offset()))
        .flatten();
    let marked = match (named, out_of_order) {
        (Some(i), _) => i..i + 1,
        (None, Some(i)) => i..views.len(),
        (None, None) => from..to,
    };
    for b in &mut bad[marked] {
        b.get_or_insert_with(|| reason.clone());
    }
}

/// The transaction markers of the good control batches among `views` (read again, one
/// by one: control batches are small).
async fn good_markers(
    src: &dyn ByteSource,
    views: &[View],
    bad: &[Option<String>],
) -> Result<Vec<TxnMarker>, SourceError> {
    let mut out = Vec::new();
    for (v, _) in views
        .iter()
        .zip(bad)
        .filter(|(v, b)| b.is_none() && v.header.is_control())
    {
        let bytes = src.read_at(v.start, (v.end - v.start) as usize).await?;
        let Ok((b, _)) = RecordBatch::parse(&bytes) else {
            continue;
        };
        if let Ok(Some(kind)) = control_marker(&b) {
            out.push(TxnMarker {
                producer_id: v.header.producer_id,
                offset: v.header.base_offset,
                kind,
            });
        }
    }
    Ok(out)
}

/// Inserts `letter` in offset order.
fn insert_dead_letter(letters: &mut Vec<DeadLetter>, letter: DeadLetter) {
    let at = letters.partition_point(|d| d.first_offset < letter.first_offset);
    letters.insert(at, letter);
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_utc_days() {
        assert_eq!(utc_date(0), "1970-01-01");
        assert_eq!(utc_date(-1), "1969-12-31");
        assert_eq!(utc_date(1_700_000_000_000), "2023-11-14");
        assert_eq!(utc_date(951_782_400_000), "2000-02-29");
        assert_eq!(utc_date(951_868_799_999), "2000-02-29");
        assert_eq!(utc_date(951_868_800_000), "2000-03-01");
        assert_eq!(utc_date(1_704_067_199_999), "2023-12-31");
        assert_eq!(utc_date(1_704_067_200_000), "2024-01-01");
    }

    #[test]
    fn keys_follow_the_layout() {
        let l = ParquetLayout::new("pre/c1");
        assert_eq!(
            l.file_key("orders", 3, 1_700_000_000_000, 5, 42),
            "pre/c1/parquet/topic=orders/partition=3/date=2023-11-14/00000000000000000005-00000000000000000042.parquet"
        );
        assert_eq!(
            l.manifest_key("orders", 3),
            "pre/c1/parquet/topic=orders/partition=3/_manifest.json"
        );
        assert_eq!(
            ParquetLayout::default().manifest_key("t", 0),
            "parquet/topic=t/partition=0/_manifest.json"
        );
    }
}
