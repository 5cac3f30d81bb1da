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
//!
//! [`ByteSource`]: crate::ByteSource
//! [`ConvertError::is_bad_data`]: crate::ConvertError::is_bad_data

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use strata_store::BlobStore;

use crate::options::ConvertOptions;

mod backfill;
mod check;
mod dead_letter;
mod error;
mod layout;
mod manifest;
mod retention;
mod write;

pub use dead_letter::SegmentOutcome;
pub use error::SinkError;
pub use layout::{DEAD_LETTERS_DIR, ParquetLayout, utc_date};
pub use manifest::{
    BackfillCursor, DeadLetter, DeadLetterFile, MANIFEST_FORMAT, MANIFEST_NAME, Manifest,
    ManifestEntry, TopicFile, read_manifest,
};
pub use retention::ExpiredObjects;
pub use write::WrittenFile;

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
}
