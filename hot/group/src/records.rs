//! Kafka's `__consumer_offsets` record formats, so the broker can persist commits and
//! group metadata in an internal compacted topic and reload them with
//! [`GroupCoordinator::replay`](crate::GroupCoordinator::replay). A TxnOffsetCommit
//! writes the same offset commit records, in a transactional batch (replayed with
//! [`GroupCoordinator::replay_txn`](crate::GroupCoordinator::replay_txn)).
//!
//! Keys (big-endian, Kafka's classic non-flexible encoding; strings are `i16` length +
//! UTF-8):
//! * offset commit key, version 1: `group, topic, partition: i32` (version 0 is read too:
//!   same layout);
//! * group metadata key, version 2: `group`.
//!
//! Values:
//! * offset commit value, written as version 3: `offset: i64, leader_epoch: i32,
//!   metadata: string, commit_timestamp: i64`; versions 0–2 are read as well.
//! * group metadata value, written as Kafka's version 3 (`GroupMetadataValue`):
//!   `protocol_type: string, generation: i32, protocol: nullable string, leader: nullable
//!   string, current_state_timestamp: i64, members: [member_id, group_instance_id
//!   (nullable), client_id, client_host, rebalance_timeout: i32, session_timeout: i32,
//!   subscription: bytes, assignment: bytes]`; versions 0–3 are read.
//! * a tombstone (null value) deletes the offset or the group.
//!
//! Empty offset metadata is written as `""` (Kafka's `NoMetadata`) and read back as `None`.
//!
//! The field encodings (and their bounds checks) are [`strata_proto::schema_codec`]'s,
//! shared with `__transaction_state`'s records in strata-txn.

use bytes::{BufMut, Bytes, BytesMut};
// Strings are cut at i16::MAX bytes (`put_str`); group ids, topics and metadata are
// validated far below that upstream.
use strata_proto::schema_codec::{
    FieldError, Reader, put_bytes, put_len, put_nullable_str, put_str,
};

/// An offset committed by a group for one partition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommittedOffset {
    /// The next offset the group will consume.
    pub offset: i64,
    /// The leader epoch of the last consumed record, `-1` when unknown.
    pub leader_epoch: i32,
    /// The client's free-form metadata.
    pub metadata: Option<String>,
    /// When the commit was made (ms since the epoch).
    pub commit_timestamp_ms: i64,
}

/// Why a `__consumer_offsets` record could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The bytes ended before the record did.
    #[error("record truncated")]
    Truncated,
    /// A key version this code does not know.
    #[error("unknown key version {0}")]
    UnknownKeyVersion(i16),
    /// A value version this code does not know.
    #[error("unknown value version {0}")]
    UnknownValueVersion(i16),
    /// A string that is not UTF-8, or a negative length where none is allowed.
    #[error("malformed field: {0}")]
    Malformed(&'static str),
}

impl From<FieldError> for DecodeError {
    fn from(e: FieldError) -> Self {
        match e {
            FieldError::Truncated => DecodeError::Truncated,
            FieldError::NullString => DecodeError::Malformed("null where a string is required"),
            FieldError::Malformed(why) => DecodeError::Malformed(why),
        }
    }
}

/// One member as stored in a group metadata value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredMember {
    /// The member id.
    pub member_id: String,
    /// The static instance id (KIP-345), if any.
    pub group_instance_id: Option<String>,
    /// The client id.
    pub client_id: String,
    /// The client host.
    pub client_host: String,
    /// Rebalance timeout.
    pub rebalance_timeout_ms: i32,
    /// Session timeout.
    pub session_timeout_ms: i32,
    /// The member's metadata for the selected protocol.
    pub subscription: Bytes,
    /// The member's assignment.
    pub assignment: Bytes,
}

/// A group metadata value (Kafka's `GroupMetadataValue`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupMetadataValue {
    /// The protocol type (`"consumer"` for consumer groups; `""` when none).
    pub protocol_type: String,
    /// The generation.
    pub generation_id: i32,
    /// The selected protocol.
    pub protocol_name: Option<String>,
    /// The leader's member id.
    pub leader: Option<String>,
    /// When the group last changed state (ms).
    pub current_state_timestamp_ms: i64,
    /// The members.
    pub members: Vec<StoredMember>,
}

/// A decoded `__consumer_offsets` record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConsumerOffsetsRecord {
    /// An offset commit; `None` is a tombstone.
    Offset {
        /// The group.
        group_id: String,
        /// The topic.
        topic: String,
        /// The partition.
        partition: i32,
        /// The committed offset, or `None` for a deletion.
        value: Option<CommittedOffset>,
    },
    /// Group metadata; `None` is a tombstone.
    Group {
        /// The group.
        group_id: String,
        /// The metadata, or `None` for a deletion.
        value: Option<GroupMetadataValue>,
    },
}

const OFFSET_KEY_VERSION: i16 = 1;
const OFFSET_VALUE_VERSION: i16 = 3;
const GROUP_KEY_VERSION: i16 = 2;
const GROUP_VALUE_VERSION: i16 = 3;

/// The key of an offset commit record.
pub fn offset_commit_key(group_id: &str, topic: &str, partition: i32) -> Bytes {
    let mut buf = BytesMut::with_capacity(10 + group_id.len() + topic.len());
    buf.put_i16(OFFSET_KEY_VERSION);
    put_str(&mut buf, group_id);
    put_str(&mut buf, topic);
    buf.put_i32(partition);
    buf.freeze()
}

/// The key and value of an offset commit record (key v1, value v3).
pub fn offset_commit_record(
    group_id: &str,
    topic: &str,
    partition: i32,
    offset: &CommittedOffset,
) -> (Bytes, Bytes) {
    let key = offset_commit_key(group_id, topic, partition);
    let metadata = offset.metadata.as_deref().unwrap_or("");
    let mut buf = BytesMut::with_capacity(26 + metadata.len());
    buf.put_i16(OFFSET_VALUE_VERSION);
    buf.put_i64(offset.offset);
    buf.put_i32(offset.leader_epoch);
    put_str(&mut buf, metadata);
    buf.put_i64(offset.commit_timestamp_ms);
    (key, buf.freeze())
}

/// The key of the tombstone (null value) that deletes a committed offset.
pub fn offset_tombstone(group_id: &str, topic: &str, partition: i32) -> Bytes {
    offset_commit_key(group_id, topic, partition)
}

/// The key of a group metadata record (v2).
pub fn group_metadata_key(group_id: &str) -> Bytes {
    let mut buf = BytesMut::with_capacity(4 + group_id.len());
    buf.put_i16(GROUP_KEY_VERSION);
    put_str(&mut buf, group_id);
    buf.freeze()
}

/// The key of the tombstone (null value) that deletes a group.
pub fn group_tombstone(group_id: &str) -> Bytes {
    group_metadata_key(group_id)
}

/// The key and value (v3) of a group metadata record.
pub fn group_metadata_record(group_id: &str, value: &GroupMetadataValue) -> (Bytes, Bytes) {
    let mut buf = BytesMut::new();
    buf.put_i16(GROUP_VALUE_VERSION);
    put_str(&mut buf, &value.protocol_type);
    buf.put_i32(value.generation_id);
    put_nullable_str(&mut buf, value.protocol_name.as_deref());
    put_nullable_str(&mut buf, value.leader.as_deref());
    buf.put_i64(value.current_state_timestamp_ms);
    put_len(&mut buf, value.members.len());
    for m in &value.members {
        put_str(&mut buf, &m.member_id);
        put_nullable_str(&mut buf, m.group_instance_id.as_deref());
        put_str(&mut buf, &m.client_id);
        put_str(&mut buf, &m.client_host);
        buf.put_i32(m.rebalance_timeout_ms);
        buf.put_i32(m.session_timeout_ms);
        put_bytes(&mut buf, &m.subscription);
        put_bytes(&mut buf, &m.assignment);
    }
    (group_metadata_key(group_id), buf.freeze())
}

/// Decodes one `__consumer_offsets` record (`value == None` is a tombstone).
pub fn decode_record(
    key: &[u8],
    value: Option<&[u8]>,
) -> Result<ConsumerOffsetsRecord, DecodeError> {
    let mut k = Reader::new(key);
    match k.i16()? {
        0 | 1 => {
            let group_id = k.str()?;
            let topic = k.str()?;
            let partition = k.i32()?;
            let value = value.map(decode_offset_value).transpose()?;
            Ok(ConsumerOffsetsRecord::Offset {
                group_id,
                topic,
                partition,
                value,
            })
        }
        2 => {
            let group_id = k.str()?;
            let value = value.map(decode_group_value).transpose()?;
            Ok(ConsumerOffsetsRecord::Group { group_id, value })
        }
        v => Err(DecodeError::UnknownKeyVersion(v)),
    }
}

fn decode_offset_value(value: &[u8]) -> Result<CommittedOffset, DecodeError> {
    let mut r = Reader::new(value);
    let version = r.i16()?;
    let (offset, leader_epoch, metadata, commit_timestamp_ms) = match version {
        0 => {
            let offset = r.i64()?;
            let metadata = r.str()?;
            let ts = r.i64()?;
            (offset, -1, metadata, ts)
        }
        1 => {
            let offset = r.i64()?;
            let metadata = r.str()?;
            let ts = r.i64()?;
            let _expire_timestamp = r.i64()?;
            (offset, -1, metadata, ts)
        }
        2 => {
            let offset = r.i64()?;
            let metadata = r.str()?;
            let ts = r.i64()?;
            (offset, -1, metadata, ts)
        }
        3 => {
            let offset = r.i64()?;
            let epoch = r.i32()?;
            let metadata = r.str()?;
            let ts = r.i64()?;
            (offset, epoch, metadata, ts)
        }
        v => return Err(DecodeError::UnknownValueVersion(v)),
    };
    Ok(CommittedOffset {
        offset,
        leader_epoch,
        metadata: (!metadata.is_empty()).then_some(metadata),
        commit_timestamp_ms,
    })
}

fn decode_group_value(value: &[u8]) -> Result<GroupMetadataValue, DecodeError> {
    let mut r = Reader::new(value);
    let version = r.i16()?;
    if !(0..=3).contains(&version) {
        return Err(DecodeError::UnknownValueVersion(version));
    }
    let protocol_type = r.str()?;
    let generation_id = r.i32()?;
    let protocol_name = r.nullable_str()?;
    let leader = r.nullable_str()?;
    let current_state_timestamp_ms = if version >= 2 { r.i64()? } else { -1 };
    let count = r.i32()?;
    let mut members = Vec::new();
    for _ in 0..count.max(0) {
        let member_id = r.str()?;
        let group_instance_id = if version >= 3 {
            r.nullable_str()?
        } else {
            None
        };
        let client_id = r.str()?;
        let client_host = r.str()?;
        let rebalance_timeout_ms = if version >= 1 { r.i32()? } else { -1 };
        let session_timeout_ms = r.i32()?;
        let subscription = r.nullable_bytes()?.unwrap_or_default();
        let assignment = r.nullable_bytes()?.unwrap_or_default();
        let rebalance_timeout_ms = if version >= 1 {
            rebalance_timeout_ms
        } else {
            session_timeout_ms
        };
        members.push(StoredMember {
            member_id,
            group_instance_id,
            client_id,
            client_host,
            rebalance_timeout_ms,
            session_timeout_ms,
            subscription,
            assignment,
        });
    }
    Ok(GroupMetadataValue {
        protocol_type,
        generation_id,
        protocol_name,
        leader,
        current_state_timestamp_ms,
        members,
    })
}

/// Java's `String.hashCode` (over UTF-16 code units, wrapping `i32`).
pub fn java_string_hash(s: &str) -> i32 {
    s.encode_utf16()
        .fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(i32::from(c)))
}

/// The `__consumer_offsets` partition that owns a group: Kafka's
/// `Utils.abs(groupId.hashCode) % offsets.topic.num.partitions`, where `Utils.abs(n)` is
/// `n & 0x7fffffff`. `partitions` must be positive (a non-positive count yields 0).
pub fn partition_for(group_id: &str, partitions: i32) -> i32 {
    if partitions <= 0 {
        return 0;
    }
    (java_string_hash(group_id) & 0x7fff_ffff) % partitions
}

/// The topics a `ConsumerProtocolSubscription` (any version 0–3: `version: i16, topics:
/// [string], ...`, never flexible) subscribes to, or `None` if the bytes do not parse.
pub fn parse_consumer_subscription_topics(metadata: &[u8]) -> Option<Vec<String>> {
    let mut r = Reader::new(metadata);
    let version = r.i16().ok()?;
    if version < 0 {
        return None;
    }
    let count = r.i32().ok()?;
    let mut topics = Vec::with_capacity(count.clamp(0, 1024) as usize);
    for _ in 0..count.max(0) {
        topics.push(r.str().ok()?);
    }
    Some(topics)
}
