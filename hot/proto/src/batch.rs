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

pub mod build;

#[cfg(test)]
mod tests;
