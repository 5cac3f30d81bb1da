//! InitProducerId, AddPartitions / AddOffsets and EndTxn as a Kafka producer sees them:
//! the happy path, fencing, KIP-360 recovery, retries and failed writes.

mod common;
use common::*;
use strata_proto::ErrorCode;
use strata_txn::*;

const T: &str = "txn";

#[test]
fn init_of_a_new_id_allocates_a_producer_id_at_epoch_0() {
    let mut h = H::new();
    let w = h.init(T, None).write().unwrap();
    assert_eq!(w.partition, partition_for(T, PARTITIONS));
    assert_eq!(w.coordinator_epoch, 0);
    assert_eq!(decode_key(&w.key).unwrap(), T);
    let v = value_of(&w).unwrap();
    assert_eq!(
        (v.producer_id, v.producer_epoch, v.state),
        (1001, 0, TxnState::Empty)
    );
    assert_eq!(
        (v.transaction_timeout_ms, v.start_timestamp_ms),
        (TIMEOUT, -1)
    );
    // Pending until written.
    assert_eq!(h.meta(T).pending, Some(TxnState::Empty));
    let r = h.write_ok(w);
    assert_eq!(r.reply, Some(Reply::InitProducerId(Ok(pe(1001, 0)))));
    let m = h.meta(T);
    assert_eq!(
        (m.producer_id, m.producer_epoch, m.pending),
        (1001, 0, None)
    );

    // A second producer with the same id bumps the epoch of the same producer id.
    assert_eq!(h.init_ok(T), pe(1001, 1));
    assert_eq!(h.next_pid, 1001);
}

#[test]
fn init_validates_the_request() {
    let mut h = H::new();
    let mut alloc = || Ok(1);
    let c = &mut h.c;
    let err = |o: Outcome<InitProducerIdResult>| o.reply().unwrap().unwrap_err();
    assert_eq!(
        err(c.init_producer_id("", 1000, None, 0, &mut alloc)),
        ErrorCode::InvalidRequest
    );
    for bad in [0, -1, 900_001] {
        assert_eq!(
            err(c.init_producer_id(T, bad, None, 0, &mut alloc)),
            ErrorCode::InvalidTransactionTimeout
        );
    }
    assert!(
        c.init_producer_id(T, 900_000, None, 0, &mut alloc)
            .write()
            .is_some()
    );
    assert_eq!(
        err(c.init_producer_id("other", 1000, Some(pe(-1, 0)), 0, &mut alloc)),
        ErrorCode::InvalidRequest
    );
    // The allocator's error is the answer.
    let mut failing = || Err(ErrorCode::CoordinatorLoadInProgress);
    assert_eq!(
        err(c.init_producer_id("other", 1000, None, 0, &mut failing)),
        ErrorCode::CoordinatorLoadInProgress
    );
    assert!(c.metadata("other").is_none());
}

#[test]
fn requests_during_a_pending_write_get_concurrent_transactions() {
    let mut h = H::new();
    let p = h.init_ok(T);
    let w = h.add(T, p, &[tp("a", 0)]).write().unwrap();
    assert_eq!(
        h.init(T, None).reply(),
        Some(Err(ErrorCode::ConcurrentTransactions))
    );
    assert_eq!(
        h.add(T, p, &[tp("a", 1)]).reply(),
        Some(ErrorCode::ConcurrentTransactions)
    );
    assert_eq!(
        h.end(T, p, true).reply(),
        Some(ErrorCode::ConcurrentTransactions)
    );
    // Fencing checks come first.
    assert_eq!(
        h.add(T, pe(p.producer_id, 9), &[]).reply(),
        Some(ErrorCode::ProducerFenced)
    );
    h.write_ok(w);
    assert_eq!(h.meta(T).partitions, [tp("a", 0)].into_iter().collect());
}

#[test]
fn add_partitions_checks_the_producer_and_starts_the_transaction() {
    let mut h = H::new();
    assert_eq!(
        h.add(T, pe(1, 0), &[tp("a", 0)]).reply(),
        Some(ErrorCode::InvalidProducerIdMapping)
    );
    let p = h.init_ok(T);
    assert_eq!(
        h.add(T, pe(p.producer_id + 1, 0), &[tp("a", 0)]).reply(),
        Some(ErrorCode::InvalidProducerIdMapping)
    );
    for epoch in [p.producer_epoch + 1, p.producer_epoch - 1] {
        assert_eq!(
            h.add(T, pe(p.producer_id, epoch), &[tp("a", 0)]).reply(),
            Some(ErrorCode::ProducerFenced)
        );
    }
    h.now += 5;
    let w = h.add(T, p, &[tp("a", 0), tp("b", 3)]).write().unwrap();
    let v = value_of(&w).unwrap();
    assert_eq!(v.state, TxnState::Ongoing);
    assert_eq!(v.start_timestamp_ms, h.now);
    h.write_ok(w);
    let start = h.now;

    // Already added: answered at once, no write.
    h.now += 5;
    assert_eq!(h.add(T, p, &[tp("b", 3)]).reply(), Some(ErrorCode::None));
    // More partitions: the start time is kept.
    let w = h.add(T, p, &[tp("b", 3), tp("c", 0)]).write().unwrap();
    let v = value_of(&w).unwrap();
    assert_eq!(v.start_timestamp_ms, start);
    assert_eq!(v.last_update_timestamp_ms, h.now);
    assert_eq!(v.partitions.len(), 3);
    h.write_ok(w);
}

#[test]
fn add_offsets_adds_the_groups_offsets_partition() {
    let mut h = H::new();
    let p = h.init_ok(T);
    let w =
        h.c.add_offsets(T, p.producer_id, p.producer_epoch, "group", 50, h.now)
            .write()
            .unwrap();
    let expected = (
        CONSUMER_OFFSETS_TOPIC.to_string(),
        partition_for("group", 50),
    );
    assert_eq!(offsets_partition("group", 50), expected);
    assert!(value_of(&w).unwrap().partitions.contains(&expected));
    assert_eq!(
        h.write_ok(w).reply,
        Some(Reply::AddOffsets(ErrorCode::None))
    );
    assert_eq!(
        h.c.add_offsets(T, p.producer_id, p.producer_epoch, "group", 50, h.now),
        Outcome::Reply(ErrorCode::None)
    );
    assert_eq!(
        h.c.add_offsets(T, p.producer_id, 7, "group", 50, h.now),
        Outcome::Reply(ErrorCode::ProducerFenced)
    );
}

#[test]
fn commit_writes_prepare_then_markers_then_complete() {
    let mut h = H::new();
    let p = h.init_ok(T);
    h.add_ok(T, p, &[tp("a", 0), tp("a", 1), tp("b", 0)]);
    let w = h.end(T, p, true).write().unwrap();
    assert_eq!(value_of(&w).unwrap().state, TxnState::PrepareCommit);
    let r = h.write_ok(w);
    // EndTxn is answered once Prepare is written, before the markers.
    assert_eq!(r.reply, Some(Reply::EndTxn(ErrorCode::None)));
    let m = single_markers(r.actions);
    assert_eq!(
        m,
        SendMarkers {
            transactional_id: T.to_string(),
            txn_partition: partition_for(T, PARTITIONS),
            producer_id: p.producer_id,
            producer_epoch: p.producer_epoch,
            commit: true,
            coordinator_epoch: 0,
            partitions: vec![tp("a", 0), tp("a", 1), tp("b", 0)],
        }
    );
    assert_eq!(h.meta(T).state, TxnState::PrepareCommit);
    assert_eq!(h.meta(T).pending, Some(TxnState::CompleteCommit));
    assert_eq!(h.c.pending_markers(), vec![m.clone()]);

    // Partial completion (one leader answered), then a repeat, then the rest.
    assert!(h.c.on_markers_complete(&m, &[tp("a", 1)], h.now).is_none());
    assert!(h.c.on_markers_complete(&m, &[tp("a", 1)], h.now).is_none());
    assert_eq!(
        h.c.pending_markers()[0].partitions,
        vec![tp("a", 0), tp("b", 0)]
    );
    // A retry of EndTxn meanwhile: in progress; the other result too.
    assert_eq!(
        h.end(T, p, true).reply(),
        Some(ErrorCode::ConcurrentTransactions)
    );
    assert_eq!(
        h.end(T, p, false).reply(),
        Some(ErrorCode::ConcurrentTransactions)
    );
    let w =
        h.c.on_markers_complete(&m, &[tp("a", 0), tp("b", 0)], h.now)
            .unwrap();
    let v = value_of(&w).unwrap();
    assert_eq!(v.state, TxnState::CompleteCommit);
    assert!(v.partitions.is_empty());
    assert_eq!(h.write_ok(w), WriteResult::default());
    let meta = h.meta(T);
    assert_eq!((meta.state, meta.pending), (TxnState::CompleteCommit, None));
    assert!(meta.partitions.is_empty());

    // Retries after completion: the same result succeeds, the other is invalid.
    assert_eq!(h.end(T, p, true).reply(), Some(ErrorCode::None));
    assert_eq!(h.end(T, p, false).reply(), Some(ErrorCode::InvalidTxnState));
    // Empty (no transaction) cannot be ended.
    let p = h.init_ok(T);
    assert_eq!(h.end(T, p, true).reply(), Some(ErrorCode::InvalidTxnState));
    assert_eq!(h.end(T, p, false).reply(), Some(ErrorCode::InvalidTxnState));
    // And the next transaction starts from CompleteCommit / Empty.
    h.commit_txn(T, p, &[tp("z", 9)]);
}

#[test]
fn abort_and_its_retries() {
    let mut h = H::new();
    let p = h.init_ok(T);
    h.add_ok(T, p, &[tp("a", 0)]);
    let m = h.end_prepared(T, p, false);
    assert!(!m.commit);
    h.finish(&m);
    assert_eq!(h.meta(T).state, TxnState::CompleteAbort);
    assert_eq!(h.end(T, p, false).reply(), Some(ErrorCode::None));
    assert_eq!(h.end(T, p, true).reply(), Some(ErrorCode::InvalidTxnState));
    assert_eq!(
        h.end(T, pe(p.producer_id + 5, 0), true).reply(),
        Some(ErrorCode::InvalidProducerIdMapping)
    );
    assert_eq!(
        h.end("unknown", p, true).reply(),
        Some(ErrorCode::InvalidProducerIdMapping)
    );
}

#[test]
fn a_transaction_without_partitions_completes_without_markers() {
    let mut h = H::new();
    let p = h.init_ok(T);
    h.add_ok(T, p, &[]);
    assert_eq!(h.meta(T).state, TxnState::Ongoing);
    let w = h.end(T, p, true).write().unwrap();
    let r = h.write_ok(w);
    assert_eq!(r.reply, Some(Reply::EndTxn(ErrorCode::None)));
    let w = single_write(r.actions);
    assert_eq!(value_of(&w).unwrap().state, TxnState::CompleteCommit);
    h.write_ok(w);
    assert_eq!(h.meta(T).state, TxnState::CompleteCommit);
}

/// A second InitProducerId fences the first producer: its open transaction is aborted
/// with a bumped epoch (markers to exactly its partitions), and every later request of
/// the old epoch is refused. PRODUCER_FENCED is what Kafka answers to InitProducerId v4+,
/// AddPartitionsToTxn / AddOffsetsToTxn / EndTxn v2+; older versions get
/// INVALID_PRODUCER_EPOCH (fenced_error_for_version).
#[test]
fn a_new_producer_fences_the_old_one_and_aborts_its_transaction() {
    let mut h = H::new();
    let old = h.init_ok(T);
    h.add_ok(T, old, &[tp("a", 0), tp("b", 2)]);

    let w = h.init(T, None).write().unwrap();
    let v = value_of(&w).unwrap();
    // Kafka's PrepareEpochFence is a pending state only: the record is the abort.
    assert_eq!(
        (v.state, v.producer_epoch),
        (TxnState::PrepareAbort, old.producer_epoch + 1)
    );
    assert_eq!(v.partitions, [tp("a", 0), tp("b", 2)].into_iter().collect());
    let r = h.write_ok(w);
    // The new producer retries.
    assert_eq!(
        r.reply,
        Some(Reply::InitProducerId(Err(
            ErrorCode::ConcurrentTransactions
        )))
    );
    let m = single_markers(r.actions);
    assert!(!m.commit);
    assert_eq!(m.producer_epoch, old.producer_epoch + 1);
    assert_eq!(m.partitions, vec![tp("a", 0), tp("b", 2)]);

    // The old producer is fenced everywhere.
    assert_eq!(
        h.add(T, old, &[tp("c", 0)]).reply(),
        Some(ErrorCode::ProducerFenced)
    );
    assert_eq!(h.end(T, old, true).reply(), Some(ErrorCode::ProducerFenced));
    assert_eq!(
        h.end(T, old, false).reply(),
        Some(ErrorCode::ProducerFenced)
    );
    assert_eq!(
        h.c.verify_partition(T, old.producer_id, old.producer_epoch, "a", 0),
        Err(ErrorCode::ProducerFenced)
    );
    assert_eq!(
        fenced_error_for_version(TxnApi::EndTxn, 1, ErrorCode::ProducerFenced),
        ErrorCode::InvalidProducerEpoch
    );
    assert_eq!(
        fenced_error_for_version(TxnApi::EndTxn, 2, ErrorCode::ProducerFenced),
        ErrorCode::ProducerFenced
    );
    assert_eq!(
        fenced_error_for_version(TxnApi::InitProducerId, 3, ErrorCode::ProducerFenced),
        ErrorCode::InvalidProducerEpoch
    );
    assert_eq!(
        fenced_error_for_version(
            TxnApi::AddPartitionsToTxn,
            0,
            ErrorCode::ConcurrentTransactions
        ),
        ErrorCode::ConcurrentTransactions
    );

    // The retry while the abort's markers are out: still concurrent.
    assert_eq!(
        h.init(T, None).reply(),
        Some(Err(ErrorCode::ConcurrentTransactions))
    );
    h.finish(&m);
    assert_eq!(h.meta(T).state, TxnState::CompleteAbort);
    // Then the new producer gets the next epoch.
    let new = h.init_ok(T);
    assert_eq!(new, pe(old.producer_id, old.producer_epoch + 2));
    assert_eq!(h.end(T, old, true).reply(), Some(ErrorCode::ProducerFenced));
    h.commit_txn(T, new, &[tp("a", 0)]);
}

#[test]
fn a_failed_fence_leaves_the_old_producer_in_place() {
    let mut h = H::new();
    let old = h.init_ok(T);
    h.add_ok(T, old, &[tp("a", 0)]);
    let before = h.meta(T);
    let w = h.init(T, None).write().unwrap();
    let r = h.write_err(w, ErrorCode::NotEnoughReplicas);
    assert_eq!(
        r.reply,
        Some(Reply::InitProducerId(Err(
            ErrorCode::CoordinatorNotAvailable
        )))
    );
    assert!(r.actions.is_empty());
    assert_eq!(h.meta(T), before);
    // The retry fences with the same bumped epoch.
    let w = h.init(T, None).write().unwrap();
    assert_eq!(value_of(&w).unwrap().producer_epoch, old.producer_epoch + 1);
}

#[test]
fn failed_writes_leave_the_state_as_it_was() {
    let mut h = H::new();
    // A new id: forgotten again.
    let w = h.init(T, None).write().unwrap();
    let r = h.write_err(w, ErrorCode::NotLeaderOrFollower);
    assert_eq!(
        r.reply,
        Some(Reply::InitProducerId(Err(ErrorCode::NotCoordinator)))
    );
    assert!(h.c.metadata(T).is_none());

    let p = h.init_ok(T);
    h.add_ok(T, p, &[tp("a", 0)]);
    let before = h.meta(T);
    let w = h.add(T, p, &[tp("b", 0)]).write().unwrap();
    let r = h.write_err(w, ErrorCode::RequestTimedOut);
    assert_eq!(
        r.reply,
        Some(Reply::AddPartitions(ErrorCode::CoordinatorNotAvailable))
    );
    assert_eq!(h.meta(T), before);

    let w = h.end(T, p, true).write().unwrap();
    let r = h.write_err(w, ErrorCode::MessageTooLarge);
    assert_eq!(r.reply, Some(Reply::EndTxn(ErrorCode::UnknownServerError)));
    assert_eq!(h.meta(T), before);
    // The client may retry, even the other way.
    let m = h.end_prepared(T, p, false);
    assert_eq!(m.partitions, vec![tp("a", 0)]);

    // A failed Complete write keeps the transaction pending; tick retries it.
    let w = h.c.on_markers_complete(&m, &m.partitions, h.now).unwrap();
    let before = h.meta(T);
    assert_eq!(
        h.write_err(w, ErrorCode::NotEnoughReplicas),
        WriteResult::default()
    );
    assert_eq!(h.meta(T), before);
    assert_eq!(h.c.next_deadline(), Some(i64::MIN));
    let w = single_write(h.c.tick(h.now));
    assert_eq!(value_of(&w).unwrap().state, TxnState::CompleteAbort);
    assert!(h.c.tick(h.now).is_empty());
    h.write_ok(w);
    assert_eq!(h.meta(T).state, TxnState::CompleteAbort);

    assert_eq!(
        coordinator_error_for_append(ErrorCode::KafkaStorageError),
        ErrorCode::NotCoordinator
    );
    assert_eq!(
        coordinator_error_for_append(ErrorCode::InvalidRequest),
        ErrorCode::InvalidRequest
    );
    // Unknown or repeated tickets are ignored.
    assert_eq!(
        h.c.on_write_complete(WriteTicket(999_999), Ok(()), h.now),
        WriteResult::default()
    );
}

#[test]
fn kip_360_recovery_with_the_expected_producer() {
    let mut h = H::new();
    let p = h.init_ok(T);
    // The current producer recovers: bumped, and the old epoch remembered.
    let w = h.init(T, Some(p)).write().unwrap();
    let r = h.write_ok(w);
    let bumped = pe(p.producer_id, p.producer_epoch + 1);
    assert_eq!(r.reply, Some(Reply::InitProducerId(Ok(bumped))));
    assert_eq!(h.meta(T).last_producer_epoch, p.producer_epoch);
    // Its retry (the answer was lost) gets the same epoch again.
    let w = h.init(T, Some(p)).write().unwrap();
    assert_eq!(h.write_ok(w).reply, Some(Reply::InitProducerId(Ok(bumped))));
    // Any other epoch or producer id is fenced.
    for bad in [
        pe(p.producer_id, 7),
        pe(p.producer_id + 100, bumped.producer_epoch),
    ] {
        assert_eq!(
            h.init(T, Some(bad)).reply(),
            Some(Err(ErrorCode::ProducerFenced))
        );
    }
    // A plain InitProducerId (a new producer) forgets the last epoch.
    let newest = h.init_ok(T);
    assert_eq!(newest.producer_epoch, bumped.producer_epoch + 1);
    assert_eq!(h.meta(T).last_producer_epoch, -1);
    assert_eq!(
        h.init(T, Some(bumped)).reply(),
        Some(Err(ErrorCode::ProducerFenced))
    );
    // A new id accepts whatever the client held before (UNKNOWN_PRODUCER_ID recovery).
    let w = h.init("fresh", Some(pe(5, 5))).write().unwrap();
    assert!(
        matches!(h.write_ok(w).reply, Some(Reply::InitProducerId(Ok(x))) if x.producer_epoch == 0)
    );
}

/// A log holding `id` at `epoch` in state CompleteCommit, loaded into every partition.
fn at_epoch(epoch: i16) -> H {
    let mut h = H::new();
    let v = TxnLogValue {
        producer_id: 500,
        producer_epoch: epoch,
        transaction_timeout_ms: TIMEOUT,
        state: TxnState::CompleteCommit,
        partitions: Default::default(),
        last_update_timestamp_ms: h.now,
        start_timestamp_ms: h.now - 10,
        previous_producer_id: -1,
        next_producer_id: -1,
        client_transaction_version: 0,
    };
    let (k, val) = txn_record(T, &v);
    h.log.push((partition_for(T, PARTITIONS), k, Some(val)));
    assert!(h.reload().is_empty());
    h
}

#[test]
fn an_exhausted_epoch_rotates_the_producer_id() {
    let mut h = at_epoch(i16::MAX - 2);
    // 32765 is not exhausted: bumped to 32766, the last epoch a client may get.
    let p = h.init_ok(T);
    assert_eq!(p, pe(500, i16::MAX - 1));
    assert!(is_epoch_exhausted(p.producer_epoch));
    // Next: a new producer id at epoch 0.
    let w = h.init(T, Some(p)).write().unwrap();
    let r = h.write_ok(w);
    assert_eq!(r.reply, Some(Reply::InitProducerId(Ok(pe(1001, 0)))));
    assert_eq!(h.meta(T).last_producer_id, 500);
    // A KIP-360 retry with the old id and its exhausted epoch gets the new id again.
    let w = h.init(T, Some(p)).write().unwrap();
    assert_eq!(
        h.write_ok(w).reply,
        Some(Reply::InitProducerId(Ok(pe(1001, 0))))
    );
    assert_eq!(h.next_pid, 1001);
}

#[test]
fn fencing_an_exhausted_epoch_then_rotates() {
    let mut h = at_epoch(i16::MAX - 2);
    let p = h.init_ok(T);
    h.add_ok(T, p, &[tp("a", 0)]);
    // The fence takes the very last epoch.
    let w = h.init(T, None).write().unwrap();
    assert_eq!(value_of(&w).unwrap().producer_epoch, i16::MAX);
    let m = single_markers(h.write_ok(w).actions);
    assert_eq!(m.producer_epoch, i16::MAX);
    h.finish(&m);
    assert_eq!(h.init_ok(T), pe(1001, 0));
}

#[test]
fn verify_partition_answers_from_the_open_transaction() {
    let mut h = H::new();
    assert_eq!(
        h.c.verify_partition(T, 1, 0, "a", 0),
        Err(ErrorCode::InvalidProducerIdMapping)
    );
    let p = h.init_ok(T);
    let v = |h: &H, topic: &str, part| {
        h.c.verify_partition(T, p.producer_id, p.producer_epoch, topic, part)
    };
    assert_eq!(v(&h, "a", 0), Ok(false));
    h.add_ok(T, p, &[tp("a", 0)]);
    assert_eq!(v(&h, "a", 0), Ok(true));
    assert_eq!(v(&h, "a", 1), Ok(false));
    assert_eq!(
        h.c.verify_partition(T, p.producer_id + 1, p.producer_epoch, "a", 0),
        Err(ErrorCode::InvalidProducerIdMapping)
    );
    assert_eq!(
        h.c.verify_partition("", 0, 0, "a", 0),
        Err(ErrorCode::InvalidRequest)
    );
    let m = h.end_prepared(T, p, true);
    assert_eq!(v(&h, "a", 0), Err(ErrorCode::ConcurrentTransactions));
    h.finish(&m);
    assert_eq!(v(&h, "a", 0), Ok(false));
}
