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
//!   to [`ReencodeOptions::max_batch_bytes`], and compressed with
//!   [`ReencodeOptions::compression`]): a consumer decompresses whatever codec it gets
//!   and reads records, never batches;
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
    Array, AsArray, BinaryArray, Int32Array, Int64Array, ListArray, StringArray, StructArray,
    TimestampMillisecondArray,
};
use arrow::datatypes::DataType;
use bytes::{Bytes, BytesMut};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::file::statistics::Statistics;
use strata_proto::Compression;
use strata_proto::batch::build::{NewRecord, ProducerFields, batch};
use strata_proto::batch::set_base_offset;
use strata_proto::ids::Offset;

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

/// The columns of one Arrow batch of the file.
struct Columns<'a> {
    offset: &'a Int64Array,
    timestamp: &'a TimestampMillisecondArray,
    key: &'a BinaryArray,
    value: &'a BinaryArray,
    headers: &'a ListArray,
    producer_id: &'a Int64Array,
    sequence: &'a Int32Array,
}

fn bad(reason: impl Into<String>) -> ConvertError {
    ConvertError::InvalidOptions(format!("cannot re-encode this file: {}", reason.into()))
}

impl<'a> Columns<'a> {
    fn of(b: &'a arrow::record_batch::RecordBatch) -> Result<Columns<'a>, ConvertError> {
        let col = |name: &str| {
            b.column_by_name(name)
                .ok_or_else(|| bad(format!("no column {name}")))
        };
        let value = col(columns::VALUE)?;
        if value.data_type() != &DataType::Binary {
            return Err(bad(format!(
                "its value column is {} (typed JSON values): only binary values keep the bytes producers sent",
                value.data_type()
            )));
        }
        let typed = |name: &str, what: &str| bad(format!("column {name} is not {what}"));
        Ok(Columns {
            offset: col(columns::OFFSET)?
                .as_any()
                .downcast_ref()
                .ok_or_else(|| typed(columns::OFFSET, "int64"))?,
            timestamp: col(columns::TIMESTAMP)?
                .as_any()
                .downcast_ref()
                .ok_or_else(|| typed(columns::TIMESTAMP, "a millisecond timestamp"))?,
            key: col(columns::KEY)?
                .as_any()
                .downcast_ref()
                .ok_or_else(|| typed(columns::KEY, "binary"))?,
            value: value
                .as_any()
                .downcast_ref()
                .ok_or_else(|| typed(columns::VALUE, "binary"))?,
            headers: col(columns::HEADERS)?
                .as_any()
                .downcast_ref()
                .ok_or_else(|| typed(columns::HEADERS, "a list"))?,
            producer_id: col(columns::PRODUCER_ID)?
                .as_any()
                .downcast_ref()
                .ok_or_else(|| typed(columns::PRODUCER_ID, "int64"))?,
            sequence: col(columns::SEQUENCE)?
                .as_any()
                .downcast_ref()
                .ok_or_else(|| typed(columns::SEQUENCE, "int32"))?,
        })
    }

    fn record(&self, i: usize) -> Result<NewRecord, ConvertError> {
        let bytes = |a: &BinaryArray| (!a.is_null(i)).then(|| Bytes::copy_from_slice(a.value(i)));
        let headers = self.headers.value(i);
        let headers: &StructArray = headers.as_struct();
        let (hk, hv): (&StringArray, &BinaryArray) = match (
            headers.column(0).as_any().downcast_ref(),
            headers.column(1).as_any().downcast_ref(),
        ) {
            (Some(k), Some(v)) => (k, v),
            _ => return Err(bad("headers are not (utf8, binary) pairs")),
        };
        Ok(NewRecord {
            key: bytes(self.key),
            value: bytes(self.value),
            headers: (0..headers.len())
                .map(|j| {
                    (
                        hk.value(j).to_string(),
                        (!hv.is_null(j)).then(|| Bytes::copy_from_slice(hv.value(j))),
                    )
                })
                .collect(),
            timestamp: self.timestamp.value(i),
        })
    }

    fn producer(&self, i: usize) -> Option<(i64, i32)> {
        (!self.producer_id.is_null(i) && !self.sequence.is_null(i))
            .then(|| (self.producer_id.value(i), self.sequence.value(i)))
    }
}

/// A run of rows that becomes one batch.
struct Run {
    first: Offset,
    last: Offset,
    /// The producer id and base sequence.
    producer: Option<(i64, i32)>,
    /// The sequence the next record of the run must have.
    next_sequence: i32,
    records: Vec<NewRecord>,
    bytes: usize,
}

fn record_bytes(r: &NewRecord) -> usize {
    24 + r.key.as_ref().map_or(0, Bytes::len)
        + r.value.as_ref().map_or(0, Bytes::len)
        + r.headers
            .iter()
            .map(|(k, v)| 10 + k.len() + v.as_ref().map_or(0, Bytes::len))
            .sum::<usize>()
}

/// The next sequence after `s`, wrapping as Kafka's does.
fn next_sequence(s: i32) -> i32 {
    if s == i32::MAX { 0 } else { s + 1 }
}

/// The record batches of `file`'s rows at or after offset `from`, up to about
/// `max_bytes` (at least one batch when there is a row, as a fetch returns at least one).
/// Row groups wholly below `from` (by their offset statistics) are not decoded.
pub fn reencode(
    file: Bytes,
    from: Offset,
    max_bytes: usize,
    options: &ReencodeOptions,
) -> Result<Reencoded, ConvertError> {
    let builder = ParquetRecordBatchReaderBuilder::try_new(file)?;
    let meta = builder.metadata().clone();
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
    let reader = builder.with_row_groups(groups).build()?;

    let mut out = BytesMut::new();
    let mut done = Reencoded::default();
    let mut run: Option<Run> = None;
    let flush = |run: Run, out: &mut BytesMut, done: &mut Reencoded| {
        let producer = run
            .producer
            .map(|(producer_id, base_sequence)| ProducerFields {
                producer_id,
                producer_epoch: 0,
                base_sequence,
            });
        let encoded = batch(&run.records, options.compression, producer);
        let start = out.len();
        out.extend_from_slice(&encoded);
        set_base_offset(&mut out[start..], run.first);
        done.batch_count += 1;
        done.records += run.records.len() as u64;
        done.last_offset = Some(run.last);
    };
    'files: for b in reader {
        let b = b?;
        let cols = Columns::of(&b)?;
        for i in 0..b.num_rows() {
            let offset = cols.offset.value(i);
            if offset < from {
                continue;
            }
            let producer = cols.producer(i);
            let record = cols.record(i)?;
            let size = record_bytes(&record);
            let joins = run.as_ref().is_some_and(|r| {
                r.last + 1 == offset
                    && r.bytes + size <= options.max_batch_bytes
                    && match (r.producer, producer) {
                        (None, None) => true,
                        (Some((p, _)), Some((q, t))) => p == q && t == r.next_sequence,
                        _ => false,
                    }
            });
            if !joins && let Some(r) = run.take() {
                flush(r, &mut out, &mut done);
                if out.len() >= max_bytes {
                    done.more = true;
                    break 'files;
                }
            }
            match &mut run {
                Some(r) => {
                    r.last = offset;
                    r.bytes += size;
                    r.next_sequence = next_sequence(r.next_sequence);
                    r.records.push(record);
                }
                None => {
                    run = Some(Run {
                        first: offset,
                        last: offset,
                        producer,
                        next_sequence: producer.map_or(0, |(_, s)| next_sequence(s)),
                        records: vec![record],
                        bytes: size,
                    })
                }
            }
        }
    }
    if let Some(r) = run.take() {
        flush(r, &mut out, &mut done);
    }
    done.batches = out.freeze();
    Ok(done)
}
