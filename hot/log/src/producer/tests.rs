//! Unit tests of the producer state: sequence checks, transactions, snapshots.

#![allow(clippy::unwrap_used)]

use super::snapshot::{BATCH_BYTES, SNAPSHOT_HEADER, SNAPSHOT_VERSION, SNAPSHOT_VERSION_1};
use super::*;
use proptest::prelude::*;

const PID: ProducerId = 7;

/// A stored-or-received header of `count` records.
fn header(pid: ProducerId, epoch: i16, seq: i32, count: i32, base: Offset) -> BatchHeader {
    BatchHeader {
        base_offset: base,
        batch_length: 100,
        partition_leader_epoch: 0,
        magic: 2,
        crc: 0,
        attributes: 0,
        last_offset_delta: count - 1,
        base_timestamp: 1_000,
        max_timestamp: 1_000 + base,
        producer_id: pid,
        producer_epoch: epoch,
        base_sequence: seq,
        record_count: count,
    }
}

/// Checks and, if new, "appends" at `*leo`: returns the check's answer.
fn append(
    s: &mut ProducerState,
    leo: &mut Offset,
    h: BatchHeader,
) -> Result<SequenceCheck, ProducerError> {
    let c = s.check(&h)?;
    if c == SequenceCheck::Append {
        let stored = BatchHeader {
            base_offset: *leo,
            max_timestamp: 1_000 + *leo,
            ..h
        };
        s.update(&stored, None);
        *leo += h.record_count as i64;
    }
    Ok(c)
}

#[test]
fn batches_without_a_producer_id_bypass_everything() {
    let mut s = ProducerState::new();
    let h = header(-1, -1, -1, 3, 0);
    assert_eq!(s.check(&h), Ok(SequenceCheck::Append));
    s.update(&h, None);
    assert!(s.is_empty());
}

#[test]
fn retries_of_the_last_five_are_duplicates_and_older_ones_out_of_order() {
    let mut s = ProducerState::new();
    let mut leo = 100;
    let mut seq = 0;
    let mut sent = Vec::new();
    for i in 0..8 {
        let n = 1 + i % 3;
        let first = leo;
        assert_eq!(
            append(&mut s, &mut leo, header(PID, 0, seq, n, -1)),
            Ok(SequenceCheck::Append)
        );
        sent.push((seq, n, first, leo - 1));
        seq += n;
    }
    for (k, &(seq, n, first, last)) in sent.iter().enumerate() {
        let got = s.check(&header(PID, 0, seq, n, -1));
        if k >= sent.len() - BATCHES_PER_PRODUCER {
            assert_eq!(
                got,
                Ok(SequenceCheck::Duplicate {
                    first_offset: first,
                    last_offset: last,
                    timestamp: 1_000 + first,
                })
            );
        } else {
            assert!(matches!(
                got,
                Err(ProducerError::OutOfOrderSequence { expected, .. }) if expected == seq_after(&sent)
            ));
        }
    }
    // Same first sequence, different length: not a duplicate, and out of order.
    let (seq, n, _, _) = sent[sent.len() - 1];
    assert!(s.check(&header(PID, 0, seq, n + 1, -1)).is_err());
}

fn seq_after(sent: &[(i32, i32, Offset, Offset)]) -> i32 {
    sent.last().map_or(0, |&(s, n, _, _)| s + n)
}

#[test]
fn gaps_are_out_of_order() {
    let mut s = ProducerState::new();
    let mut leo = 0;
    append(&mut s, &mut leo, header(PID, 0, 0, 2, -1)).unwrap();
    let err = s.check(&header(PID, 0, 3, 1, -1)).unwrap_err();
    assert_eq!(
        err,
        ProducerError::OutOfOrderSequence {
            producer_id: PID,
            epoch: 0,
            first_seq: 3,
            expected: 2
        }
    );
    assert_eq!(err.error_code(), ErrorCode::OutOfOrderSequenceNumber);
    assert_eq!(err.error_code().code(), 45);
}

#[test]
fn an_unknown_producer_may_start_at_any_sequence() {
    let s = ProducerState::new();
    assert_eq!(
        s.check(&header(PID, 3, 12_345, 2, -1)),
        Ok(SequenceCheck::Append)
    );
}

#[test]
fn a_new_epoch_starts_at_zero_and_fences_the_old_one() {
    let mut s = ProducerState::new();
    let mut leo = 0;
    append(&mut s, &mut leo, header(PID, 1, 0, 3, -1)).unwrap();
    append(&mut s, &mut leo, header(PID, 1, 3, 3, -1)).unwrap();
    // A new epoch must start at 0.
    assert!(matches!(
        s.check(&header(PID, 2, 6, 1, -1)),
        Err(ProducerError::OutOfOrderSequence { expected: 0, .. })
    ));
    assert_eq!(
        append(&mut s, &mut leo, header(PID, 2, 0, 1, -1)),
        Ok(SequenceCheck::Append)
    );
    let e = s.entry(PID).unwrap();
    assert_eq!((e.epoch(), e.last_sequence(), e.last_offset()), (2, 0, 6));
    assert_eq!(
        e.batches().len(),
        1,
        "the old epoch's batches are forgotten"
    );
    // The old epoch is fenced, even for what used to be a duplicate.
    let err = s.check(&header(PID, 1, 3, 3, -1)).unwrap_err();
    assert_eq!(
        err,
        ProducerError::InvalidProducerEpoch {
            producer_id: PID,
            epoch: 1,
            current: 2
        }
    );
    assert_eq!(err.error_code().code(), 47);
}

#[test]
fn sequences_wrap_after_i32_max() {
    let mut s = ProducerState::new();
    let mut leo = 0;
    // 3 records from MAX - 1: MAX - 1, MAX, 0.
    let h = header(PID, 0, i32::MAX - 1, 3, -1);
    assert_eq!(h.last_sequence(), 0);
    append(&mut s, &mut leo, h).unwrap();
    assert_eq!(
        append(&mut s, &mut leo, header(PID, 0, 1, 1, -1)),
        Ok(SequenceCheck::Append)
    );
    // A batch ending exactly at MAX is followed by 0.
    let mut s = ProducerState::new();
    append(&mut s, &mut leo, header(PID, 0, i32::MAX - 1, 2, -1)).unwrap();
    assert!(s.check(&header(PID, 0, 1, 1, -1)).is_err());
    assert_eq!(
        s.check(&header(PID, 0, 0, 1, -1)),
        Ok(SequenceCheck::Append)
    );
    assert!(matches!(
        s.check(&header(PID, 0, i32::MAX - 1, 2, -1)),
        Ok(SequenceCheck::Duplicate { .. })
    ));
}

#[test]
fn negative_sequences_are_invalid_records() {
    let s = ProducerState::new();
    let err = s.check(&header(PID, 0, -1, 1, -1)).unwrap_err();
    assert_eq!(err.error_code(), ErrorCode::InvalidRecord);
}

#[test]
fn expiration_counts_from_the_last_batch_timestamp() {
    let mut s = ProducerState::new();
    let mut leo = 0;
    append(&mut s, &mut leo, header(1, 0, 0, 1, -1)).unwrap(); // ts 1000
    append(&mut s, &mut leo, header(2, 0, 0, 1, -1)).unwrap(); // ts 1001
    assert_eq!(s.expire(1_000 + 499, 500), 0);
    assert_eq!(s.expire(1_000 + 500, 500), 1, "Kafka expires at >=");
    assert!(s.entry(1).is_none() && s.entry(2).is_some());
    // The forgotten producer may continue at any sequence.
    assert_eq!(s.check(&header(1, 0, 77, 1, -1)), Ok(SequenceCheck::Append));
}

/// A transactional batch of `pid` at `base`.
fn txn(pid: ProducerId, epoch: i16, seq: i32, count: i32, base: Offset) -> BatchHeader {
    BatchHeader {
        attributes: 0x10,
        ..header(pid, epoch, seq, count, base)
    }
}

fn marker_at(pid: ProducerId, epoch: i16, base: Offset) -> BatchHeader {
    BatchHeader {
        attributes: 0x20 | 0x10,
        base_sequence: -1,
        ..header(pid, epoch, -1, 1, base)
    }
}

#[test]
fn transactions_hold_the_stable_offset_until_their_marker_is_replicated() {
    let mut s = ProducerState::new();
    assert_eq!(s.update(&txn(1, 0, 0, 2, 10), None), None);
    assert_eq!(s.update(&txn(2, 0, 0, 2, 12), None), None);
    assert_eq!(s.update(&txn(1, 0, 2, 2, 14), None), None);
    assert_eq!(s.first_unstable_offset(100), Some(10));
    assert_eq!(
        s.check(&header(1, 0, 4, 1, -1)),
        Err(ProducerError::ExpectedTransactional { producer_id: 1 })
    );
    let done = s.update(&marker_at(1, 0, 16), Some(MarkerKind::Commit));
    assert_eq!(
        done,
        Some(CompletedTxn {
            producer_id: 1,
            first_offset: 10,
            last_offset: 16,
            aborted: false
        })
    );
    // Ended, but its marker is not below the high-water mark yet.
    assert_eq!(s.first_unstable_offset(16), Some(10));
    assert_eq!(s.first_unstable_offset(17), Some(12));
    assert_eq!(s.open_transactions().collect::<Vec<_>>(), vec![(12, 2)]);
    // The snapshot keeps the open transaction (not the ended one, as Kafka's).
    let (at, decoded) = ProducerState::decode_snapshot(&s.encode_snapshot(17)).unwrap();
    assert_eq!(at, 17);
    assert_eq!(decoded.first_unstable_offset(17), Some(12));
    assert_eq!(
        decoded.entry(2).unwrap().current_txn_first_offset(),
        Some(12)
    );
    s.prune_stable(17);
    assert_eq!(s, decoded);
    let done = s
        .update(&marker_at(2, 0, 17), Some(MarkerKind::Abort))
        .unwrap();
    assert!(done.aborted);
    s.prune_stable(18);
    assert_eq!(s.first_unstable_offset(18), None);
    // A marker from an older epoch is refused; an unknown control record ends nothing.
    assert!(s.check_marker(2, 0).is_ok() && s.check_marker(2, 1).is_ok());
    s.update(&txn(3, 1, 0, 1, 20), None);
    assert_eq!(
        s.check_marker(3, 0).unwrap_err().error_code(),
        ErrorCode::InvalidProducerEpoch
    );
    assert_eq!(s.update(&marker_at(3, 1, 21), None), None);
    assert_eq!(s.first_unstable_offset(100), Some(20));
}

#[test]
fn version_1_snapshots_still_load() {
    let (s, leo) = sample_state();
    let v2 = s.encode_snapshot(leo);
    // Version 1: the same without the open-transaction field of each producer.
    let mut v1 = Vec::new();
    let mut r = &v2[SNAPSHOT_HEADER + 12..];
    while !r.is_empty() {
        let (fixed, rest) = r.split_at(8 + 2 + 8);
        v1.extend_from_slice(fixed);
        let rest = &rest[8..];
        let n = rest[0] as usize;
        v1.extend_from_slice(&rest[..1 + n * BATCH_BYTES]);
        r = &rest[1 + n * BATCH_BYTES..];
    }
    let mut content = v2[SNAPSHOT_HEADER..SNAPSHOT_HEADER + 12].to_vec();
    content.extend_from_slice(&v1);
    let mut bytes = SNAPSHOT_VERSION_1.to_be_bytes().to_vec();
    bytes.extend_from_slice(&crc32c::crc32c(&content).to_be_bytes());
    bytes.extend_from_slice(&content);
    assert_eq!(ProducerState::decode_snapshot(&bytes), Ok((leo, s)));
}

#[test]
fn control_batches_move_the_epoch_without_a_sequence() {
    let mut s = ProducerState::new();
    let mut leo = 0;
    append(&mut s, &mut leo, header(PID, 0, 0, 2, -1)).unwrap();
    let marker = BatchHeader {
        attributes: 0x20 | 0x10,
        base_sequence: -1,
        ..header(PID, 1, -1, 1, 2)
    };
    s.update(&marker, Some(MarkerKind::Commit));
    let e = s.entry(PID).unwrap();
    assert_eq!((e.epoch(), e.batches().len()), (1, 0));
    assert_eq!(
        s.check(&header(PID, 1, 0, 1, -1)),
        Ok(SequenceCheck::Append)
    );
    assert!(s.check(&header(PID, 1, 5, 1, -1)).is_err());
}

fn sample_state() -> (ProducerState, Offset) {
    let mut s = ProducerState::new();
    let mut leo = 0;
    for i in 0..20 {
        let pid = i % 3;
        let seq = s.entry(pid).map_or(0, |e| next_sequence(e.last_sequence()));
        append(
            &mut s,
            &mut leo,
            header(pid, 0, seq, 1 + (i as i32 % 4), -1),
        )
        .unwrap();
    }
    (s, leo)
}

#[test]
fn snapshot_round_trips() {
    let (s, leo) = sample_state();
    let bytes = s.encode_snapshot(leo);
    assert_eq!(ProducerState::decode_snapshot(&bytes), Ok((leo, s)));
    let empty = ProducerState::new().encode_snapshot(0);
    assert_eq!(
        ProducerState::decode_snapshot(&empty),
        Ok((0, ProducerState::new()))
    );
}

#[test]
fn torn_and_corrupt_snapshots_are_refused() {
    let (s, leo) = sample_state();
    let bytes = s.encode_snapshot(leo);
    for len in 0..bytes.len() {
        assert!(
            ProducerState::decode_snapshot(&bytes[..len]).is_err(),
            "torn at {len}"
        );
    }
    for i in 0..bytes.len() {
        for bit in 0..8 {
            let mut b = bytes.clone();
            b[i] ^= 1 << bit;
            assert!(
                ProducerState::decode_snapshot(&b).is_err(),
                "flip {i}:{bit}"
            );
        }
    }
    let mut longer = bytes.clone();
    longer.push(0);
    assert!(ProducerState::decode_snapshot(&longer).is_err());
    let mut v3 = bytes;
    v3[1] = 3;
    assert_eq!(
        ProducerState::decode_snapshot(&v3),
        Err(SnapshotError::UnsupportedVersion(3))
    );
}

/// Re-signs `content` (everything after the CRC) so only the semantic checks apply.
fn signed(content: &[u8]) -> Vec<u8> {
    let mut out = SNAPSHOT_VERSION.to_be_bytes().to_vec();
    out.extend_from_slice(&crc32c::crc32c(content).to_be_bytes());
    out.extend_from_slice(content);
    out
}

#[test]
fn implausible_snapshots_with_a_valid_crc_are_refused() {
    let (s, leo) = sample_state();
    let good = s.encode_snapshot(leo);
    // The state covers batches below `leo`: claiming less is a lie.
    let mut content = good[SNAPSHOT_HEADER..].to_vec();
    content[..8].copy_from_slice(&(leo - 1).to_be_bytes());
    assert_eq!(
        ProducerState::decode_snapshot(&signed(&content)),
        Err(SnapshotError::Invalid("batch offsets out of range"))
    );
    // A huge producer count with no producers behind it.
    let mut content = 0i64.to_be_bytes().to_vec();
    content.extend_from_slice(&u32::MAX.to_be_bytes());
    assert!(matches!(
        ProducerState::decode_snapshot(&signed(&content)),
        Err(SnapshotError::Truncated { .. })
    ));
}

/// One step of the model-based test, for producer `pid` (0 or 1).
#[derive(Clone, Debug)]
enum Op {
    /// The next batch in sequence, of `n` records.
    New { pid: usize, n: i32 },
    /// A retry of the batch `back` batches before the newest of this epoch.
    Retry { pid: usize, back: usize },
    /// A batch `skip` sequences past the expected one.
    Gap { pid: usize, skip: i32 },
    /// A new epoch, starting at sequence 0 or (wrongly) elsewhere.
    Bump { pid: usize, at_zero: bool },
    /// A batch from an epoch older than the current one.
    Zombie { pid: usize, n: i32 },
    /// Replace the state by its snapshot, decoded.
    Snapshot,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0usize..2, 1i32..6).prop_map(|(pid, n)| Op::New { pid, n }),
        4 => (0usize..2, 0usize..9).prop_map(|(pid, back)| Op::Retry { pid, back }),
        1 => (0usize..2, 1i32..50).prop_map(|(pid, skip)| Op::Gap { pid, skip }),
        1 => (0usize..2, any::<bool>()).prop_map(|(pid, at_zero)| Op::Bump { pid, at_zero }),
        1 => (0usize..2, 1i32..4).prop_map(|(pid, n)| Op::Zombie { pid, n }),
        1 => Just(Op::Snapshot),
    ]
}

/// What the test knows of a producer: every batch of its current epoch.
#[derive(Clone, Debug)]
struct Model {
    epoch: i16,
    /// Sequence of the first batch, for a producer not yet seen.
    start_seq: i32,
    /// (first seq, record count, first offset, last offset)
    sent: Vec<(i32, i32, Offset, Offset)>,
    known: bool,
}

impl Model {
    fn next_seq(&self) -> i32 {
        match self.sent.last() {
            Some(&(s, n, _, _)) => seq_add(s, n),
            None if self.known => 0,
            None => self.start_seq,
        }
    }
}

/// `seq + n` with Kafka's wrap-around.
fn seq_add(seq: i32, n: i32) -> i32 {
    ((seq as i64 + n as i64) % (i32::MAX as i64 + 1)) as i32
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn the_state_deduplicates_exactly_the_last_five_batches(
        near_max in proptest::array::uniform2(any::<bool>()),
        ops in proptest::collection::vec(op(), 1..120),
    ) {
        let mut s = ProducerState::new();
        let mut leo: Offset = 0;
        // A producer may start anywhere; starting near i32::MAX exercises wrapping.
        let mut models: Vec<Model> = near_max
            .iter()
            .map(|&m| Model {
                epoch: 0,
                start_seq: if m { i32::MAX - 10 } else { 0 },
                sent: vec![],
                known: false,
            })
            .collect();
        for op in ops {
            match op {
                Op::New { pid, n } => {
                    let m = &mut models[pid];
                    let seq = m.next_seq();
                    let first = leo;
                    let got = append(&mut s, &mut leo, header(pid as i64, m.epoch, seq, n, -1));
                    prop_assert_eq!(got, Ok(SequenceCheck::Append));
                    m.sent.push((seq, n, first, leo - 1));
                    m.known = true;
                }
                Op::Retry { pid, back } => {
                    let m = &models[pid];
                    if back >= m.sent.len() {
                        continue;
                    }
                    let (seq, n, first, last) = m.sent[m.sent.len() - 1 - back];
                    let before = s.clone();
                    let got = append(&mut s, &mut leo, header(pid as i64, m.epoch, seq, n, -1));
                    if back < BATCHES_PER_PRODUCER {
                        prop_assert_eq!(got, Ok(SequenceCheck::Duplicate {
                            first_offset: first,
                            last_offset: last,
                            timestamp: 1_000 + first,
                        }));
                    } else {
                        let is_out_of_order =
                            matches!(got, Err(ProducerError::OutOfOrderSequence { .. }));
                        prop_assert!(is_out_of_order, "old retry gave {:?}", got);
                    }
                    prop_assert_eq!(&s, &before, "a retry changes nothing");
                }
                Op::Gap { pid, skip } => {
                    let m = &mut models[pid];
                    let seq = seq_add(m.next_seq(), skip);
                    let first = leo;
                    let got = append(&mut s, &mut leo, header(pid as i64, m.epoch, seq, 1, -1));
                    if m.known {
                        let is_out_of_order =
                            matches!(got, Err(ProducerError::OutOfOrderSequence { .. }));
                        prop_assert!(is_out_of_order, "gap gave {:?}", got);
                    } else {
                        // Unknown producers start anywhere.
                        prop_assert_eq!(got, Ok(SequenceCheck::Append));
                        m.sent.push((seq, 1, first, first));
                        m.known = true;
                    }
                }
                Op::Bump { pid, at_zero } => {
                    let m = &mut models[pid];
                    let seq = if at_zero { 0 } else { 1 + m.next_seq() % 1000 };
                    let first = leo;
                    let got = append(&mut s, &mut leo, header(pid as i64, m.epoch + 1, seq, 1, -1));
                    if at_zero || !m.known {
                        prop_assert_eq!(got, Ok(SequenceCheck::Append));
                        m.epoch += 1;
                        m.sent = vec![(seq, 1, first, first)];
                        m.known = true;
                    } else {
                        let ok = matches!(got, Err(ProducerError::OutOfOrderSequence { expected: 0, .. }));
                        prop_assert!(ok, "bump not at 0 gave {:?}", got);
                    }
                }
                Op::Zombie { pid, n } => {
                    let m = &models[pid];
                    if !m.known || m.epoch == 0 {
                        continue;
                    }
                    let before = s.clone();
                    let got = append(&mut s, &mut leo, header(pid as i64, m.epoch - 1, m.next_seq(), n, -1));
                    let fenced = matches!(got, Err(ProducerError::InvalidProducerEpoch { .. }));
                    prop_assert!(fenced, "zombie gave {:?}", got);
                    prop_assert_eq!(&s, &before);
                }
                Op::Snapshot => {
                    let (at, decoded) = ProducerState::decode_snapshot(&s.encode_snapshot(leo)).unwrap();
                    prop_assert_eq!(at, leo);
                    prop_assert_eq!(&decoded, &s);
                    s = decoded;
                }
            }
            // The entry always describes the newest batch of the current epoch.
            for (pid, m) in models.iter().enumerate() {
                let e = s.entry(pid as i64);
                prop_assert_eq!(e.is_some(), m.known);
                if let (Some(e), Some(&(seq, n, _, last))) = (e, m.sent.last()) {
                    prop_assert_eq!(e.epoch(), m.epoch);
                    prop_assert_eq!(e.last_sequence(), seq_add(seq, n - 1));
                    prop_assert_eq!(e.last_offset(), last);
                    prop_assert!(e.batches().len() <= BATCHES_PER_PRODUCER);
                }
            }
        }
    }

    #[test]
    fn decoding_garbage_never_panics(data in proptest::collection::vec(any::<u8>(), 0..400)) {
        let _ = ProducerState::decode_snapshot(&data);
        // Also behind a valid header and CRC, so the field checks are reached.
        let _ = ProducerState::decode_snapshot(&signed(&data));
    }
}
