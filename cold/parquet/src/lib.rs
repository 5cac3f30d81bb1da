//! Kafka record batches -> Arrow -> Parquet, for warehouse loaders (docs/parquet.md,
//! "Files and columns"). The converter itself does no IO: [`convert_segment`] takes bytes
//! already in memory and writes a Parquet file into a `Vec<u8>` (or any `Write` the
//! caller hands in) plus a [`Summary`]. [`sink`] is the IO layer on top, and streams:
//! it reads its input from a [`ByteSource`] a few MiB at a time and uploads row groups as
//! they fill ([`stream`]).
//!
//! The crate owns the Parquet side of the bucket: the file format (below), the converter,
//! and the files' life in the object store. That is upload, manifest, compaction, expiry,
//! dead letters, and Kafka batches read back from the files.
//!
//! # Modules
//!
//! * [`compact`]: small-file compaction of a partition's files of one UTC day.
//! * [`framed`]: schema-registry values (Confluent's wire format, Avro and Protobuf) -> a
//!   typed struct column, with the values that do not decode set aside.
//! * [`reencode`]: Kafka record batches again, from a Parquet file (one-copy fetches).
//! * [`sink`]: converted segments to the object store, once per offset range, with a manifest.
//! * [`source`]: where a conversion's input comes from, read a few MiB at a time.
//! * [`stream`]: the streaming two-pass conversion and upload that the sink runs.
//! * [`txn`]: which batches are transaction markers or aborted data, so they never become rows.
//!
//! # Rows
//!
//! One row per record, in offset order:
//!
//! | column        | type                                             | notes |
//! |---------------|--------------------------------------------------|-------|
//! | `partition`   | int32                                            | the same in every row |
//! | `offset`      | int64                                            | page statistics |
//! | `timestamp`   | timestamp(ms, UTC)                               | page statistics; LogAppendTime batches give the broker's time |
//! | `key`         | binary, nullable                                 | |
//! | `value`       | binary, nullable                                 | with a JSON value schema: a nullable struct of typed columns |
//! | `_raw`        | binary, nullable                                 | JSON value schema only: the whole value of a record that did not fit, else null |
//! | `headers`     | list<struct<key: string, value: binary (nullable)>> | empty list when a record has none |
//! | `producer_id` | int64, nullable                                  | null when the batch has no producer id |
//! | `sequence`    | int32, nullable                                  | the record's own sequence (batch base sequence + delta, wrapping as Kafka does) |
//!
//! Transaction control records and the records of aborted transactions are not rows
//! (see [`txn`] for how aborted data is found). Their offsets still count towards the
//! file's offset range, so the files of a partition cover its log without gaps.
//!
//! # File
//!
//! zstd; row groups cut at about [`DEFAULT_ROW_GROUP_BYTES`] of uncompressed data (an
//! estimate made while building, see [`ConvertOptions::row_group_bytes`]); statistics with
//! a page index on `offset` and `timestamp` so readers can prune; chunk statistics on
//! `partition`, `producer_id` and `sequence`; no statistics on the large byte columns.
//! Key-value metadata (see [`metadata_keys`]): topic, partition, first and last offset,
//! value format and schema, and the Strata version. The Arrow schema is embedded as well,
//! so Arrow readers get the UTC time zone and the exact types back. Every column carries
//! a Parquet field id ([`with_field_ids`]: top-level columns 1..=n in order, nested
//! fields after), so an Iceberg table over the files maps columns by id.
//!
//! # Writing to the object store
//!
//! [`sink::ParquetSink`] is the IO layer on top: it converts a sealed segment, uploads
//! the file under a Hive-style key as it is written and keeps a per-partition
//! `_manifest.json` so that each offset range is written exactly once (see [`sink`]).
//!
//! # Memory
//!
//! Records are turned into Arrow arrays a chunk at a time (at most [`CHUNK_ROWS`] rows or
//! [`CHUNK_BYTES`] of data) and handed to the Parquet writer, which keeps only the encoded
//! pages of the row group in progress. A 1 GiB segment never exists as Arrow arrays at
//! once. Through the sink it never exists as bytes either: the input is read in
//! [`READ_CHUNK`] pieces (a batch larger than that is read whole) and the file leaves in
//! upload parts as row groups are flushed, so a conversion holds about a read buffer,
//! two Arrow chunks, the row group in progress (up to
//! [`ConvertOptions::row_group_bytes`] before compression) with its bytes on their way
//! out, and one part (`cold/parquet/tests/streaming.rs` measures it).
//!
//! # JSON values
//!
//! With `parquet.value.format=json` and a `parquet.value.schema` ([`ValueSchema`] documents
//! the format), the `value` column becomes a struct of typed columns and a value that does
//! not fit is kept whole in `_raw`: the file is always written. Each such row also goes,
//! with the reason it did not fit, to a dead-letter file ([`dead_letter_schema`],
//! [`ParquetLayout::dead_letters`], listed in its file's [`ManifestEntry`]). With json but no schema
//! the value stays binary: see [`ValueFormat`] for why nothing is inferred.

pub mod compact;
mod convert;
mod error;
pub mod framed;
mod json;
mod options;
pub mod reencode;
mod schema;
pub mod sink;
pub mod source;
pub mod stream;
pub mod txn;
mod value_schema;

pub use compact::{CompactPolicy, Compacted};
pub use convert::{
    ParquetFile, RawFallback, Summary, convert_batches, convert_segment, write_batches,
};
pub use error::ConvertError;
pub use options::{
    CHUNK_BYTES, CHUNK_ROWS, ConvertOptions, DEFAULT_ROW_GROUP_BYTES, DEFAULT_ZSTD_LEVEL,
    ValueFormat,
};
pub use reencode::{
    ReencodeOptions, Reencoded, first_at_or_after, reader_metadata, reencode, reencode_from,
};
pub use schema::{
    columns, dead_letter_schema, file_schema, metadata_keys, with_field_ids, writer_properties,
};
pub use sink::{
    DEAD_LETTERS_DIR, DeadLetter, DeadLetterFile, ExpiredObjects, Manifest, ManifestEntry,
    ParquetLayout, ParquetSink, SegmentOutcome, SinkError, TopicFile, WrittenFile, read_manifest,
};
pub use source::{ByteSource, READ_CHUNK, SliceSource, SourceError};
pub use txn::{MarkerKind, PendingTxnPolicy, TxnMarker, scan_markers};
pub use value_schema::{SchemaError, ValueSchema};

/// The Strata version written into every file's metadata.
pub const STRATA_VERSION: &str = env!("CARGO_PKG_VERSION");
