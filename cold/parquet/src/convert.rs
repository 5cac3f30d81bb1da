//! The conversion: batches -> Arrow chunks -> Parquet row groups.

use std::io::Write;
use std::sync::Arc;

use arrow::array::{
    Array, ArrayBuilder, ArrayRef, BinaryArray, BinaryBuilder, Int32Array, Int32Builder,
    Int64Array, Int64Builder, ListArray, StringArray, StringBuilder, StructArray,
    TimestampMillisecondArray, UInt32Array,
};
use arrow::buffer::{NullBuffer, OffsetBuffer, ScalarBuffer};
use arrow::compute::take;
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch as ArrowBatch;
use parquet::arrow::ArrowWriter;
use parquet::file::metadata::KeyValue;
use strata_proto::batch::{self, BatchError, RecordBatch};
use strata_proto::ids::{Offset, PartitionId};

use crate::STRATA_VERSION;
use crate::error::ConvertError;
use crate::json::JsonValues;
use crate::options::{CHUNK_BYTES, CHUNK_ROWS, ConvertOptions, ValueFormat};
use crate::schema::{
    columns, dead_letter_schema, file_schema, header_members, headers_item_field, metadata_keys,
    writer_properties,
};
use crate::txn::{Fate, FateScan};
use crate::value_schema::UTC;

/// A Parquet file in memory and what it holds.
#[derive(Debug, Clone)]
pub struct ParquetFile {
    pub bytes: Vec<u8>,
    pub summary: Summary,
}

/// What a conversion wrote: what the offloader's manifest and its metrics need.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    /// The input's offset range: the first batch's base offset and the last batch's last
    /// offset, control and aborted records included (also in the file's metadata).
    pub first_offset: Offset,
    pub last_offset: Offset,
    /// Over the rows written; `None` when there are none.
    pub min_timestamp: Option<i64>,
    pub max_timestamp: Option<i64>,
    /// The first row's timestamp (the date in the file's key); `None` when there are no
    /// rows.
    pub first_timestamp: Option<i64>,
    pub rows: u64,
    pub row_groups: usize,
    /// Bytes of the input batches.
    pub input_bytes: u64,
    /// Bytes of the Parquet file.
    pub file_bytes: u64,
    /// Values that did not fit the JSON value schema and were kept whole in `_raw`.
    pub raw_fallbacks: u64,
    /// The first of them, for a log line.
    pub first_raw_fallback: Option<RawFallback>,
    /// Records of control batches (transaction markers), not written.
    pub control_records: u64,
    /// Records of aborted transactions, not written.
    pub aborted_records: u64,
}

/// A value that went to `_raw`, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawFallback {
    pub offset: Offset,
    pub reason: String,
}

/// Converts a segment (concatenated batches, as the log stores them).
pub fn convert_segment(segment: &[u8], opts: &ConvertOptions) -> Result<ParquetFile, ConvertError> {
    let mut batches = Vec::new();
    let mut iter = batch::batches(segment);
    loop {
        let position = segment.len() - iter.remaining().len();
        match iter.next() {
            None => break,
            Some(Ok(b)) => batches.push(b),
            Some(Err(source)) => return Err(ConvertError::Framing { position, source }),
        }
    }
    convert_batches(batches, opts)
}

/// Converts batches (for example those of a run of segments), in offset order.
pub fn convert_batches<'a>(
    batches: impl IntoIterator<Item = RecordBatch<'a>>,
    opts: &ConvertOptions,
) -> Result<ParquetFile, ConvertError> {
    let (bytes, summary) = write_batches(batches, opts, Vec::new())?;
    Ok(ParquetFile { bytes, summary })
}

/// Converts batches into `out`, returning it. The file is complete only when this returns
/// `Ok`: a caller writing to storage writes under a temporary name.
pub fn write_batches<'a, W: Write + Send>(
    batches: impl IntoIterator<Item = RecordBatch<'a>>,
    opts: &ConvertOptions,
    out: W,
) -> Result<(W, Summary), ConvertError> {
    let props = writer_properties(opts)?;
    // The batches are only borrowed views (header plus slice), so holding them all is
    // cheap, and it lets the transaction scan see every marker before any row is written.
    let batches: Vec<RecordBatch<'a>> = batches.into_iter().collect();
    let (Some(first), Some(last)) = (batches.first(), batches.last()) else {
        return Err(ConvertError::Empty);
    };
    let (first_offset, last_offset) = (first.base_offset(), last.last_offset());

    // Pass 1: framing order, CRCs and each batch's fate, from headers and control batches.
    let mut scan = FateScan::default();
    let mut previous: Option<Offset> = None;
    for b in &batches {
        let h = b.header();
        if h.last_offset_delta < 0 {
            return Err(ConvertError::Batch {
                base_offset: h.base_offset,
                source: BatchError::BadRecordCount {
                    count: h.record_count,
                    last_offset_delta: h.last_offset_delta,
                },
            });
        }
        if let Some(p) = previous
            && h.base_offset <= p
        {
            return Err(ConvertError::OutOfOrder {
                base_offset: h.base_offset,
                previous_last_offset: p,
            });
        }
        previous = Some(h.last_offset());
        if opts.verify_crc {
            b.validate_crc().map_err(|source| ConvertError::Batch {
                base_offset: h.base_offset,
                source,
            })?;
        }
        scan.push(b)?;
    }
    let fates = scan.finish(&opts.later_markers, opts.pending_transactions)?;

    // Pass 2: rows.
    let mut conv = Converter::new(opts, props, first_offset, last_offset, out)?;
    for b in &batches {
        conv.push(b, fates.of(b.header()))?;
    }
    conv.finish()
}

/// Counts what goes through to the caller's writer.
struct Counting<W> {
    inner: W,
    written: u64,
}

impl<W: Write> Write for Counting<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.written += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// Estimated uncompressed Parquet bytes of a row's fixed-width columns: partition 4,
/// offset 8, timestamp 8, producer id 8, sequence 4, plus the headers list's levels.
const ROW_FIXED_BYTES: usize = 34;
/// Plain-encoded byte arrays carry a 4-byte length.
const LEN_PREFIX: usize = 4;

/// Arrow builders of the chunk being filled.
struct Chunk {
    offsets: Vec<i64>,
    timestamps: Vec<i64>,
    keys: BinaryBuilder,
    values: BinaryBuilder,
    header_offsets: Vec<i32>,
    header_keys: StringBuilder,
    header_values: BinaryBuilder,
    producer_ids: Int64Builder,
    sequences: Int32Builder,
    /// Estimated bytes, as counted for row groups.
    bytes: usize,
}

impl Chunk {
    fn new() -> Chunk {
        // Sized for a full chunk of mid-sized records, so value data is copied once, not
        // on every doubling.
        let rows = 1024;
        let mut header_offsets = Vec::with_capacity(rows + 1);
        header_offsets.push(0);
        Chunk {
            offsets: Vec::with_capacity(rows),
            timestamps: Vec::with_capacity(rows),
            keys: BinaryBuilder::with_capacity(rows, 16 * 1024),
            values: BinaryBuilder::with_capacity(rows, CHUNK_BYTES + 64 * 1024),
            header_offsets,
            header_keys: StringBuilder::new(),
            header_values: BinaryBuilder::new(),
            producer_ids: Int64Builder::with_capacity(rows),
            sequences: Int32Builder::with_capacity(rows),
            bytes: 0,
        }
    }

    fn rows(&self) -> usize {
        self.offsets.len()
    }
}

/// Batches in, Parquet out to `W`: row groups are written to `W` as they fill.
pub(crate) struct Converter<W: Write + Send> {
    writer: ArrowWriter<Counting<W>>,
    schema: SchemaRef,
    partition: PartitionId,
    row_group_bytes: usize,
    json: Option<JsonValues>,
    chunk: Chunk,
    /// Estimated bytes of the row group in progress.
    group_bytes: usize,
    /// The last row's offset, to check records come in order.
    last_row_offset: Option<Offset>,
    summary: Summary,
    /// JSON values: the rows whose value did not fit, as dead-letter rows
    /// ([`dead_letter_schema`]) not yet taken, and their values' bytes.
    dead_letters: Vec<ArrowBatch>,
    dead_letter_bytes: usize,
}

impl<W: Write + Send> Converter<W> {
    pub(crate) fn new(
        opts: &ConvertOptions,
        props: parquet::file::properties::WriterProperties,
        first_offset: Offset,
        last_offset: Offset,
        out: W,
    ) -> Result<Self, ConvertError> {
        let schema = file_schema(&opts.value_format);
        let json = match &opts.value_format {
            ValueFormat::Binary => None,
            ValueFormat::Json(s) => Some(JsonValues::new(s, &schema)?),
        };
        let counting = Counting {
            inner: out,
            written: 0,
        };
        let mut writer = ArrowWriter::try_new(counting, schema.clone(), Some(props))?;
        let mut kv = vec![
            (metadata_keys::TOPIC, opts.topic.clone()),
            (metadata_keys::PARTITION, opts.partition.to_string()),
            (metadata_keys::FIRST_OFFSET, first_offset.to_string()),
            (metadata_keys::LAST_OFFSET, last_offset.to_string()),
            (
                metadata_keys::VALUE_FORMAT,
                opts.value_format.name().to_string(),
            ),
            (metadata_keys::VERSION, STRATA_VERSION.to_string()),
        ];
        if let ValueFormat::Json(s) = &opts.value_format {
            kv.push((metadata_keys::VALUE_SCHEMA, s.source().to_string()));
        }
        for (k, v) in kv {
            writer.append_key_value_metadata(KeyValue::new(k.to_string(), v));
        }
        Ok(Converter {
            writer,
            schema,
            partition: opts.partition,
            row_group_bytes: opts.row_group_bytes,
            json,
            chunk: Chunk::new(),
            group_bytes: 0,
            last_row_offset: None,
            summary: Summary {
                first_offset,
                last_offset,
                min_timestamp: None,
                max_timestamp: None,
                first_timestamp: None,
                rows: 0,
                row_groups: 0,
                input_bytes: 0,
                file_bytes: 0,
                raw_fallbacks: 0,
                first_raw_fallback: None,
                control_records: 0,
                aborted_records: 0,
            },
            dead_letters: Vec::new(),
            dead_letter_bytes: 0,
        })
    }

    /// The dead-letter rows not taken yet: their values' bytes.
    pub(crate) fn dead_letter_bytes(&self) -> usize {
        self.dead_letter_bytes
    }

    /// Takes the dead-letter rows collected so far (in offset order).
    pub(crate) fn take_dead_letters(&mut self) -> Vec<ArrowBatch> {
        self.dead_letter_bytes = 0;
        std::mem::take(&mut self.dead_letters)
    }

    /// Takes one batch of the input, in offset order, with its fate.
    pub(crate) fn push(&mut self, b: &RecordBatch<'_>, fate: Fate) -> Result<(), ConvertError> {
        self.summary.input_bytes += b.len() as u64;
        let count = b.header().record_count.max(0) as u64;
        match fate {
            Fate::Rows => self.push_batch(b)?,
            Fate::Control => self.summary.control_records += count,
            Fate::Aborted => self.summary.aborted_records += count,
        }
        Ok(())
    }

    /// The writer's output so far, not yet taken (a streaming caller drains it).
    pub(crate) fn out_mut(&mut self) -> &mut W {
        &mut self.writer.inner_mut().inner
    }

    /// The first row's timestamp, once there is a row.
    pub(crate) fn first_timestamp(&self) -> Option<i64> {
        self.summary.first_timestamp
    }

    fn push_batch(&mut self, b: &RecordBatch<'_>) -> Result<(), ConvertError> {
        let h = *b.header();
        let batch_err = |source| ConvertError::Batch {
            base_offset: h.base_offset,
            source,
        };
        let records = b.records().map_err(batch_err)?;
        let producer_id = h.has_producer_id().then_some(h.producer_id);
        let base_sequence =
            (h.has_producer_id() && h.base_sequence >= 0).then_some(h.base_sequence);
        for r in records.iter() {
            let r = r.map_err(batch_err)?;
            if r.offset < h.base_offset
                || r.offset > h.last_offset()
                || self.last_row_offset.is_some_and(|l| r.offset <= l)
            {
                return Err(batch_err(BatchError::InvalidRecord(
                    "record offsets out of order or outside the batch",
                )));
            }
            self.last_row_offset = Some(r.offset);

            let mut est = ROW_FIXED_BYTES
                + r.key.map_or(0, |k| k.len() + LEN_PREFIX)
                + r.value.map_or(0, |v| v.len() + LEN_PREFIX);
            for (k, v) in &r.headers {
                est += k.len() + LEN_PREFIX + v.map_or(0, |v| v.len() + LEN_PREFIX);
            }
            if self.group_bytes > 0 && self.group_bytes + est > self.row_group_bytes {
                self.flush_chunk()?;
                self.writer.flush()?;
                self.group_bytes = 0;
            }

            let c = &mut self.chunk;
            c.offsets.push(r.offset);
            c.timestamps.push(r.timestamp);
            c.keys.append_option(r.key);
            c.values.append_option(r.value);
            for (k, v) in &r.headers {
                c.header_keys.append_value(k);
                c.header_values.append_option(*v);
            }
            let header_count = c.header_keys.len();
            c.header_offsets
                .push(i32::try_from(header_count).map_err(|_| {
                    batch_err(BatchError::InvalidRecord("too many headers in one chunk"))
                })?);
            c.producer_ids.append_option(producer_id);
            c.sequences.append_option(
                base_sequence.map(|base| sequence_at(base, r.offset - h.base_offset)),
            );
            c.bytes += est;
            self.group_bytes += est;

            let s = &mut self.summary;
            s.first_timestamp.get_or_insert(r.timestamp);
            s.min_timestamp = Some(s.min_timestamp.map_or(r.timestamp, |m| m.min(r.timestamp)));
            s.max_timestamp = Some(s.max_timestamp.map_or(r.timestamp, |m| m.max(r.timestamp)));

            if c.rows() >= CHUNK_ROWS || c.bytes >= CHUNK_BYTES {
                self.flush_chunk()?;
            }
        }
        Ok(())
    }

    /// Turns the chunk into Arrow arrays and hands them to the writer.
    pub(crate) fn flush_chunk(&mut self) -> Result<(), ConvertError> {
        let n = self.chunk.rows();
        if n == 0 {
            return Ok(());
        }
        let mut c = std::mem::replace(&mut self.chunk, Chunk::new());
        let values = c.values.finish();
        let mut misfits = None;
        let (value, raw) = match &mut self.json {
            None => (Arc::new(values) as ArrayRef, None),
            Some(json) => {
                let decoded = json.decode(&values)?;
                if !decoded.misfits.is_empty() {
                    misfits = Some((
                        decoded.misfits.clone(),
                        decoded.reasons.clone(),
                        values.clone(),
                    ));
                }
                let raw = if decoded.misfits.is_empty() {
                    BinaryArray::new_null(n)
                } else {
                    let mut keep = vec![false; n];
                    for &i in &decoded.misfits {
                        keep[i] = true;
                    }
                    self.summary.raw_fallbacks += decoded.misfits.len() as u64;
                    if self.summary.first_raw_fallback.is_none() {
                        self.summary.first_raw_fallback = Some(RawFallback {
                            offset: c.offsets[decoded.misfits[0]],
                            reason: decoded.reasons.first().cloned().unwrap_or_default(),
                        });
                    }
                    // Shares the values' buffers: only the misfits are valid, and the
                    // writer reads nothing else.
                    let (offsets, data, _) = values.into_parts();
                    BinaryArray::try_new(offsets, data, Some(NullBuffer::from(keep)))?
                };
                (decoded.column, Some(Arc::new(raw) as ArrayRef))
            }
        };
        let item = headers_item_field(&self.schema);
        let headers = StructArray::try_new(
            header_members(&item),
            vec![
                Arc::new(c.header_keys.finish()) as ArrayRef,
                Arc::new(c.header_values.finish()),
            ],
            None,
        )?;
        let headers = ListArray::try_new(
            item,
            OffsetBuffer::new(ScalarBuffer::from(std::mem::take(&mut c.header_offsets))),
            Arc::new(headers),
            None,
        )?;
        let mut columns: Vec<ArrayRef> = vec![
            Arc::new(Int32Array::from(vec![self.partition; n])),
            Arc::new(Int64Array::from(std::mem::take(&mut c.offsets))),
            Arc::new(
                TimestampMillisecondArray::from(std::mem::take(&mut c.timestamps))
                    .with_timezone(UTC),
            ),
            Arc::new(c.keys.finish()),
            value,
        ];
        columns.extend(raw);
        columns.extend([
            Arc::new(headers) as ArrayRef,
            Arc::new(c.producer_ids.finish()),
            Arc::new(c.sequences.finish()),
        ]);
        let batch = ArrowBatch::try_new(self.schema.clone(), columns)?;
        self.writer.write(&batch)?;
        self.summary.rows += n as u64;
        if let Some((rows, reasons, values)) = misfits {
            self.dead_letter(&batch, &rows, reasons, &values)?;
        }
        Ok(())
    }

    /// Sets aside rows `rows` of `batch` (their raw `values`) as dead-letter rows with
    /// their `reasons`.
    fn dead_letter(
        &mut self,
        batch: &ArrowBatch,
        rows: &[usize],
        reasons: Vec<String>,
        values: &BinaryArray,
    ) -> Result<(), ConvertError> {
        let idx = UInt32Array::from_iter_values(rows.iter().map(|&i| i as u32));
        let pick = |name: &str| -> Result<ArrayRef, ConvertError> {
            let col = batch.column_by_name(name).ok_or_else(|| {
                ConvertError::InvalidOptions(format!("no column {name} to set aside"))
            })?;
            Ok(take(col.as_ref(), &idx, None)?)
        };
        let value = take(values, &idx, None)?;
        // The headers' list and struct fields carry the file's field ids: give them the
        // dead-letter schema's.
        let schema = dead_letter_schema();
        let headers = pick(columns::HEADERS)?;
        let headers = headers
            .as_any()
            .downcast_ref::<ListArray>()
            .ok_or_else(|| ConvertError::InvalidOptions("headers are not a list".into()))?;
        let members = headers
            .values()
            .as_any()
            .downcast_ref::<StructArray>()
            .ok_or_else(|| ConvertError::InvalidOptions("headers are not structs".into()))?;
        let item = headers_item_field(&schema);
        let headers = ListArray::try_new(
            item.clone(),
            headers.offsets().clone(),
            Arc::new(StructArray::try_new(
                header_members(&item),
                members.columns().to_vec(),
                members.nulls().cloned(),
            )?),
            headers.nulls().cloned(),
        )?;
        self.dead_letter_bytes += rows.iter().map(|&i| values.value(i).len()).sum::<usize>();
        let columns = vec![
            pick(columns::PARTITION)?,
            pick(columns::OFFSET)?,
            pick(columns::TIMESTAMP)?,
            pick(columns::KEY)?,
            value,
            Arc::new(headers),
            pick(columns::PRODUCER_ID)?,
            pick(columns::SEQUENCE)?,
            Arc::new(StringArray::from(reasons)),
        ];
        self.dead_letters
            .push(ArrowBatch::try_new(schema, columns)?);
        Ok(())
    }

    pub(crate) fn finish(mut self) -> Result<(W, Summary), ConvertError> {
        self.flush_chunk()?;
        self.writer.flush()?;
        self.summary.row_groups = self.writer.flushed_row_groups().len();
        let counting = self.writer.into_inner()?;
        self.summary.file_bytes = counting.written;
        Ok((counting.inner, self.summary))
    }
}

/// A dead-letter file in memory: its bytes and what it holds.
pub(crate) struct DeadLetterBytes {
    pub(crate) bytes: Vec<u8>,
    pub(crate) first_offset: Offset,
    pub(crate) last_offset: Offset,
    pub(crate) first_timestamp: i64,
    pub(crate) rows: u64,
}

/// Writes dead-letter rows ([`Converter::take_dead_letters`]) as one Parquet file;
/// `None` when there are none.
pub(crate) fn dead_letter_file(
    batches: &[ArrowBatch],
    opts: &ConvertOptions,
) -> Result<Option<DeadLetterBytes>, ConvertError> {
    let offset_at = |b: &ArrowBatch, i: usize| {
        b.column(1)
            .as_any()
            .downcast_ref::<Int64Array>()
            .map(|a| a.value(i))
    };
    let (Some(first), Some(last)) = (batches.first(), batches.last()) else {
        return Ok(None);
    };
    let (Some(first_offset), Some(last_offset)) = (
        offset_at(first, 0),
        offset_at(last, last.num_rows().saturating_sub(1)),
    ) else {
        return Ok(None);
    };
    let first_timestamp = first
        .column(2)
        .as_any()
        .downcast_ref::<TimestampMillisecondArray>()
        .map_or(0, |a| a.value(0));
    let mut writer = ArrowWriter::try_new(
        Vec::new(),
        dead_letter_schema(),
        Some(writer_properties(opts)?),
    )?;
    for (k, v) in [
        (metadata_keys::TOPIC, opts.topic.clone()),
        (metadata_keys::PARTITION, opts.partition.to_string()),
        (metadata_keys::FIRST_OFFSET, first_offset.to_string()),
        (metadata_keys::LAST_OFFSET, last_offset.to_string()),
        (metadata_keys::VALUE_FORMAT, "binary".to_string()),
        (metadata_keys::DEAD_LETTERS, "true".to_string()),
        (metadata_keys::VERSION, STRATA_VERSION.to_string()),
    ] {
        writer.append_key_value_metadata(KeyValue::new(k.to_string(), v));
    }
    let mut rows = 0u64;
    for b in batches {
        writer.write(b)?;
        rows += b.num_rows() as u64;
    }
    Ok(Some(DeadLetterBytes {
        bytes: writer.into_inner()?,
        first_offset,
        last_offset,
        first_timestamp,
        rows,
    }))
}

/// The sequence number of the record `delta` offsets after a batch's base sequence,
/// wrapping past i32::MAX to 0 as Kafka's `DefaultRecordBatch.incrementSequence` does.
fn sequence_at(base: i32, delta: i64) -> i32 {
    let s = base as i64 + delta;
    if s > i32::MAX as i64 {
        (s - i32::MAX as i64 - 1) as i32
    } else {
        s as i32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequences_wrap_like_kafka() {
        assert_eq!(sequence_at(5, 3), 8);
        assert_eq!(sequence_at(i32::MAX, 0), i32::MAX);
        assert_eq!(sequence_at(i32::MAX, 1), 0);
        assert_eq!(sequence_at(i32::MAX - 1, 3), 1);
    }
}
