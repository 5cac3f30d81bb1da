//! Values in Confluent's Schema Registry wire format (Avro and Protobuf) -> one typed
//! struct column, sans IO: the caller hands in the schemas (the subject's latest version
//! as the reader, every id seen as a writer) and the values of a chunk, and gets the
//! column back with the values that did not decode, each with its row and reason.
//!
//! # Wire format
//!
//! A value is magic byte 0, the schema id (4 bytes, big-endian), then for Protobuf the
//! message indexes (a zigzag varint count, then that many zigzag varints; the single
//! byte 0 means `[0]`, the file's first message), then the payload ([`split`],
//! [`split_protobuf`]).
//!
//! # Rows and failures
//!
//! [`AvroColumns::decode`] and [`ProtoColumns::decode`] return one row per value: null
//! for a null value and for one that failed. A failure (bad magic byte, unknown id,
//! truncated or garbage payload, trailing bytes, another message than the reader's) fails
//! only its own row: the builders take back whatever the value had pushed. Nothing read
//! from a value allocates more than the value's own length allows, and nesting is bounded
//! by the schema, which is refused past [`MAX_DEPTH`] levels.
//!
//! # Types
//!
//! Chosen for what an Iceberg table holds (pyiceberg and DuckDB read them back):
//!
//! | Avro                                   | Arrow                               |
//! |----------------------------------------|-------------------------------------|
//! | record                                 | struct (non-null fields, unless a nullable union) |
//! | array / map                            | list (`element`) / map (`entries: key utf8, value`) |
//! | `[null, T]` (either order)             | nullable `T`                        |
//! | any other union                        | nullable struct, one nullable field per non-null branch, named by the branch's type (`int`, `string`, a record's unqualified name; its full name if two share one), as Confluent's and Redpanda's Iceberg sinks do |
//! | enum                                   | utf8 (the symbol)                   |
//! | boolean, int, long, float, double      | boolean, int32, int64, float32, float64 |
//! | string / bytes / fixed                 | utf8 / binary / fixed_size_binary   |
//! | decimal (bytes or fixed)               | decimal128(p, s); over 38 digits is refused |
//! | date                                   | date32                              |
//! | time-millis, time-micros               | time64(us)                          |
//! | timestamp-millis, timestamp-micros     | timestamp(us, UTC)                  |
//! | local-timestamp-millis, -micros        | timestamp(us)                       |
//! | timestamp-nanos, local-timestamp-nanos | timestamp(ns, UTC), timestamp(ns)   |
//! | uuid (string or fixed(16))             | utf8, the hyphenated text (Iceberg's uuid does not round-trip through pyarrow) |
//! | duration / big-decimal                 | fixed_size_binary(12) / binary      |
//!
//! | Protobuf                                  | Arrow |
//! |-------------------------------------------|-------|
//! | message                                   | struct, nullable where it is a field |
//! | proto3 scalar (implicit presence)         | its type, not null: absent is the default (0, "", false, the enum's first value) |
//! | `optional`, proto2 fields, oneof members  | their type, nullable: absent is null |
//! | double, float, bool, string, bytes        | float64, float32, boolean, utf8, binary |
//! | int32, sint32, sfixed32                   | int32 |
//! | int64, sint64, sfixed64                   | int64 |
//! | uint32, fixed32                           | int64 (Iceberg has no unsigned types) |
//! | uint64, fixed64                           | int64, the bits as protobuf-java reads them (above 2^63 - 1 is negative) |
//! | enum                                      | utf8: the value's name; a number the enum lacks as its decimal text |
//! | repeated T / map<K, V>                    | list (`element`, not null) / map (`entries: key, value`) |
//! | google.protobuf.Timestamp                 | timestamp(us, UTC) |
//! | google.protobuf.Duration                  | int64 microseconds (Iceberg has no duration) |
//! | wrappers (Int64Value, StringValue, ...)   | the nullable primitive |
//! | google.protobuf.Struct, Value, ListValue, Any | utf8: the value as JSON (Any as `{"@type", "value": base64}`) |
//!
//! A message without fields (google.protobuf.Empty) is refused too: Parquet has no empty
//! groups.
//!
//! Recursive types are refused in both: Parquet columns cannot nest without end.

mod avro;
mod avro_refs;
mod avro_schema;
mod column;
mod proto_wire;
mod protobuf;

pub use avro::AvroColumns;
pub use avro_refs::inline_references;
pub use avro_schema::MAX_DEPTH;
pub use protobuf::ProtoColumns;

use arrow::array::StructArray;

use column::DecodeError;

/// Why one value did not decode. The row is null and the value goes, byte for byte with
/// this reason, to the dead letters.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FramedError {
    #[error(
        "a schema-registry value has at least 5 bytes (magic byte and schema id); this one has {0}"
    )]
    Short(usize),
    #[error("magic byte {0:#04x}: not a schema-registry value (which starts with 0x00)")]
    Magic(u8),
    #[error("schema id {0} is not known to this subject")]
    UnknownId(i32),
    #[error("the Protobuf message indexes do not decode: {0}")]
    MessageIndexes(String),
    #[error("the payload does not decode: {0}")]
    Payload(String),
    #[error("{0} bytes left over after the value")]
    Trailing(usize),
    #[error("schema id {id} names message {found}, not the reader's {expected}")]
    WrongMessage {
        id: i32,
        found: String,
        expected: String,
    },
    /// A bug in the builders, not a bad value.
    #[error("internal: {0}")]
    Internal(String),
}

/// One value that did not decode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// Its index in the values handed to `decode`.
    pub row: usize,
    pub error: FramedError,
}

/// What one chunk of values became.
#[derive(Debug)]
pub struct Decoded {
    /// One row per value; null where the value was null or failed.
    pub column: StructArray,
    /// The values that failed, in row order.
    pub failures: Vec<Failure>,
}

/// The schema id and the rest of a Confluent-framed value.
pub fn split(value: &[u8]) -> Result<(i32, &[u8]), FramedError> {
    let Some((&magic, rest)) = value.split_first() else {
        return Err(FramedError::Short(0));
    };
    if magic != 0 {
        return Err(FramedError::Magic(magic));
    }
    let Some((id, payload)) = rest.split_first_chunk::<4>() else {
        return Err(FramedError::Short(value.len()));
    };
    Ok((i32::from_be_bytes(*id), payload))
}

/// A Confluent-framed Protobuf value taken apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtoFrame<'a> {
    pub id: i32,
    /// The path of the message in its file: the index of a top-level message, then of
    /// nested messages within it.
    pub indexes: Vec<i32>,
    pub payload: &'a [u8],
}

/// [`split`], then the message indexes. Bounded: a count larger than the bytes left is an
/// error, never an allocation.
pub fn split_protobuf(value: &[u8]) -> Result<ProtoFrame<'_>, FramedError> {
    let (id, mut rest) = split(value)?;
    let bad = |m: &str| FramedError::MessageIndexes(m.to_string());
    let count = zigzag_varint(&mut rest).ok_or_else(|| bad("the count ends early"))?;
    if count == 0 {
        return Ok(ProtoFrame {
            id,
            indexes: vec![0],
            payload: rest,
        });
    }
    let count = usize::try_from(count)
        .ok()
        .filter(|&n| n <= rest.len() && n <= MAX_DEPTH)
        .ok_or_else(|| {
            FramedError::MessageIndexes(format!(
                "a count of {count} with {} bytes left (at most {MAX_DEPTH})",
                rest.len()
            ))
        })?;
    let mut indexes = Vec::with_capacity(count);
    for _ in 0..count {
        let i = zigzag_varint(&mut rest).ok_or_else(|| bad("an index ends early"))?;
        let i = i32::try_from(i)
            .ok()
            .filter(|&i| i >= 0)
            .ok_or_else(|| FramedError::MessageIndexes(format!("index {i}")))?;
        indexes.push(i);
    }
    Ok(ProtoFrame {
        id,
        indexes,
        payload: rest,
    })
}

/// A zigzag varint of at most 64 bits off the front of `buf`.
fn zigzag_varint(buf: &mut &[u8]) -> Option<i64> {
    let mut z: u64 = 0;
    for i in 0..10 {
        let (&b, rest) = buf.split_first()?;
        *buf = rest;
        if i == 9 && b > 1 {
            return None;
        }
        z |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Some((z >> 1) as i64 ^ -((z & 1) as i64));
        }
    }
    None
}

/// 10^p for p in 0..=38: the bound a decimal of precision p stays under.
fn pow10(p: usize) -> i128 {
    10i128.pow(p.min(38) as u32)
}

/// A big-endian two's-complement unscaled decimal (Avro's bytes and fixed decimals),
/// checked against the column's precision.
fn decimal_from_be(b: &[u8], precision: usize) -> Result<i128, DecodeError> {
    let negative = b.first().is_some_and(|&x| x & 0x80 != 0);
    let sign = if negative { 0xff } else { 0 };
    // Bytes past 16 may only repeat the sign.
    let extra = b.len().saturating_sub(16);
    let (head, body) = b.split_at(extra);
    let consistent = body.first().is_none_or(|&x| (x & 0x80 != 0) == negative);
    if head.iter().any(|&x| x != sign) || !consistent {
        return Err(DecodeError::new(format!(
            "a decimal of {} bytes does not fit 128 bits",
            b.len()
        )));
    }
    let mut v: i128 = if negative { -1 } else { 0 };
    for &x in body {
        v = (v << 8) | i128::from(x);
    }
    if v.unsigned_abs() >= pow10(precision).unsigned_abs() {
        return Err(DecodeError::new(format!(
            "decimal {v} (unscaled) has more than {precision} digits"
        )));
    }
    Ok(v)
}

/// 16 bytes as `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`.
fn uuid_text(b: &[u8]) -> Result<String, DecodeError> {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    if b.len() != 16 {
        return Err(DecodeError::new(format!(
            "a uuid of {} bytes, not 16",
            b.len()
        )));
    }
    let mut s = String::with_capacity(36);
    for (i, x) in b.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            s.push('-');
        }
        s.push(char::from(HEX[usize::from(x >> 4)]));
        s.push(char::from(HEX[usize::from(x & 0xf)]));
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_reads_the_header_and_refuses_what_is_not_one() {
        assert_eq!(split(&[0, 0, 0, 1, 2, 9, 9]), Ok((258, &[9u8, 9][..])));
        assert_eq!(split(&[0, 0, 0, 0, 7]), Ok((7, &[][..])));
        assert_eq!(split(&[]), Err(FramedError::Short(0)));
        assert_eq!(split(&[0, 0, 0]), Err(FramedError::Short(3)));
        assert_eq!(split(b"{\""), Err(FramedError::Magic(b'{')));
        assert_eq!(split(&[0, 0xff, 0xff, 0xff, 0xff]), Ok((-1, &[][..])));
    }

    #[test]
    fn split_protobuf_reads_message_indexes() {
        // A single 0 is [0].
        let f = split_protobuf(&[0, 0, 0, 0, 5, 0, 8, 1]).unwrap();
        assert_eq!((f.id, f.indexes, f.payload), (5, vec![0], &[8u8, 1][..]));
        // Count 2 (zigzag 4), then 1 (zigzag 2) and 3 (zigzag 6).
        let f = split_protobuf(&[0, 0, 0, 0, 5, 4, 2, 6, 8, 1]).unwrap();
        assert_eq!((f.indexes, f.payload), (vec![1, 3], &[8u8, 1][..]));
        // A count beyond the bytes left is refused before anything is allocated.
        let huge = [0, 0, 0, 0, 5, 0xfe, 0xff, 0xff, 0xff, 0x0f];
        assert!(matches!(
            split_protobuf(&huge),
            Err(FramedError::MessageIndexes(_))
        ));
        // A negative count or index, and a varint that never ends.
        assert!(split_protobuf(&[0, 0, 0, 0, 5, 1]).is_err());
        assert!(split_protobuf(&[0, 0, 0, 0, 5, 2, 1]).is_err());
        assert!(split_protobuf(&[0, 0, 0, 0, 5, 0x80]).is_err());
        assert!(split_protobuf(&[0, 0, 0, 0, 5]).is_err());
    }

    #[test]
    fn decimals_sign_extend_and_respect_precision() {
        assert_eq!(decimal_from_be(&[0x01, 0x00], 5), Ok(256));
        assert_eq!(decimal_from_be(&[0xff, 0x00], 5), Ok(-256));
        assert_eq!(decimal_from_be(&[], 5), Ok(0));
        assert!(
            decimal_from_be(&[0x27, 0x10], 4).is_err(),
            "10000 has 5 digits"
        );
        assert_eq!(decimal_from_be(&[0x27, 0x0f], 4), Ok(9999));
        // 17 bytes whose first only repeats the sign.
        let mut b = vec![0xff; 17];
        b[16] = 0xfe;
        assert_eq!(decimal_from_be(&b, 10), Ok(-2));
        b[0] = 0x00;
        assert!(decimal_from_be(&b, 10).is_err());
    }

    #[test]
    fn uuids_are_hyphenated() {
        let b: Vec<u8> = (0..16).collect();
        assert_eq!(
            uuid_text(&b).unwrap(),
            "00010203-0405-0607-0809-0a0b0c0d0e0f"
        );
        assert!(uuid_text(&b[..15]).is_err());
    }
}
