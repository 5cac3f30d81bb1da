//! `__transaction_state` records: round trips, bytes built by hand after Kafka's
//! `TransactionLogKey` / `TransactionLogValue` schemas, malformed input.

use std::collections::BTreeSet;

use bytes::{BufMut, BytesMut};
use proptest::prelude::*;
use strata_txn::*;

fn parts(list: &[(&str, i32)]) -> BTreeSet<(String, i32)> {
    list.iter().map(|(t, p)| (t.to_string(), *p)).collect()
}

fn ongoing() -> TxnLogValue {
    TxnLogValue {
        producer_id: 42,
        producer_epoch: 3,
        transaction_timeout_ms: 60_000,
        state: TxnState::Ongoing,
        partitions: parts(&[("a", 0), ("a", 2), ("b", 1)]),
        last_update_timestamp_ms: 1000,
        start_timestamp_ms: 900,
        previous_producer_id: -1,
        next_producer_id: -1,
        client_transaction_version: 0,
    }
}

/// `ongoing()` as Kafka writes it (version 0).
fn ongoing_v0_bytes() -> Vec<u8> {
    let mut b = BytesMut::new();
    b.put_i16(0);
    b.put_i64(42);
    b.put_i16(3);
    b.put_i32(60_000);
    b.put_i8(1);
    b.put_i32(2); // topics
    b.put_i16(1);
    b.put_slice(b"a");
    b.put_i32(2);
    b.put_i32(0);
    b.put_i32(2);
    b.put_i16(1);
    b.put_slice(b"b");
    b.put_i32(1);
    b.put_i32(1);
    b.put_i64(1000);
    b.put_i64(900);
    b.to_vec()
}

#[test]
fn key_is_version_0_and_the_id() {
    let key = txn_key("txn");
    assert_eq!(&key[..], &[0, 0, 0, 3, b't', b'x', b'n']);
    assert_eq!(decode_key(&key).unwrap(), "txn");
}

#[test]
fn value_v0_matches_kafkas_bytes() {
    assert_eq!(txn_value(&ongoing()).to_vec(), ongoing_v0_bytes());
    assert_eq!(decode_value(&ongoing_v0_bytes()).unwrap(), ongoing());
}

#[test]
fn every_state_round_trips() {
    for state in TxnState::ALL {
        let mut v = ongoing();
        v.state = state;
        if state == TxnState::Empty {
            v.partitions.clear();
        }
        let (k, bytes) = txn_record("id", &v);
        assert_eq!(
            decode_record(&k, Some(&bytes)).unwrap(),
            ("id".to_string(), Some(v))
        );
        assert_eq!(TxnState::from_id(state.id()), Some(state));
        assert_eq!(TxnState::from_name(state.name()), Some(state));
    }
    let ids: Vec<i8> = TxnState::ALL.iter().map(|s| s.id()).collect();
    assert_eq!(ids, (0..8).collect::<Vec<i8>>());
    assert_eq!(TxnState::from_id(8), None);
    assert_eq!(TxnState::from_id(-1), None);
    assert_eq!(TxnState::from_name("ongoing"), None);
}

#[test]
fn empty_is_written_with_null_partitions_and_complete_with_an_empty_array() {
    let mut v = ongoing();
    v.state = TxnState::Empty;
    let bytes = txn_value(&v);
    // version, pid, epoch, timeout, status, then the null array.
    assert_eq!(&bytes[17..21], &(-1i32).to_be_bytes());
    assert_eq!(bytes.len(), 2 + 8 + 2 + 4 + 1 + 4 + 8 + 8);
    // Kafka ignores the partitions of an Empty transaction.
    assert!(decode_value(&bytes).unwrap().partitions.is_empty());

    v.state = TxnState::CompleteCommit;
    v.partitions.clear();
    let bytes = txn_value(&v);
    assert_eq!(&bytes[17..21], &0i32.to_be_bytes());
}

#[test]
fn tombstone_decodes_to_no_value() {
    assert_eq!(
        decode_record(&txn_key("gone"), None).unwrap(),
        ("gone".to_string(), None)
    );
}

/// `ongoing()` in version 1 (flexible) with all three known tags and an unknown one.
fn ongoing_v1_bytes() -> Vec<u8> {
    let mut b = BytesMut::new();
    b.put_i16(1);
    b.put_i64(42);
    b.put_i16(3);
    b.put_i32(60_000);
    b.put_i8(1);
    b.put_u8(3); // 2 topics
    b.put_u8(2); // "a"
    b.put_slice(b"a");
    b.put_u8(3); // 2 ids
    b.put_i32(0);
    b.put_i32(2);
    b.put_u8(0); // no tags
    b.put_u8(2);
    b.put_slice(b"b");
    b.put_u8(2);
    b.put_i32(1);
    b.put_u8(1); // one unknown tag in the entry
    b.put_u8(5);
    b.put_u8(1);
    b.put_u8(0xee);
    b.put_i64(1000);
    b.put_i64(900);
    b.put_u8(4); // tags
    b.put_u8(0);
    b.put_u8(8);
    b.put_i64(41);
    b.put_u8(1);
    b.put_u8(8);
    b.put_i64(43);
    b.put_u8(2);
    b.put_u8(2);
    b.put_i16(2);
    b.put_u8(9);
    b.put_u8(3);
    b.put_slice(&[1, 2, 3]);
    b.to_vec()
}

#[test]
fn value_v1_is_read_with_its_tagged_fields() {
    let v = decode_value(&ongoing_v1_bytes()).unwrap();
    assert_eq!(
        v,
        TxnLogValue {
            previous_producer_id: 41,
            next_producer_id: 43,
            client_transaction_version: 2,
            ..ongoing()
        }
    );
    // Re-encoded as version 0, without the tags.
    assert_eq!(txn_value(&v).to_vec(), ongoing_v0_bytes());
}

#[test]
fn value_v1_with_null_partitions_and_no_tags() {
    let mut b = BytesMut::new();
    b.put_i16(1);
    b.put_i64(7);
    b.put_i16(0);
    b.put_i32(1000);
    b.put_i8(0);
    b.put_u8(0); // null
    b.put_i64(5);
    b.put_i64(-1);
    b.put_u8(0);
    let v = decode_value(&b).unwrap();
    assert_eq!(v.state, TxnState::Empty);
    assert!(v.partitions.is_empty());
    assert_eq!(v.previous_producer_id, -1);
    assert_eq!(v.start_timestamp_ms, -1);
}

#[test]
fn malformed_input_is_a_typed_error() {
    assert_eq!(
        decode_key(&[0, 1, 0, 0]),
        Err(DecodeError::UnknownKeyVersion(1))
    );
    assert_eq!(decode_key(&[0, 0, 0, 5, b'a']), Err(DecodeError::Truncated));
    assert!(matches!(
        decode_key(&[0, 0, 0xff, 0xff]),
        Err(DecodeError::Malformed(_))
    ));
    assert!(matches!(
        decode_key(&[0, 0, 0, 1, 0xff]),
        Err(DecodeError::Malformed(_))
    ));
    assert_eq!(decode_key(&[0]), Err(DecodeError::Truncated));

    let good = ongoing_v0_bytes();
    let mut v = good.clone();
    v[1] = 2;
    assert_eq!(decode_value(&v), Err(DecodeError::UnknownValueVersion(2)));
    let mut v = good.clone();
    v[16] = 9;
    assert_eq!(decode_value(&v), Err(DecodeError::UnknownState(9)));
    for cut in 0..good.len() {
        assert_eq!(
            decode_value(&good[..cut]),
            Err(DecodeError::Truncated),
            "{cut}"
        );
    }
    // A topic count far beyond the bytes: refused before anything is allocated.
    let mut v = good.clone();
    v[17..21].copy_from_slice(&i32::MAX.to_be_bytes());
    assert_eq!(decode_value(&v), Err(DecodeError::Truncated));
    // A partition count far beyond the bytes.
    let mut v = good.clone();
    v[24..28].copy_from_slice(&0x4000_0000i32.to_be_bytes());
    assert_eq!(decode_value(&v), Err(DecodeError::Truncated));
    // Null partition ids.
    let mut v = good.clone();
    v[24..28].copy_from_slice(&(-1i32).to_be_bytes());
    assert!(matches!(decode_value(&v), Err(DecodeError::Malformed(_))));

    let v1 = ongoing_v1_bytes();
    for cut in 0..v1.len() {
        assert!(decode_value(&v1[..cut]).is_err(), "{cut}");
    }
    // A known tag of the wrong size.
    let mut v = v1.clone();
    let tags = v.len() - 30;
    assert_eq!(v[tags], 4);
    v[tags + 2] = 7;
    assert!(decode_value(&v).is_err());
}

#[test]
fn partition_for_is_kafkas_formula() {
    // Java: "abc".hashCode() == 96354.
    assert_eq!(partition_for("abc", 50), 96354 % 50);
    // Java: "polygenelubricants".hashCode() == Integer.MIN_VALUE; Utils.abs gives 0.
    assert_eq!(
        strata_group::java_string_hash("polygenelubricants"),
        i32::MIN
    );
    assert_eq!(partition_for("polygenelubricants", 50), 0);
    for id in ["", "t", "transactional-id-1", "ünïcødé"] {
        let h = strata_group::java_string_hash(id);
        assert_eq!(partition_for(id, 7), (h & 0x7fff_ffff) % 7);
    }
    assert_eq!(partition_for("abc", 0), 0);
}

fn arb_value() -> impl Strategy<Value = TxnLogValue> {
    (
        any::<i64>(),
        any::<i16>(),
        any::<i32>(),
        prop::sample::select(TxnState::ALL.to_vec()),
        prop::collection::btree_set(("[a-c.é]{1,4}", any::<i32>()), 0..8),
        any::<i64>(),
        any::<i64>(),
    )
        .prop_map(
            |(pid, epoch, timeout, state, partitions, last, start)| TxnLogValue {
                producer_id: pid,
                producer_epoch: epoch,
                transaction_timeout_ms: timeout,
                state,
                partitions: if state == TxnState::Empty {
                    BTreeSet::new()
                } else {
                    partitions
                },
                last_update_timestamp_ms: last,
                start_timestamp_ms: start,
                previous_producer_id: -1,
                next_producer_id: -1,
                client_transaction_version: 0,
            },
        )
}

proptest! {
    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..128)) {
        let _ = decode_key(&bytes);
        let _ = decode_value(&bytes);
        let _ = decode_record(&bytes, Some(&bytes));
    }

    #[test]
    fn random_bodies_never_panic(v1 in any::<bool>(), body in prop::collection::vec(any::<u8>(), 0..128)) {
        let mut bytes = vec![0, u8::from(v1)];
        bytes.extend(body);
        let _ = decode_value(&bytes);
        let _ = decode_key(&bytes);
    }

    #[test]
    fn corrupted_records_never_panic(
        v in arb_value(),
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
    ) {
        let mut bytes = txn_value(&v).to_vec();
        for (i, b) in flips {
            let i = i.index(bytes.len());
            bytes[i] = b;
        }
        let _ = decode_value(&bytes);
    }

    #[test]
    fn values_round_trip(v in arb_value(), id in "[a-z0-9._-]{0,20}") {
        let (k, bytes) = txn_record(&id, &v);
        prop_assert_eq!(decode_record(&k, Some(&bytes)).unwrap(), (id, Some(v)));
    }
}
