//! A zero-copy view over Kafka RecordBatch v2 bytes.
//!
//! Layout (all integers big-endian, see the Kafka protocol guide, "Record Batch"):
//!
//! ```text
//! offset  size  field
//!      0     8  baseOffset
//!      8     4  batchLength           bytes after this field
//!     12     4  partitionLeaderEpoch
//!     16     1  magic                 2
//!     17     4  crc                   CRC-32C of bytes 21..end
//!     21     2  attributes            bits 0-2 compression, 3 timestamp type,
//!                                     4 transactional, 5 control, 6 delete horizon
//!     23     4  lastOffsetDelta
//!     27     8  baseTimestamp
//!     35     8  maxTimestamp
//!     43     8  producerId
//!     51     2  producerEpoch
//!     53     4  baseSequence
//!     57     4  recordCount
//!     61     -  records
//! ```
//!
//! Because the CRC starts at `attributes`, a broker rewrites `baseOffset` and
//! `partitionLeaderEpoch` without recomputing it; only LogAppendTime (which rewrites
//! `maxTimestamp`) needs a new CRC.

use bytes::Bytes;

use crate::error::ErrorCode;
use crate::ids::{LeaderEpoch, Offset, ProducerEpoch, ProducerId};

/// Size of the fixed batch header.
pub const HEADER_LEN: usize = 61;
/// Bytes before `batchLength`'s coverage starts (baseOffset + batchLength).
pub const LOG_OVERHEAD: usize = 12;
/// The only magic Strata stores.
pub const MAGIC_V2: i8 = 2;
/// Where the CRC-covered region starts.
const CRC_START: usize = 21;

const COMPRESSION_MASK: i16 = 0x07;
const TIMESTAMP_TYPE_BIT: i16 = 0x08;
const TRANSACTIONAL_BIT: i16 = 0x10;
const CONTROL_BIT: i16 = 0x20;

/// A batch failed framing or validation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BatchError {
    #[error("batch truncated: need {need} bytes, have {have}")]
    Truncated { need: usize, have: usize },
    #[error("invalid batch length {0}")]
    BadLength(i32),
    #[error("unsupported magic {0} (only RecordBatch v2 is accepted)")]
    BadMagic(i8),
    #[error("CRC mismatch: header says {stored:#010x}, bytes give {computed:#010x}")]
    CrcMismatch { stored: u32, computed: u32 },
    #[error("record count {count} does not match last offset delta {last_offset_delta}")]
    BadRecordCount { count: i32, last_offset_delta: i32 },
    #[error("batch of {size} bytes exceeds max.message.bytes {max}")]
    TooLarge { size: usize, max: usize },
    #[error("unknown compression codec {0}")]
    UnknownCompression(u8),
    #[error("cannot decompress {codec:?} records: {reason}")]
    Decompress { codec: Compression, reason: String },
    #[error(
        "the {codec:?} records decompress to more than {limit} bytes (the broker's \
         --max-decompressed-batch-bytes); send smaller batches"
    )]
    DecompressedTooLarge { codec: Compression, limit: usize },
    #[error("invalid record: {0}")]
    InvalidRecord(&'static str),
}

impl BatchError {
    /// The Kafka error a producer gets for this batch.
    pub fn error_code(&self) -> ErrorCode {
        match self {
            BatchError::Truncated { .. }
            | BatchError::BadLength(_)
            | BatchError::CrcMismatch { .. }
            | BatchError::DecompressedTooLarge { .. } => ErrorCode::CorruptMessage,
            BatchError::BadMagic(_) => ErrorCode::UnsupportedForMessageFormat,
            BatchError::TooLarge { .. } => ErrorCode::MessageTooLarge,
            BatchError::UnknownCompression(_) => ErrorCode::UnsupportedCompressionType,
            BatchError::BadRecordCount { .. }
            | BatchError::Decompress { .. }
            | BatchError::InvalidRecord(_) => ErrorCode::InvalidRecord,
        }
    }
}

/// The codec a batch's records are compressed with.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash)]
pub enum Compression {
    None,
    Gzip,
    Snappy,
    Lz4,
    Zstd,
}

impl Compression {
    pub fn from_attributes(attributes: i16) -> Result<Self, BatchError> {
        match (attributes & COMPRESSION_MASK) as u8 {
            0 => Ok(Compression::None),
            1 => Ok(Compression::Gzip),
            2 => Ok(Compression::Snappy),
            3 => Ok(Compression::Lz4),
            4 => Ok(Compression::Zstd),
            other => Err(BatchError::UnknownCompression(other)),
        }
    }

    /// The codec's id in the batch attributes.
    pub fn id(self) -> i16 {
        match self {
            Compression::None => 0,
            Compression::Gzip => 1,
            Compression::Snappy => 2,
            Compression::Lz4 => 3,
            Compression::Zstd => 4,
        }
    }

    /// Every codec, in id order.
    pub const ALL: [Compression; 5] = [
        Compression::None,
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ];

    /// The codec's name as Kafka's `compression.type` (and librdkafka's) spells it.
    pub fn name(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Gzip => "gzip",
            Compression::Snappy => "snappy",
            Compression::Lz4 => "lz4",
            Compression::Zstd => "zstd",
        }
    }
}

impl std::fmt::Display for Compression {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A name that is no codec's.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown compression codec '{0}'")]
pub struct UnknownCompressionName(pub String);

impl std::str::FromStr for Compression {
    type Err = UnknownCompressionName;

    /// A codec by its [`name`](Compression::name).
    fn from_str(s: &str) -> Result<Compression, UnknownCompressionName> {
        Compression::ALL
            .into_iter()
            .find(|c| c.name() == s)
            .ok_or_else(|| UnknownCompressionName(s.to_string()))
    }
}

/// Whether a batch's timestamps are the producer's or the broker's.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum TimestampType {
    CreateTime,
    LogAppendTime,
}

/// The fixed header of a batch, decoded.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct BatchHeader {
    pub base_offset: Offset,
    pub batch_length: i32,
    pub partition_leader_epoch: LeaderEpoch,
    pub magic: i8,
    pub crc: u32,
    pub attributes: i16,
    pub last_offset_delta: i32,
    pub base_timestamp: i64,
    pub max_timestamp: i64,
    pub producer_id: ProducerId,
    pub producer_epoch: ProducerEpoch,
    pub base_sequence: i32,
    pub record_count: i32,
}

impl BatchHeader {
    /// Total size of the batch on disk and on the wire.
    pub fn total_size(&self) -> usize {
        LOG_OVERHEAD + self.batch_length as usize
    }

    /// The offset of the batch's last record.
    pub fn last_offset(&self) -> Offset {
        self.base_offset + self.last_offset_delta as i64
    }

    /// The offset after the batch.
    pub fn next_offset(&self) -> Offset {
        self.last_offset() + 1
    }

    /// The sequence number of the batch's last record (wrapping as Kafka does).
    pub fn last_sequence(&self) -> i32 {
        if self.base_sequence < 0 {
            return self.base_sequence;
        }
        let last = self.base_sequence as i64 + self.last_offset_delta as i64;
        if last > i32::MAX as i64 {
            (last - i32::MAX as i64 - 1) as i32
        } else {
            last as i32
        }
    }

    pub fn is_transactional(&self) -> bool {
        self.attributes & TRANSACTIONAL_BIT != 0
    }

    pub fn is_control(&self) -> bool {
        self.attributes & CONTROL_BIT != 0
    }

    pub fn timestamp_type(&self) -> TimestampType {
        if self.attributes & TIMESTAMP_TYPE_BIT != 0 {
            TimestampType::LogAppendTime
        } else {
            TimestampType::CreateTime
        }
    }

    pub fn has_producer_id(&self) -> bool {
        self.producer_id >= 0
    }
}

fn be_i64(b: &[u8], at: usize) -> i64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    i64::from_be_bytes(a)
}
fn be_i32(b: &[u8], at: usize) -> i32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    i32::from_be_bytes(a)
}
fn be_u32(b: &[u8], at: usize) -> u32 {
    be_i32(b, at) as u32
}
fn be_i16(b: &[u8], at: usize) -> i16 {
    i16::from_be_bytes([b[at], b[at + 1]])
}

/// Reads the header of the batch at the start of `buf`. Needs only [`HEADER_LEN`] bytes,
/// so it can frame batches from a partial read (for example an index walk). Checks the
/// length field and magic, nothing else.
pub fn parse_header(buf: &[u8]) -> Result<BatchHeader, BatchError> {
    if buf.len() < HEADER_LEN {
        return Err(BatchError::Truncated {
            need: HEADER_LEN,
            have: buf.len(),
        });
    }
    let batch_length = be_i32(buf, 8);
    if batch_length < (HEADER_LEN - LOG_OVERHEAD) as i32 {
        return Err(BatchError::BadLength(batch_length));
    }
    let magic = buf[16] as i8;
    if magic != MAGIC_V2 {
        return Err(BatchError::BadMagic(magic));
    }
    // The base offset is not CRC-covered: a corrupt or hostile one must not make
    // last_offset()/next_offset() overflow.
    let (base_offset, last_offset_delta) = (be_i64(buf, 0), be_i32(buf, 23));
    if base_offset
        .checked_add(i64::from(last_offset_delta))
        .and_then(|o| o.checked_add(1))
        .is_none()
    {
        return Err(BatchError::InvalidRecord("batch offsets overflow"));
    }
    Ok(BatchHeader {
        base_offset: be_i64(buf, 0),
        batch_length,
        partition_leader_epoch: be_i32(buf, 12),
        magic,
        crc: be_u32(buf, 17),
        attributes: be_i16(buf, 21),
        last_offset_delta: be_i32(buf, 23),
        base_timestamp: be_i64(buf, 27),
        max_timestamp: be_i64(buf, 35),
        producer_id: be_i64(buf, 43),
        producer_epoch: be_i16(buf, 51),
        base_sequence: be_i32(buf, 53),
        record_count: be_i32(buf, 57),
    })
}

/// One whole batch, borrowed.
#[derive(Clone, Copy, Debug)]
pub struct RecordBatch<'a> {
    header: BatchHeader,
    bytes: &'a [u8],
}

impl<'a> RecordBatch<'a> {
    /// Frames the batch at the start of `buf`; returns it and the bytes after it.
    /// Checks framing (length, magic) but not the CRC: see [`RecordBatch::validate_crc`].
    pub fn parse(buf: &'a [u8]) -> Result<(RecordBatch<'a>, &'a [u8]), BatchError> {
        let header = parse_header(buf)?;
        let size = header.total_size();
        if buf.len() < size {
            return Err(BatchError::Truncated {
                need: size,
                have: buf.len(),
            });
        }
        let (bytes, rest) = buf.split_at(size);
        Ok((RecordBatch { header, bytes }, rest))
    }

    /// The decoded header.
    pub fn header(&self) -> &BatchHeader {
        &self.header
    }

    /// The batch's bytes, header included.
    pub fn as_bytes(&self) -> &'a [u8] {
        self.bytes
    }

    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    pub fn base_offset(&self) -> Offset {
        self.header.base_offset
    }

    pub fn last_offset(&self) -> Offset {
        self.header.last_offset()
    }

    pub fn next_offset(&self) -> Offset {
        self.header.next_offset()
    }

    pub fn max_timestamp(&self) -> i64 {
        self.header.max_timestamp
    }

    pub fn compression(&self) -> Result<Compression, BatchError> {
        Compression::from_attributes(self.header.attributes)
    }

    /// The CRC-32C of the covered bytes, as computed now.
    pub fn computed_crc(&self) -> u32 {
        crc32c::crc32c(&self.bytes[CRC_START..])
    }

    /// Checks the stored CRC against the bytes.
    pub fn validate_crc(&self) -> Result<(), BatchError> {
        let computed = self.computed_crc();
        if computed != self.header.crc {
            return Err(BatchError::CrcMismatch {
                stored: self.header.crc,
                computed,
            });
        }
        Ok(())
    }

    /// The checks a leader makes on a producer's batch before giving it offsets: CRC,
    /// a known codec, no delete horizon, at least one record, and `lastOffsetDelta ==
    /// recordCount - 1` (a producer's batch has no gaps).
    pub fn validate_for_append(&self) -> Result<(), BatchError> {
        self.validate_crc()?;
        self.compression()?;
        let h = &self.header;
        // Only the log cleaner stamps a delete horizon (KIP-534): one from a producer
        // would make its tombstones expire at a time it chose.
        if h.attributes & crate::rewrite::DELETE_HORIZON_BIT != 0 {
            return Err(BatchError::InvalidRecord(
                "a producer's batch may not carry a delete horizon",
            ));
        }
        if h.record_count < 1 || h.last_offset_delta != h.record_count - 1 {
            return Err(BatchError::BadRecordCount {
                count: h.record_count,
                last_offset_delta: h.last_offset_delta,
            });
        }
        Ok(())
    }

    /// The batch's records, decompressed if needed (up to the process-wide cap,
    /// [`crate::compression::max_decompressed_bytes`]). Uncompressed records are borrowed.
    pub fn records(&self) -> Result<Records<'a>, BatchError> {
        self.records_with_limit(crate::compression::max_decompressed_bytes())
    }

    /// [`Self::records`] with an explicit cap on the decompressed size.
    pub fn records_with_limit(&self, limit: usize) -> Result<Records<'a>, BatchError> {
        let codec = self.compression()?;
        let body = &self.bytes[HEADER_LEN..];
        let data = match codec {
            Compression::None => RecordsData::Borrowed(body),
            _ => RecordsData::Owned(Bytes::from(crate::compression::decompress(
                codec, body, limit,
            )?)),
        };
        Ok(Records {
            header: self.header,
            data,
        })
    }

    /// Checks that the records decompress within `limit` bytes without keeping them
    /// (a scratch buffer, not the output): what the produce path asks of a compressed
    /// batch before it is stored, so no later reader meets a bomb.
    pub fn check_decompressed_size(&self, limit: usize) -> Result<(), BatchError> {
        let codec = self.compression()?;
        if codec != Compression::None {
            crate::compression::decompressed_len(codec, &self.bytes[HEADER_LEN..], limit)?;
        }
        Ok(())
    }
}

/// Splits a buffer of concatenated batches into batches. Stops with an error at the
/// first batch that does not frame; the caller decides whether a partial tail is an
/// error (a produce request) or the end of valid data (recovery, a fetch's last batch).
pub fn batches(buf: &[u8]) -> BatchIter<'_> {
    BatchIter { rest: buf }
}

/// Iterator returned by [`batches`].
#[derive(Debug)]
pub struct BatchIter<'a> {
    rest: &'a [u8],
}

impl<'a> BatchIter<'a> {
    /// The bytes not yet consumed.
    pub fn remaining(&self) -> &'a [u8] {
        self.rest
    }
}

impl<'a> Iterator for BatchIter<'a> {
    type Item = Result<RecordBatch<'a>, BatchError>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        match RecordBatch::parse(self.rest) {
            Ok((batch, rest)) => {
                self.rest = rest;
                Some(Ok(batch))
            }
            Err(e) => {
                self.rest = &[];
                Some(Err(e))
            }
        }
    }
}

/// Rewrites the base offset of the batch at the start of `buf` (not CRC-covered).
pub fn set_base_offset(buf: &mut [u8], offset: Offset) {
    buf[0..8].copy_from_slice(&offset.to_be_bytes());
}

/// Rewrites the partition leader epoch of the batch at the start of `buf` (not CRC-covered).
pub fn set_partition_leader_epoch(buf: &mut [u8], epoch: LeaderEpoch) {
    buf[12..16].copy_from_slice(&epoch.to_be_bytes());
}

/// Turns the batch at the start of `buf` into a LogAppendTime batch stamped `now_ms`
/// (the timestamp-type bit and maxTimestamp change, so the CRC is recomputed). The
/// caller has framed the batch already; `buf` is exactly one batch.
pub fn set_log_append_time(buf: &mut [u8], now_ms: i64) {
    let attributes = be_i16(buf, 21) | TIMESTAMP_TYPE_BIT;
    buf[21..23].copy_from_slice(&attributes.to_be_bytes());
    buf[35..43].copy_from_slice(&now_ms.to_be_bytes());
    let crc = crc32c::crc32c(&buf[CRC_START..]);
    buf[17..21].copy_from_slice(&crc.to_be_bytes());
}

/// Sets the transactional attribute of a stored batch (a coordinator writing a
/// producer's TxnOffsetCommit records into its transaction) and its CRC again.
pub fn set_transactional(buf: &mut [u8]) {
    let attributes = be_i16(buf, 21) | TRANSACTIONAL_BIT;
    buf[21..23].copy_from_slice(&attributes.to_be_bytes());
    let crc = crc32c::crc32c(&buf[CRC_START..]);
    buf[17..21].copy_from_slice(&crc.to_be_bytes());
}

#[derive(Debug)]
enum RecordsData<'a> {
    Borrowed(&'a [u8]),
    Owned(Bytes),
}

/// A batch's decompressed record section.
#[derive(Debug)]
pub struct Records<'a> {
    header: BatchHeader,
    data: RecordsData<'a>,
}

impl<'a> Records<'a> {
    fn bytes(&self) -> &[u8] {
        match &self.data {
            RecordsData::Borrowed(b) => b,
            RecordsData::Owned(b) => b,
        }
    }

    /// Iterates the records. Each item is either a record or the first framing error.
    pub fn iter(&self) -> RecordIter<'_> {
        RecordIter {
            header: self.header,
            rest: self.bytes(),
            remaining: self.header.record_count.max(0) as usize,
            failed: false,
        }
    }
}

/// One record, borrowed from its (decompressed) batch.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Record<'a> {
    pub offset: Offset,
    pub timestamp: i64,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    pub headers: Vec<(&'a str, Option<&'a [u8]>)>,
}

/// Iterator returned by [`Records::iter`].
#[derive(Debug)]
pub struct RecordIter<'a> {
    header: BatchHeader,
    rest: &'a [u8],
    remaining: usize,
    failed: bool,
}

impl<'a> Iterator for RecordIter<'a> {
    type Item = Result<Record<'a>, BatchError>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        if self.remaining == 0 {
            if !self.rest.is_empty() {
                self.failed = true;
                return Some(Err(BatchError::InvalidRecord(
                    "bytes after the last record",
                )));
            }
            return None;
        }
        self.remaining -= 1;
        match parse_record(&mut self.rest, &self.header) {
            Ok(r) => Some(Ok(r)),
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }
}

fn parse_record<'a>(buf: &mut &'a [u8], h: &BatchHeader) -> Result<Record<'a>, BatchError> {
    let len = read_varint(buf)?;
    if len < 0 || len as usize > buf.len() {
        return Err(BatchError::InvalidRecord("record length out of bounds"));
    }
    let (mut body, rest) = buf.split_at(len as usize);
    *buf = rest;
    let b = &mut body;
    let _attributes = take(b, 1)?;
    let timestamp_delta = read_varlong(b)?;
    let offset_delta = read_varint(b)?;
    let key = read_bytes(b)?;
    let value = read_bytes(b)?;
    let header_count = read_varint(b)?;
    if header_count < 0 {
        return Err(BatchError::InvalidRecord("negative header count"));
    }
    let mut headers = Vec::with_capacity((header_count as usize).min(64));
    for _ in 0..header_count {
        let k = read_bytes(b)?.ok_or(BatchError::InvalidRecord("null header key"))?;
        let k = std::str::from_utf8(k)
            .map_err(|_| BatchError::InvalidRecord("header key is not UTF-8"))?;
        let v = read_bytes(b)?;
        headers.push((k, v));
    }
    if !b.is_empty() {
        return Err(BatchError::InvalidRecord("record longer than its fields"));
    }
    let timestamp = if h.timestamp_type() == TimestampType::LogAppendTime {
        h.max_timestamp
    } else {
        h.base_timestamp.wrapping_add(timestamp_delta)
    };
    Ok(Record {
        offset: h
            .base_offset
            .checked_add(i64::from(offset_delta))
            .ok_or(BatchError::InvalidRecord("record offset overflows"))?,
        timestamp,
        key,
        value,
        headers,
    })
}

fn take<'a>(b: &mut &'a [u8], n: usize) -> Result<&'a [u8], BatchError> {
    if b.len() < n {
        return Err(BatchError::InvalidRecord("record truncated"));
    }
    let (head, rest) = b.split_at(n);
    *b = rest;
    Ok(head)
}

fn read_bytes<'a>(b: &mut &'a [u8]) -> Result<Option<&'a [u8]>, BatchError> {
    let len = read_varint(b)?;
    if len < 0 {
        return Ok(None);
    }
    take(b, len as usize).map(Some)
}

fn read_unsigned_varint(b: &mut &[u8], max_bytes: usize) -> Result<u64, BatchError> {
    let mut value: u64 = 0;
    for i in 0..max_bytes {
        let byte = *b
            .first()
            .ok_or(BatchError::InvalidRecord("varint truncated"))?;
        *b = &b[1..];
        value |= ((byte & 0x7f) as u64) << (7 * i);
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err(BatchError::InvalidRecord("varint too long"))
}

/// A zig-zag varint (Kafka's `varint`).
pub fn read_varint(b: &mut &[u8]) -> Result<i32, BatchError> {
    let raw = read_unsigned_varint(b, 5)? as u32;
    Ok(((raw >> 1) as i32) ^ -((raw & 1) as i32))
}

/// A zig-zag varlong (Kafka's `varlong`).
pub fn read_varlong(b: &mut &[u8]) -> Result<i64, BatchError> {
    let raw = read_unsigned_varint(b, 10)?;
    Ok(((raw >> 1) as i64) ^ -((raw & 1) as i64))
}

/// Builds batches, for tests, benchmarks and the console producer. Encoding is done by
/// the kafka-protocol crate, so batches built here are an independent check of the
/// parser above.
pub mod build {
    use bytes::{Bytes, BytesMut};
    use kafka_protocol::records::{
        Compression as KCompression, Record as KRecord, RecordBatchEncoder, RecordEncodeOptions,
        TimestampType as KTimestampType,
    };

    use super::Compression;

    /// A record to put in a batch.
    #[derive(Clone, Debug, Default)]
    pub struct NewRecord {
        pub key: Option<Bytes>,
        pub value: Option<Bytes>,
        pub headers: Vec<(String, Option<Bytes>)>,
        pub timestamp: i64,
    }

    impl NewRecord {
        pub fn value(value: impl Into<Bytes>, timestamp: i64) -> Self {
            NewRecord {
                value: Some(value.into()),
                timestamp,
                ..Default::default()
            }
        }
    }

    /// Producer fields for an idempotent batch.
    #[derive(Clone, Copy, Debug)]
    pub struct ProducerFields {
        pub producer_id: i64,
        pub producer_epoch: i16,
        pub base_sequence: i32,
    }

    /// Encodes `records` as one RecordBatch v2 with base offset 0.
    pub fn batch(
        records: &[NewRecord],
        compression: Compression,
        producer: Option<ProducerFields>,
    ) -> Bytes {
        let codec = match compression {
            Compression::None => KCompression::None,
            Compression::Gzip => KCompression::Gzip,
            Compression::Snappy => KCompression::Snappy,
            Compression::Lz4 => KCompression::Lz4,
            Compression::Zstd => KCompression::Zstd,
        };
        let (pid, pepoch, seq) = match producer {
            Some(p) => (p.producer_id, p.producer_epoch, p.base_sequence),
            None => (-1, -1, -1),
        };
        let krecords: Vec<KRecord> = records
            .iter()
            .enumerate()
            .map(|(i, r)| KRecord {
                transactional: false,
                control: false,
                delete_horizon: false,
                partition_leader_epoch: -1,
                producer_id: pid,
                producer_epoch: pepoch,
                // The encoder starts a new batch whenever offset - sequence changes, so the
                // "no sequence" case (-1) must advance with the offset too.
                sequence: seq.wrapping_add(i as i32),
                timestamp_type: KTimestampType::Creation,
                offset: i as i64,
                timestamp: r.timestamp,
                key: r.key.clone(),
                value: r.value.clone(),
                headers: r
                    .headers
                    .iter()
                    .map(|(k, v)| (k.clone().into(), v.clone()))
                    .collect(),
            })
            .collect();
        // Sized up front: growing by doubling would copy a large batch several times.
        let estimate = 61
            + records
                .iter()
                .map(|r| {
                    24 + r.key.as_ref().map_or(0, Bytes::len)
                        + r.value.as_ref().map_or(0, Bytes::len)
                        + r.headers
                            .iter()
                            .map(|(k, v)| 10 + k.len() + v.as_ref().map_or(0, Bytes::len))
                            .sum::<usize>()
                })
                .sum::<usize>();
        let mut buf = BytesMut::with_capacity(estimate);
        RecordBatchEncoder::encode(
            &mut buf,
            krecords.iter(),
            &RecordEncodeOptions {
                version: 2,
                compression: codec,
            },
        )
        // Encoding into a growable buffer only fails for codec errors, which the
        // compiled-in codecs do not produce for in-memory input.
        .expect("encoding a record batch into memory cannot fail");
        buf.freeze()
    }
}

#[cfg(test)]
mod tests {
    use super::build::{NewRecord, ProducerFields, batch};
    use super::*;
    use bytes::Bytes;

    fn sample(n: usize) -> Vec<NewRecord> {
        (0..n)
            .map(|i| NewRecord {
                key: if i % 3 == 0 {
                    None
                } else {
                    Some(Bytes::from(format!("key-{i}")))
                },
                value: if i % 5 == 4 {
                    None
                } else {
                    Some(Bytes::from(vec![i as u8; i * 7]))
                },
                headers: (0..i % 3)
                    .map(|h| {
                        (
                            format!("h{h}"),
                            if h == 1 { None } else { Some(Bytes::from("v")) },
                        )
                    })
                    .collect(),
                timestamp: 1_700_000_000_000 + (i as i64) * 13,
            })
            .collect()
    }

    #[test]
    fn compression_names_round_trip() {
        for c in Compression::ALL {
            assert_eq!(c.to_string(), c.name());
            assert_eq!(c.name().parse::<Compression>(), Ok(c));
            assert_eq!(Compression::from_attributes(c.id()).ok(), Some(c));
        }
        assert_eq!(
            Compression::ALL.map(Compression::name),
            ["none", "gzip", "snappy", "lz4", "zstd"]
        );
        assert!("GZIP".parse::<Compression>().is_err());
        assert!("".parse::<Compression>().is_err());
    }

    /// Fuzzing found it (fuzz/corpus/record_batch/regress-base-offset-i64-max): the
    /// base offset is not CRC-covered, and one near i64::MAX made last_offset() overflow.
    #[test]
    fn offsets_that_overflow_are_refused() {
        let mut b = batch(&sample(2), Compression::None, None).to_vec();
        set_base_offset(&mut b, i64::MAX);
        assert_eq!(
            parse_header(&b).map(|_| ()),
            Err(BatchError::InvalidRecord("batch offsets overflow"))
        );
        assert!(RecordBatch::parse(&b).is_err());
        // Two records: offsets MAX-2 and MAX-1, and the next offset MAX still fits.
        set_base_offset(&mut b, i64::MAX - 2);
        let (rb, _) = RecordBatch::parse(&b).expect("the last offset fits");
        assert_eq!(rb.next_offset(), i64::MAX);
    }

    const CODECS: [Compression; 5] = [
        Compression::None,
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ];

    #[test]
    fn parses_every_codec_the_kafka_protocol_crate_writes() {
        let records = sample(40);
        for codec in CODECS {
            let bytes = batch(
                &records,
                codec,
                Some(ProducerFields {
                    producer_id: 7,
                    producer_epoch: 2,
                    base_sequence: 100,
                }),
            );
            let (b, rest) = RecordBatch::parse(&bytes).unwrap();
            assert!(rest.is_empty());
            b.validate_for_append().unwrap();
            assert_eq!(b.compression().unwrap(), codec);
            let h = b.header();
            assert_eq!(h.record_count, 40);
            assert_eq!(h.last_offset_delta, 39);
            assert_eq!(h.producer_id, 7);
            assert_eq!(h.producer_epoch, 2);
            assert_eq!(h.base_sequence, 100);
            assert_eq!(h.last_sequence(), 139);
            assert_eq!(h.max_timestamp, 1_700_000_000_000 + 39 * 13);
            let recs = b.records().unwrap();
            let got: Vec<_> = recs.iter().collect::<Result<_, _>>().unwrap();
            assert_eq!(got.len(), records.len());
            for (i, (g, want)) in got.iter().zip(&records).enumerate() {
                assert_eq!(g.offset, i as i64);
                assert_eq!(g.timestamp, want.timestamp);
                assert_eq!(g.key, want.key.as_deref());
                assert_eq!(g.value, want.value.as_deref());
                let want_headers: Vec<_> = want
                    .headers
                    .iter()
                    .map(|(k, v)| (k.as_str(), v.as_deref()))
                    .collect();
                assert_eq!(g.headers, want_headers);
            }
        }
    }

    #[test]
    fn rewriting_offset_and_epoch_keeps_the_crc_valid() {
        let mut bytes = batch(&sample(3), Compression::None, None).to_vec();
        set_base_offset(&mut bytes, 1234);
        set_partition_leader_epoch(&mut bytes, 9);
        let (b, _) = RecordBatch::parse(&bytes).unwrap();
        b.validate_crc().unwrap();
        assert_eq!(b.base_offset(), 1234);
        assert_eq!(b.last_offset(), 1236);
        assert_eq!(b.header().partition_leader_epoch, 9);
        let offsets: Vec<i64> = b
            .records()
            .unwrap()
            .iter()
            .map(|r| r.unwrap().offset)
            .collect();
        assert_eq!(offsets, vec![1234, 1235, 1236]);
    }

    #[test]
    fn log_append_time_rewrites_timestamps_and_crc() {
        let mut bytes = batch(&sample(3), Compression::Lz4, None).to_vec();
        set_log_append_time(&mut bytes, 42);
        let (b, _) = RecordBatch::parse(&bytes).unwrap();
        b.validate_crc().unwrap();
        assert_eq!(b.header().timestamp_type(), TimestampType::LogAppendTime);
        assert!(
            b.records()
                .unwrap()
                .iter()
                .all(|r| r.unwrap().timestamp == 42)
        );
    }

    #[test]
    fn every_single_bit_flip_in_the_covered_region_fails_the_crc() {
        let bytes = batch(&sample(2), Compression::None, None).to_vec();
        for i in CRC_START..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0x10;
            let Ok((rb, _)) = RecordBatch::parse(&b) else {
                continue;
            };
            assert!(rb.validate_crc().is_err(), "flip at {i} went unnoticed");
        }
    }

    #[test]
    fn framing_errors_are_typed() {
        let bytes = batch(&sample(2), Compression::None, None).to_vec();
        assert!(matches!(
            RecordBatch::parse(&bytes[..30]),
            Err(BatchError::Truncated {
                need: HEADER_LEN,
                ..
            })
        ));
        assert!(matches!(
            RecordBatch::parse(&bytes[..bytes.len() - 1]),
            Err(BatchError::Truncated { .. })
        ));
        let mut bad = bytes.clone();
        bad[16] = 1;
        assert_eq!(
            RecordBatch::parse(&bad).unwrap_err(),
            BatchError::BadMagic(1)
        );
        assert_eq!(
            BatchError::BadMagic(1).error_code(),
            ErrorCode::UnsupportedForMessageFormat
        );
        let mut bad = bytes.clone();
        bad[8..12].copy_from_slice(&3i32.to_be_bytes());
        assert_eq!(
            RecordBatch::parse(&bad).unwrap_err(),
            BatchError::BadLength(3)
        );
        let mut bad = bytes.clone();
        bad[30] ^= 1;
        let (b, _) = RecordBatch::parse(&bad).unwrap();
        assert_eq!(
            b.validate_for_append().unwrap_err().error_code(),
            ErrorCode::CorruptMessage
        );
    }

    #[test]
    fn batches_splits_concatenated_batches_and_reports_a_torn_tail() {
        let one = batch(&sample(2), Compression::None, None);
        let two = batch(&sample(5), Compression::Zstd, None);
        let mut all = one.to_vec();
        all.extend_from_slice(&two);
        let got: Vec<_> = batches(&all).collect::<Result<_, _>>().unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(got[1].header().record_count, 5);
        all.truncate(all.len() - 3);
        let got: Vec<_> = batches(&all).collect();
        assert!(got[0].is_ok());
        assert!(matches!(got[1], Err(BatchError::Truncated { .. })));
    }

    proptest::proptest! {
        #[test]
        fn garbage_never_panics(data in proptest::collection::vec(proptest::num::u8::ANY, 0..300)) {
            for b in batches(&data).flatten() {
                let _ = b.validate_for_append();
                if let Ok(recs) = b.records() {
                    for r in recs.iter() { let _ = r; }
                }
            }
        }

        #[test]
        fn corrupting_a_valid_batch_never_panics(
            pos in 0usize..2000, val in proptest::num::u8::ANY, codec in 0usize..5
        ) {
            let bytes = batch(&sample(6), CODECS[codec], None);
            let mut b = bytes.to_vec();
            let p = pos % b.len();
            b[p] = val;
            if let Ok((rb, _)) = RecordBatch::parse(&b) {
                let _ = rb.validate_for_append();
                if let Ok(recs) = rb.records() { for r in recs.iter() { let _ = r; } }
            }
        }
    }
}
