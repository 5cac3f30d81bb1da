//! Kafka record batches again, from a Parquet file: the read side of a bucket that keeps
//! one copy (issue 20, part 5: Kafka fetches below the local log start answered from the
//! Parquet files instead of raw segments).
//!
//! Each row becomes a record at its offset, with its key, value, headers and timestamp;
//! consecutive rows go into one batch while their offsets follow each other and they
//! come from the same producer with consecutive sequences, so an idempotent producer's
//! records keep their producer id and sequences (a consumer sees the same offsets, keys,
//! values, headers and timestamps as from the raw segment).
//!
//! What a file does not keep, and so a re-encoded batch does not have:
//! - the producer's batch boundaries and compression codec (batches are re-cut here, up
//!   to [`ReencodeOptions::max_batch_bytes`] and at most every 8,192 rows, where one
//!   decoded Arrow batch ends, and compressed with [`ReencodeOptions::compression`]): a
//!   consumer decompresses whatever codec it gets and reads records, never batches;
//! - the producer epoch (not a column): batches of a producer id carry epoch 0;
//! - the timestamp type: every batch says CreateTime, with the timestamp the log had
//!   (for a LogAppendTime topic, the append time);
//! - control records and aborted transactions' records: conversion leaves them out, so
//!   their offsets are gaps, as in a compacted topic; a read_committed consumer sees
//!   exactly what it would have, a read_uncommitted one does not see aborted records.
//!
//! Only files with a binary `value` column re-encode: typed JSON columns are decoded
//! values, not the bytes the producer sent.

use arrow::array::{
    Array, ArrayRef, BinaryArray, Int32Array, Int64Array, ListArray, StringArray, StructArray,
    TimestampMillisecondArray,
};
use arrow::datatypes::DataType;
use bytes::{Bytes, BytesMut};
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder, RowSelection,
    RowSelector,
};
use parquet::file::metadata::{PageIndexPolicy, ParquetMetaData};
use parquet::file::page_index::column_index::ColumnIndexMetaData;
use parquet::file::reader::ChunkReader;
use parquet::file::statistics::Statistics;
use strata_proto::Compression;
use strata_proto::batch::{BatchHeader, Record};
use strata_proto::ids::Offset;
use strata_proto::rewrite::rewrite_batch;

use crate::error::ConvertError;
use crate::schema::columns;

/// How [`reencode`] cuts and compresses batches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReencodeOptions {
    /// A batch holds records up to about this many bytes (one larger record gets a
    /// batch of its own).
    pub max_batch_bytes: usize,
    pub compression: Compression,
}

impl Default for ReencodeOptions {
    fn default() -> Self {
        ReencodeOptions {
            max_batch_bytes: 1 << 20,
            compression: Compression::None,
        }
    }
}

/// What [`reencode`] made.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reencoded {
    /// RecordBatch v2 batches, back to back, in offset order (a fetch response's
    /// records).
    pub batches: Bytes,
    pub batch_count: usize,
    pub records: u64,
    /// The last record's offset.
    pub last_offset: Option<Offset>,
    /// Whether the file holds rows after the last one returned (`max_bytes` was
    /// reached).
    pub more: bool,
}

/// A record batch's bytes beyond its records (the v2 header).
const BATCH_OVERHEAD: usize = 61;

/// Rows decoded at a time: batches are also cut where one Arrow batch ends.
const READ_ROWS: usize = 8192;

/// The columns of one Arrow batch of the file.
struct Columns<'a> {
    offset: &'a Int64Array,
    timestamp: &'a TimestampMillisecondArray,
    key: &'a BinaryArray,
    value: &'a BinaryArray,
    /// Each row's headers: a range of `header_keys`/`header_values`.
    header_offsets: &'a [i32],
    header_keys: &'a StringArray,
    header_values: &'a BinaryArray,
    producer_id: &'a Int64Array,
    sequence: &'a Int32Array,
}

fn bad(reason: impl Into<String>) -> ConvertError {
    ConvertError::InvalidOptions(format!("cannot re-encode this file: {}", reason.into()))
}

impl<'a> Columns<'a> {
    fn of(b: &'a arrow::record_batch::RecordBatch) -> Result<Columns<'a>, ConvertError> {
        /// Column `name` (of `what` type) as the array type `T`.
        fn typed<'a, T: 'static>(
            array: Option<&'a ArrayRef>,
            name: &str,
            what: &str,
        ) -> Result<&'a T, ConvertError> {
            array
                .ok_or_else(|| bad(format!("no column {name}")))?
                .as_any()
                .downcast_ref()
                .ok_or_else(|| bad(format!("column {name} is not {what}")))
        }
        let col = |name: &str| b.column_by_name(name);
        if let Some(value) = col(columns::VALUE)
            && value.data_type() != &DataType::Binary
        {
            return Err(bad(format!(
                "its value column is {} (typed JSON values): only binary values keep the bytes producers sent",
                value.data_type()
            )));
        }
        let headers: &ListArray = typed(col(columns::HEADERS), columns::HEADERS, "a list")?;
        let members: &StructArray = typed(
            Some(headers.values()),
            columns::HEADERS,
            "a list of structs",
        )?;
        let pairs = "(utf8, binary) pairs";
        Ok(Columns {
            offset: typed(col(columns::OFFSET), columns::OFFSET, "int64")?,
            timestamp: typed(
                col(columns::TIMESTAMP),
                columns::TIMESTAMP,
                "a millisecond timestamp",
            )?,
            key: typed(col(columns::KEY), columns::KEY, "binary")?,
            value: typed(col(columns::VALUE), columns::VALUE, "binary")?,
            header_offsets: headers.value_offsets(),
            header_keys: typed(members.columns().first(), columns::HEADERS, pairs)?,
            header_values: typed(members.columns().get(1), columns::HEADERS, pairs)?,
            producer_id: typed(col(columns::PRODUCER_ID), columns::PRODUCER_ID, "int64")?,
            sequence: typed(col(columns::SEQUENCE), columns::SEQUENCE, "int32")?,
        })
    }

    /// Row `i` as a record borrowed from the arrays.
    fn record(&self, i: usize) -> Record<'a> {
        let bytes = |a: &'a BinaryArray| (!a.is_null(i)).then(|| a.value(i));
        let (from, to) = (
            self.header_offsets[i] as usize,
            self.header_offsets[i + 1] as usize,
        );
        Record {
            offset: self.offset.value(i),
            timestamp: self.timestamp.value(i),
            key: bytes(self.key),
            value: bytes(self.value),
            headers: (from..to)
                .map(|j| {
                    (
                        self.header_keys.value(j),
                        (!self.header_values.is_null(j)).then(|| self.header_values.value(j)),
                    )
                })
                .collect(),
        }
    }

    fn producer(&self, i: usize) -> Option<(i64, i32)> {
        (!self.producer_id.is_null(i) && !self.sequence.is_null(i))
            .then(|| (self.producer_id.value(i), self.sequence.value(i)))
    }
}

/// A run of rows that becomes one batch.
struct Run<'a> {
    /// The producer id and base sequence.
    producer: Option<(i64, i32)>,
    /// The sequence the next record of the run must have.
    next_sequence: i32,
    records: Vec<Record<'a>>,
    bytes: usize,
}

impl Run<'_> {
    /// Encodes the run as one batch at the end of `out`.
    fn encode(&self, compression: Compression, out: &mut BytesMut) -> Result<(), ConvertError> {
        let (first, last) = match (self.records.first(), self.records.last()) {
            (Some(f), Some(l)) => (f, l),
            _ => return Ok(()),
        };
        let (producer_id, producer_epoch, base_sequence) = match self.producer {
            Some((id, seq)) => (id, 0, seq),
            None => (-1, -1, -1),
        };
        let header = BatchHeader {
            base_offset: first.offset,
            batch_length: 0,
            partition_leader_epoch: -1,
            magic: 2,
            crc: 0,
            attributes: compression.id(),
            last_offset_delta: i32::try_from(last.offset - first.offset)
                .map_err(|_| bad("a run longer than a batch can say"))?,
            base_timestamp: first.timestamp,
            max_timestamp: self.records.iter().map(|r| r.timestamp).max().unwrap_or(0),
            producer_id,
            producer_epoch,
            base_sequence,
            record_count: self.records.len() as i32,
        };
        let encoded = rewrite_batch(&header, &self.records, None)
            .map_err(|e| bad(format!("encoding a batch: {e}")))?;
        out.extend_from_slice(&encoded);
        Ok(())
    }
}

fn record_bytes(r: &Record<'_>) -> usize {
    24 + r.key.map_or(0, <[u8]>::len)
        + r.value.map_or(0, <[u8]>::len)
        + r.headers
            .iter()
            .map(|(k, v)| 10 + k.len() + v.map_or(0, <[u8]>::len))
            .sum::<usize>()
}

/// The next sequence after `s`, wrapping as Kafka's does.
fn next_sequence(s: i32) -> i32 {
    if s == i32::MAX { 0 } else { s + 1 }
}

/// The record batches of `file`'s rows at or after offset `from`, up to about
/// `max_bytes` (at least one batch when there is a row, as a fetch returns at least one).
/// Row groups wholly below `from` (by their offset statistics) are not decoded. Records
/// are encoded straight from the decoded columns, without copying them first.
pub fn reencode(
    file: Bytes,
    from: Offset,
    max_bytes: usize,
    options: &ReencodeOptions,
) -> Result<Reencoded, ConvertError> {
    let meta = reader_metadata(&file)?;
    reencode_from(file, &meta, from, max_bytes, options)
}

/// A file's footer and page indexes, as [`reencode_from`] wants them: load once per file
/// and keep (a reader serving fetches caches them per object).
pub fn reader_metadata<R: ChunkReader>(file: &R) -> Result<ArrowReaderMetadata, ConvertError> {
    let options = ArrowReaderOptions::new().with_page_index_policy(PageIndexPolicy::Optional);
    Ok(ArrowReaderMetadata::load(file, options)?)
}

/// Where reading for offset `from` starts: the row groups that may hold it or later
/// rows, and in the first of them the rows to skip (the pages wholly below `from`, by
/// the offset column's page index, so they are neither read nor decoded).
fn start_of(meta: &ParquetMetaData, from: Offset) -> Result<(Vec<usize>, usize), ConvertError> {
    let offset_col = meta
        .file_metadata()
        .schema_descr()
        .columns()
        .iter()
        .position(|c| c.path().parts() == [columns::OFFSET])
        .ok_or_else(|| bad("no offset column"))?;
    let groups: Vec<usize> = meta
        .row_groups()
        .iter()
        .enumerate()
        .filter(|(_, rg)| match rg.column(offset_col).statistics() {
            Some(Statistics::Int64(s)) => s.max_opt().is_none_or(|&max| max >= from),
            _ => true,
        })
        .map(|(i, _)| i)
        .collect();
    let Some(&first) = groups.first() else {
        return Ok((groups, 0));
    };
    let index = meta.page_index_for_row_group(first);
    let skip = match (
        index.column_index(offset_col),
        index.page_locations(offset_col),
    ) {
        (Some(ColumnIndexMetaData::INT64(pages)), Some(locations)) => {
            // The last page starting at or below `from` may hold it: the pages before
            // it end below `from`.
            let mut skip = 0usize;
            for i in 0..locations.len() {
                match pages.max_value(i) {
                    Some(&max) if max < from => {
                        skip = locations
                            .get(i + 1)
                            .map_or(skip, |next| next.first_row_index as usize);
                    }
                    _ => break,
                }
            }
            skip
        }
        _ => 0,
    };
    Ok((groups, skip))
}

/// [`reencode`] from any [`ChunkReader`] (a file read through a cache, for example) with
/// its metadata loaded already ([`reader_metadata`]). Only the pages holding rows at or
/// after `from` are read, and only as many as `max_bytes` takes (decoded a few hundred
/// rows at a time, by the file's average row size).
pub fn reencode_from<R: ChunkReader + 'static>(
    file: R,
    meta: &ArrowReaderMetadata,
    from: Offset,
    max_bytes: usize,
    options: &ReencodeOptions,
) -> Result<Reencoded, ConvertError> {
    let (groups, skip) = start_of(meta.metadata(), from)?;
    let total_rows: usize = groups
        .iter()
        .map(|&g| usize::try_from(meta.metadata().row_group(g).num_rows()).unwrap_or(0))
        .sum();
    // Decode about what the caller wants (a fetch's few MiB), not 8,192 rows of it.
    let (rows, bytes) = groups.iter().fold((0u64, 0u64), |(r, b), &g| {
        let rg = meta.metadata().row_group(g);
        (
            r + rg.num_rows().max(0) as u64,
            b + rg.total_byte_size().max(0) as u64,
        )
    });
    let row_bytes = bytes.checked_div(rows).unwrap_or(1).max(1);
    let batch_rows = usize::try_from(max_bytes as u64 / row_bytes + 1)
        .unwrap_or(READ_ROWS)
        .clamp(64, READ_ROWS);
    let mut builder = ParquetRecordBatchReaderBuilder::new_with_metadata(file, meta.clone())
        .with_row_groups(groups)
        .with_batch_size(batch_rows);
    if skip > 0 {
        builder = builder.with_row_selection(RowSelection::from(vec![
            RowSelector::skip(skip),
            RowSelector::select(total_rows - skip),
        ]));
    }
    let reader = builder.build()?;
    let total_rows = total_rows - skip;
    let mut rows_read = 0usize;

    let mut out = BytesMut::new();
    let mut done = Reencoded::default();
    // Encodes a run: `Some(full)` when taken (whether the answer is full now), `None`
    // when it stays for the next read because it would take the answer past
    // `max_bytes` (only a first batch may be larger, KIP-74).
    let mut finish = |run: Run<'_>, out: &mut BytesMut| -> Result<Option<bool>, ConvertError> {
        if !out.is_empty() && out.len() + BATCH_OVERHEAD + run.bytes > max_bytes {
            return Ok(None);
        }
        run.encode(options.compression, out)?;
        done.batch_count += 1;
        done.records += run.records.len() as u64;
        done.last_offset = run.records.last().map(|r| r.offset);
        Ok(Some(out.len() >= max_bytes))
    };
    'file: for b in reader {
        let b = b?;
        rows_read += b.num_rows();
        let cols = Columns::of(&b)?;
        let mut run: Option<Run<'_>> = None;
        for i in 0..b.num_rows() {
            let offset = cols.offset.value(i);
            if offset < from {
                continue;
            }
            let producer = cols.producer(i);
            let record = cols.record(i);
            let size = record_bytes(&record);
            let joins = run.as_ref().is_some_and(|r| {
                r.records.last().is_some_and(|l| l.offset + 1 == offset)
                    && r.bytes + size <= options.max_batch_bytes
                    && match (r.producer, producer) {
                        (None, None) => true,
                        (Some((p, _)), Some((q, t))) => p == q && t == r.next_sequence,
                        _ => false,
                    }
            });
            if !joins
                && let Some(r) = run.take()
                && finish(r, &mut out)? != Some(false)
            {
                done.more = true;
                break 'file;
            }
            match &mut run {
                Some(r) => {
                    r.bytes += size;
                    r.next_sequence = next_sequence(r.next_sequence);
                    r.records.push(record);
                }
                None => {
                    run = Some(Run {
                        producer,
                        next_sequence: producer.map_or(0, |(_, s)| next_sequence(s)),
                        records: vec![record],
                        bytes: size,
                    })
                }
            }
        }
        // A run ends with its Arrow batch: its records borrow from it.
        if let Some(r) = run.take() {
            match finish(r, &mut out)? {
                Some(false) => {}
                // Offsets only grow in a file: any row not read yet comes after.
                Some(true) => {
                    done.more = rows_read < total_rows;
                    break 'file;
                }
                None => {
                    done.more = true;
                    break 'file;
                }
            }
        }
    }
    done.batches = out.freeze();
    Ok(done)
}

/// The first row of `file` whose timestamp is at or after `timestamp`, in offset order:
/// its offset and timestamp (Kafka's ListOffsets by time). Reads only the offset and
/// timestamp columns of the row groups whose timestamps reach `timestamp`.
pub fn first_at_or_after<R: ChunkReader + 'static>(
    file: R,
    meta: &ArrowReaderMetadata,
    timestamp: i64,
) -> Result<Option<(Offset, i64)>, ConvertError> {
    let m = meta.metadata();
    let schema = m.file_metadata().schema_descr();
    let ts_col = schema
        .columns()
        .iter()
        .position(|c| c.path().parts() == [columns::TIMESTAMP])
        .ok_or_else(|| bad("no timestamp column"))?;
    let groups: Vec<usize> = m
        .row_groups()
        .iter()
        .enumerate()
        .filter(|(_, rg)| match rg.column(ts_col).statistics() {
            Some(Statistics::Int64(s)) => s.max_opt().is_none_or(|&max| max >= timestamp),
            _ => true,
        })
        .map(|(i, _)| i)
        .collect();
    if groups.is_empty() {
        return Ok(None);
    }
    let mask = ProjectionMask::columns(schema, [columns::OFFSET, columns::TIMESTAMP]);
    let reader = ParquetRecordBatchReaderBuilder::new_with_metadata(file, meta.clone())
        .with_row_groups(groups)
        .with_projection(mask)
        .with_batch_size(READ_ROWS)
        .build()?;
    for b in reader {
        let b = b?;
        let offsets: &Int64Array = b
            .column_by_name(columns::OFFSET)
            .and_then(|c| c.as_any().downcast_ref())
            .ok_or_else(|| bad("the offset column is not int64"))?;
        let times: &TimestampMillisecondArray = b
            .column_by_name(columns::TIMESTAMP)
            .and_then(|c| c.as_any().downcast_ref())
            .ok_or_else(|| bad("the timestamp column is not a millisecond timestamp"))?;
        if let Some(i) = (0..b.num_rows()).find(|&i| times.value(i) >= timestamp) {
            return Ok(Some((offsets.value(i), times.value(i))));
        }
    }
    Ok(None)
}
