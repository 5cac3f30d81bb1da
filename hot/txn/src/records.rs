//! Kafka's `__transaction_state` record format (Kafka's `TransactionLog` with the
//! `TransactionLogKey` / `TransactionLogValue` schemas), so the broker can persist the
//! coordinator's transitions in the internal compacted topic and reload them with
//! [`TransactionCoordinator::load`](crate::TransactionCoordinator::load).
//!
//! Key, version 0 (never flexible): `version: i16 = 0, transactional_id: string` (strings
//! are `i16` length + UTF-8).
//!
//! Value, written as version 0 (big-endian, classic encoding):
//! `version: i16, producer_id: i64, producer_epoch: i16, transaction_timeout_ms: i32,
//! transaction_status: i8, transaction_partitions: nullable [topic: string,
//! partition_ids: [i32]], transaction_last_update_timestamp_ms: i64,
//! transaction_start_timestamp_ms: i64`. Arrays are an `i32` count (`-1` = null). As
//! Kafka writes it, the partitions are null in state Empty and an array otherwise.
//!
//! Version 1 (the first flexible version) is read too: compact strings and arrays
//! (unsigned varint length + 1, `0` = null), a tagged-field section after each
//! partition entry and after the value, whose tags 0 (`PreviousProducerId: i64`),
//! 1 (`NextProducerId: i64`) and 2 (`ClientTransactionVersion: i16`) are kept and
//! other tags skipped.
//!
//! A tombstone (null value) means the transactional id was removed (expired).
//!
//! Decoding is bounded: every count read off the wire is checked against the bytes that
//! remain before anything is allocated for it, and malformed input is a
//! [`DecodeError`], never a panic. The field encodings (and those checks) are
//! [`strata_proto::schema_codec`]'s, shared with `__consumer_offsets`' records.

use std::collections::BTreeSet;

use bytes::{BufMut, Bytes, BytesMut};
// Strings are cut at i16::MAX bytes (`put_str`): transactional ids and topic names
// reach the coordinator through request fields of that same limit, so nothing is cut.
use strata_proto::schema_codec::{FieldError, Reader, put_len, put_str};
use strata_proto::{ProducerEpoch, ProducerId};

/// The internal topic that holds transaction state (Kafka's
/// `Topic.TRANSACTION_STATE_TOPIC_NAME`).
pub const TRANSACTION_STATE_TOPIC: &str = "__transaction_state";

/// A transaction's state, with Kafka's `TransactionState` ids (the record's
/// `transaction_status`) and names (what DescribeTransactions / ListTransactions report).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TxnState {
    /// No transaction in progress (after InitProducerId).
    Empty,
    /// Partitions have been added; the transaction is open.
    Ongoing,
    /// EndTxn(commit) was accepted; markers are being written.
    PrepareCommit,
    /// The transaction is being aborted; markers are being written.
    PrepareAbort,
    /// The commit markers are written.
    CompleteCommit,
    /// The abort markers are written.
    CompleteAbort,
    /// The transactional id is being expired (never written: a tombstone is).
    Dead,
    /// The producer epoch is being bumped to fence the current producer (Kafka keeps it
    /// as a pending state only; read for completeness).
    PrepareEpochFence,
}

impl TxnState {
    /// Every state, in id order.
    pub const ALL: [TxnState; 8] = [
        TxnState::Empty,
        TxnState::Ongoing,
        TxnState::PrepareCommit,
        TxnState::PrepareAbort,
        TxnState::CompleteCommit,
        TxnState::CompleteAbort,
        TxnState::Dead,
        TxnState::PrepareEpochFence,
    ];

    /// The status byte in the record.
    pub fn id(self) -> i8 {
        match self {
            TxnState::Empty => 0,
            TxnState::Ongoing => 1,
            TxnState::PrepareCommit => 2,
            TxnState::PrepareAbort => 3,
            TxnState::CompleteCommit => 4,
            TxnState::CompleteAbort => 5,
            TxnState::Dead => 6,
            TxnState::PrepareEpochFence => 7,
        }
    }

    /// The state for a status byte, if known.
    pub fn from_id(id: i8) -> Option<TxnState> {
        usize::try_from(id)
            .ok()
            .and_then(|i| TxnState::ALL.get(i).copied())
    }

    /// Kafka's name of the state.
    pub fn name(self) -> &'static str {
        match self {
            TxnState::Empty => "Empty",
            TxnState::Ongoing => "Ongoing",
            TxnState::PrepareCommit => "PrepareCommit",
            TxnState::PrepareAbort => "PrepareAbort",
            TxnState::CompleteCommit => "CompleteCommit",
            TxnState::CompleteAbort => "CompleteAbort",
            TxnState::Dead => "Dead",
            TxnState::PrepareEpochFence => "PrepareEpochFence",
        }
    }

    /// The state with Kafka's name `name` (case-sensitive, as Kafka's `fromName`).
    pub fn from_name(name: &str) -> Option<TxnState> {
        TxnState::ALL.into_iter().find(|s| s.name() == name)
    }
}

/// A `__transaction_state` value (Kafka's `TransactionLogValue`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TxnLogValue {
    /// The producer id in use by the transactional id.
    pub producer_id: ProducerId,
    /// Its epoch.
    pub producer_epoch: ProducerEpoch,
    /// The transaction timeout.
    pub transaction_timeout_ms: i32,
    /// The state.
    pub state: TxnState,
    /// The partitions of the transaction (always empty in state Empty: written as null).
    pub partitions: BTreeSet<(String, i32)>,
    /// When the transaction metadata was last updated (ms).
    pub last_update_timestamp_ms: i64,
    /// When the transaction started (`-1` when none has).
    pub start_timestamp_ms: i64,
    /// Version 1 tag 0 (`PreviousProducerId`); `-1` when absent (always in version 0).
    pub previous_producer_id: ProducerId,
    /// Version 1 tag 1 (`NextProducerId`); `-1` when absent.
    pub next_producer_id: ProducerId,
    /// Version 1 tag 2 (`ClientTransactionVersion`); `0` when absent.
    pub client_transaction_version: i16,
}

/// Why a `__transaction_state` record could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The bytes ended before the record did (or a count needs more bytes than remain).
    #[error("record truncated")]
    Truncated,
    /// A key version this code does not know (Kafka skips such records when loading).
    #[error("unknown key version {0}")]
    UnknownKeyVersion(i16),
    /// A value version this code does not know.
    #[error("unknown value version {0}")]
    UnknownValueVersion(i16),
    /// A transaction status that is not one of Kafka's states.
    #[error("unknown transaction status {0}")]
    UnknownState(i8),
    /// A string that is not UTF-8, a null where none is allowed, a bad varint.
    #[error("malformed field: {0}")]
    Malformed(&'static str),
}

impl From<FieldError> for DecodeError {
    fn from(e: FieldError) -> Self {
        match e {
            FieldError::Truncated => DecodeError::Truncated,
            FieldError::NullString => DecodeError::Malformed("null string"),
            FieldError::Malformed(why) => DecodeError::Malformed(why),
        }
    }
}

const KEY_VERSION: i16 = 0;
const VALUE_VERSION: i16 = 0;

/// The key of a transactional id's record (version 0).
pub fn txn_key(transactional_id: &str) -> Bytes {
    let mut buf = BytesMut::with_capacity(4 + transactional_id.len());
    buf.put_i16(KEY_VERSION);
    put_str(&mut buf, transactional_id);
    buf.freeze()
}

/// The partitions grouped by topic, in order.
pub(crate) fn group_by_topic(partitions: &BTreeSet<(String, i32)>) -> Vec<(String, Vec<i32>)> {
    let mut out: Vec<(String, Vec<i32>)> = Vec::new();
    for (topic, p) in partitions {
        match out.last_mut() {
            Some((t, ps)) if t == topic => ps.push(*p),
            _ => out.push((topic.clone(), vec![*p])),
        }
    }
    out
}

/// A value, encoded as version 0 (the tagged fields of version 1 are not written).
pub fn txn_value(value: &TxnLogValue) -> Bytes {
    let mut buf = BytesMut::with_capacity(48 + value.partitions.len() * 8);
    buf.put_i16(VALUE_VERSION);
    buf.put_i64(value.producer_id);
    buf.put_i16(value.producer_epoch);
    buf.put_i32(value.transaction_timeout_ms);
    buf.put_i8(value.state.id());
    if value.state == TxnState::Empty {
        buf.put_i32(-1);
    } else {
        let topics = group_by_topic(&value.partitions);
        put_len(&mut buf, topics.len());
        for (topic, ids) in &topics {
            put_str(&mut buf, topic);
            put_len(&mut buf, ids.len());
            for id in ids {
                buf.put_i32(*id);
            }
        }
    }
    buf.put_i64(value.last_update_timestamp_ms);
    buf.put_i64(value.start_timestamp_ms);
    buf.freeze()
}

/// The key and value (version 0) of a transactional id's record.
pub fn txn_record(transactional_id: &str, value: &TxnLogValue) -> (Bytes, Bytes) {
    (txn_key(transactional_id), txn_value(value))
}

/// The partition of `__transaction_state` that owns a transactional id: Kafka's
/// `Utils.abs(transactionalId.hashCode) % transaction.state.log.num.partitions` (the same
/// formula as for groups, [`strata_group::partition_for`]). A non-positive count yields 0.
pub fn partition_for(transactional_id: &str, partitions: i32) -> i32 {
    strata_group::partition_for(transactional_id, partitions)
}

/// Decodes a key: the transactional id.
pub fn decode_key(key: &[u8]) -> Result<String, DecodeError> {
    let mut r = Reader::new(key);
    match r.i16()? {
        0 => Ok(r.str()?),
        v => Err(DecodeError::UnknownKeyVersion(v)),
    }
}

fn fixed<const N: usize>(raw: &[u8]) -> Result<[u8; N], DecodeError> {
    raw.try_into()
        .map_err(|_| DecodeError::Malformed("tagged field of the wrong size"))
}

/// Decodes a (non-null) value of version 0 or 1.
pub fn decode_value(value: &[u8]) -> Result<TxnLogValue, DecodeError> {
    let mut r = Reader::new(value);
    let version = r.i16()?;
    let flexible = match version {
        0 => false,
        1 => true,
        v => return Err(DecodeError::UnknownValueVersion(v)),
    };
    let producer_id = r.i64()?;
    let producer_epoch = r.i16()?;
    let transaction_timeout_ms = r.i32()?;
    let status = r.i8()?;
    let state = TxnState::from_id(status).ok_or(DecodeError::UnknownState(status))?;
    let mut partitions = BTreeSet::new();
    // An entry is at least a string length and an array count.
    let topics = if flexible {
        r.compact_count(3)?
    } else {
        r.count(6)?
    };
    for _ in 0..topics.unwrap_or(0) {
        let (topic, ids) = if flexible {
            (r.compact_str()?, r.compact_count(4)?)
        } else {
            (r.str()?, r.count(4)?)
        };
        let ids = ids.ok_or(DecodeError::Malformed("null partition ids"))?;
        for _ in 0..ids {
            let id = r.i32()?;
            // Kafka ignores the partitions of an Empty transaction.
            if state != TxnState::Empty {
                partitions.insert((topic.clone(), id));
            }
        }
        if flexible {
            r.skip_tagged_fields()?;
        }
    }
    let last_update_timestamp_ms = r.i64()?;
    let start_timestamp_ms = r.i64()?;
    let mut out = TxnLogValue {
        producer_id,
        producer_epoch,
        transaction_timeout_ms,
        state,
        partitions,
        last_update_timestamp_ms,
        start_timestamp_ms,
        previous_producer_id: -1,
        next_producer_id: -1,
        client_transaction_version: 0,
    };
    if flexible {
        r.tagged_fields(|tag, raw| -> Result<(), DecodeError> {
            match tag {
                0 => out.previous_producer_id = i64::from_be_bytes(fixed(raw)?),
                1 => out.next_producer_id = i64::from_be_bytes(fixed(raw)?),
                2 => out.client_transaction_version = i16::from_be_bytes(fixed(raw)?),
                _ => {}
            }
            Ok(())
        })?;
    }
    Ok(out)
}

/// Decodes one record: the transactional id and its value (`None` for a tombstone).
pub fn decode_record(
    key: &[u8],
    value: Option<&[u8]>,
) -> Result<(String, Option<TxnLogValue>), DecodeError> {
    let id = decode_key(key)?;
    let value = value.map(decode_value).transpose()?;
    Ok((id, value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_partitions_by_topic() {
        let set: BTreeSet<(String, i32)> = [("b", 1), ("a", 2), ("a", 0)]
            .into_iter()
            .map(|(t, p)| (t.to_string(), p))
            .collect();
        assert_eq!(
            group_by_topic(&set),
            vec![("a".to_string(), vec![0, 2]), ("b".to_string(), vec![1])]
        );
    }
}
