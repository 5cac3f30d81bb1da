//! The coordinator's own work and its partitions: timeouts, expiry, ownership, loading
//! and failover, DescribeTransactions and ListTransactions.

mod common;
use bytes::Bytes;
use common::*;
use strata_proto::ErrorCode;
use strata_txn::*;

const T: &str = "txn";

#[test]
fn a_timed_out_transaction_is_aborted_with_a_bumped_epoch() {
    let mut h = H::new();
    let p = h.init_ok(T);
    h.add_ok(T, p, &[tp("a", 0), tp("b", 1)]);
    let start = h.now;
    let due = start + i64::from(TIMEOUT) + 1;
    assert_eq!(h.c.next_deadline(), Some(due));
    assert!(h.c.tick(due - 1).is_empty());
    h.now = due;
    let w = single_write(h.c.tick(h.now));
    let v = value_of(&w).unwrap();
    assert_eq!(
        (v.state, v.producer_epoch),
        (TxnState::PrepareAbort, p.producer_epoch + 1)
    );
    // Not twice while the abort is in flight.
    assert!(h.c.tick(h.now).is_empty());
    let r = h.write_ok(w);
    assert_eq!(r.reply, None);
    let m = single_markers(r.actions);
    assert_eq!((m.commit, m.partitions.len()), (false, 2));
    // The producer finds itself fenced.
    assert_eq!(h.end(T, p, true).reply(), Some(ErrorCode::ProducerFenced));
    h.finish(&m);
    assert_eq!(h.meta(T).state, TxnState::CompleteAbort);
    // A failed timeout abort leaves the transaction open, and is tried again.
    let p = h.init_ok(T);
    h.add_ok(T, p, &[tp("a", 0)]);
    h.now += i64::from(TIMEOUT) + 1;
    let before = h.meta(T);
    let w = single_write(h.c.tick(h.now));
    assert_eq!(
        h.write_err(w, ErrorCode::NotEnoughReplicas),
        WriteResult::default()
    );
    assert_eq!(h.meta(T), before);
    assert_eq!(
        single_write(h.c.tick(h.now)).partition,
        partition_for(T, PARTITIONS)
    );
}

#[test]
fn idle_transactional_ids_expire_with_a_tombstone() {
    let mut h = H::with_config(TxnConfig {
        transactional_id_expiration_ms: 1000,
        txn_state_partitions: PARTITIONS,
        ..TxnConfig::default()
    });
    let p = h.init_ok(T);
    h.commit_txn(T, p, &[tp("a", 0)]);
    let last = h.meta(T).last_update_ms;
    assert_eq!(h.c.next_deadline(), Some(last + 1000));
    assert!(h.c.tick(last + 999).is_empty());
    h.now = last + 1000;
    let w = single_write(h.c.tick(h.now));
    assert_eq!(w.value, None);
    assert_eq!(h.meta(T).pending, Some(TxnState::Dead));
    assert_eq!(
        h.init(T, None).reply(),
        Some(Err(ErrorCode::ConcurrentTransactions))
    );
    // A failed tombstone keeps the id; the next tick tries again.
    h.write_err(w, ErrorCode::RequestTimedOut);
    assert_eq!(h.meta(T).pending, None);
    let w = single_write(h.c.tick(h.now));
    assert_eq!(h.write_ok(w), WriteResult::default());
    assert!(h.c.metadata(T).is_none());
    assert_eq!(h.c.describe(T), Ok(None));
    // The id comes back with a new producer id.
    assert_eq!(h.init_ok(T), pe(1002, 0));
    // The reloaded log agrees.
    h.reload();
    assert_eq!(h.meta(T).producer_id, 1002);
    // Ongoing transactions never expire (they time out instead).
    h.add_ok(T, pe(1002, 0), &[tp("a", 0)]);
    h.now += 500;
    assert!(h.c.tick(h.now).is_empty());
}

#[test]
fn ids_of_partitions_not_led_here_answer_not_coordinator_or_loading() {
    let mut h = H::new();
    let part = partition_for(T, PARTITIONS);
    let p = h.init_ok(T);
    assert!(h.c.unload_partition(part));
    assert!(!h.c.unload_partition(part));
    assert_eq!(
        h.init(T, None).reply(),
        Some(Err(ErrorCode::NotCoordinator))
    );
    assert_eq!(h.add(T, p, &[]).reply(), Some(ErrorCode::NotCoordinator));
    assert_eq!(h.end(T, p, true).reply(), Some(ErrorCode::NotCoordinator));
    assert_eq!(h.c.describe(T), Err(ErrorCode::NotCoordinator));
    assert_eq!(
        h.c.verify_partition(T, p.producer_id, p.producer_epoch, "a", 0),
        Err(ErrorCode::NotCoordinator)
    );

    h.c.begin_load(part, 3);
    assert_eq!(
        h.c.partitions().iter().find(|x| x.0 == part),
        Some(&(part, 3, true))
    );
    assert_eq!(
        h.init(T, None).reply(),
        Some(Err(ErrorCode::CoordinatorLoadInProgress))
    );
    assert_eq!(
        h.end(T, p, true).reply(),
        Some(ErrorCode::CoordinatorLoadInProgress)
    );
    assert_eq!(h.c.describe(T), Err(ErrorCode::CoordinatorLoadInProgress));
    assert_eq!(
        h.c.list(&ListFilter::all(), h.now),
        Err(ErrorCode::CoordinatorLoadInProgress)
    );
    assert!(h.c.tick(h.now + 1_000_000_000).is_empty());
    assert_eq!(h.c.load(part, h.records_of(part)), Ok(1));
    assert!(h.c.resume(part, h.now).is_empty());
    assert!(h.c.resume(part, h.now).is_empty());
    assert_eq!(
        h.c.load(part, h.records_of(part)),
        Err(LoadError::NotLoading(part))
    );
    assert_eq!(h.init_ok(T), pe(p.producer_id, 1));
}

#[test]
fn a_new_coordinator_resumes_prepared_transactions_from_the_log() {
    let mut h = H::new();
    let ids = ["t1", "t2", "t3", "t4", "t5"];
    let mut ps = Vec::new();
    for id in ids {
        ps.push(h.init_ok(id));
    }
    // t1 committing (markers half done), t2 aborting, t3 Ongoing, t4 committed, t5 with
    // an AddPartitions write in flight.
    h.add_ok("t1", ps[0], &[tp("a", 0), tp("b", 0)]);
    let m1 = h.end_prepared("t1", ps[0], true);
    assert!(h.c.on_markers_complete(&m1, &[tp("a", 0)], h.now).is_none());
    h.add_ok("t2", ps[1], &[tp("c", 0)]);
    let _m2 = h.end_prepared("t2", ps[1], false);
    h.add_ok("t3", ps[2], &[tp("d", 0)]);
    h.commit_txn("t4", ps[3], &[tp("e", 0)]);
    let inflight = h.add("t5", ps[4], &[tp("f", 0)]).write().unwrap();

    let before: Vec<TxnLogValue> = ids.iter().map(|id| h.meta(id).log_value()).collect();
    let mut actions = h.reload();
    actions.sort_by_key(|a| match a {
        Action::SendMarkers(m) => m.transactional_id.clone(),
        Action::Write(w) => w.transactional_id.clone(),
    });
    // Every marker again (markers are idempotent), at the new coordinator epoch.
    let [Action::SendMarkers(n1), Action::SendMarkers(n2)] = &actions[..] else {
        panic!("{actions:?}");
    };
    assert_eq!((n1.transactional_id.as_str(), n1.commit), ("t1", true));
    assert_eq!(n1.partitions, vec![tp("a", 0), tp("b", 0)]);
    assert_eq!(n1.coordinator_epoch, 1);
    assert_eq!((n2.transactional_id.as_str(), n2.commit), ("t2", false));
    assert_eq!(n2.partitions, vec![tp("c", 0)]);
    // The state is what it was, except the write that never completed.
    for (id, b) in ids.iter().zip(&before) {
        assert_eq!(&h.meta(id).log_value(), b, "{id}");
    }
    assert_eq!(h.meta("t5").pending, None);

    // What the previous load left behind is ignored: its markers, its write.
    assert!(h.c.on_markers_complete(&m1, &[tp("b", 0)], h.now).is_none());
    let r = h.c.on_write_complete(inflight.ticket, Ok(()), h.now);
    assert_eq!(
        r.reply,
        Some(Reply::AddPartitions(ErrorCode::NotCoordinator))
    );
    assert_eq!(h.meta("t5").partitions, Default::default());
    h.c.check_invariants().expect("coordinator invariants");

    h.finish(n1);
    h.finish(n2);
    assert_eq!(h.meta("t1").state, TxnState::CompleteCommit);
    assert_eq!(h.meta("t2").state, TxnState::CompleteAbort);
    // The old producers carry on where they were.
    h.commit_txn("t3", ps[2], &[tp("d", 1)]);
    h.commit_txn("t5", ps[4], &[tp("f", 0)]);
}

#[test]
fn a_loaded_prepare_epoch_fence_is_aborted_with_a_bumped_epoch() {
    let mut h = H::new();
    let v = TxnLogValue {
        producer_id: 77,
        producer_epoch: 4,
        transaction_timeout_ms: TIMEOUT,
        state: TxnState::PrepareEpochFence,
        partitions: [tp("a", 0)].into_iter().collect(),
        last_update_timestamp_ms: h.now,
        start_timestamp_ms: h.now,
        previous_producer_id: -1,
        next_producer_id: -1,
        client_transaction_version: 0,
    };
    let (k, val) = txn_record(T, &v);
    h.log.push((partition_for(T, PARTITIONS), k, Some(val)));
    let w = single_write(h.reload());
    let t = value_of(&w).unwrap();
    assert_eq!((t.state, t.producer_epoch), (TxnState::PrepareAbort, 5));
    assert_eq!(
        h.end(T, pe(77, 4), true).reply(),
        Some(ErrorCode::ConcurrentTransactions)
    );
    let m = single_markers(h.write_ok(w).actions);
    assert_eq!(
        (m.producer_epoch, m.partitions.clone()),
        (5, vec![tp("a", 0)])
    );
    h.finish(&m);
    assert_eq!(
        h.end(T, pe(77, 4), false).reply(),
        Some(ErrorCode::ProducerFenced)
    );
}

#[test]
fn load_takes_the_latest_record_skips_unknown_keys_and_stops_at_garbage() {
    let mut h = H::new();
    let p = h.init_ok(T);
    h.commit_txn(T, p, &[tp("a", 0)]);
    let part = partition_for(T, PARTITIONS);
    let mut records = h.records_of(part);
    // Empty, Ongoing, PrepareCommit, CompleteCommit.
    assert_eq!(records.len(), 4);
    // A key version Kafka does not know is skipped.
    records.push((
        Bytes::from_static(&[0, 9, 1, 2]),
        Some(Bytes::from_static(b"x")),
    ));
    h.c.begin_load(part, 1);
    assert_eq!(h.c.load(part, records.clone()), Ok(4));
    h.c.resume(part, h.now);
    assert_eq!(h.meta(T).state, TxnState::CompleteCommit);
    // A tombstone removes the id.
    records.push((txn_key(T), None));
    h.c.begin_load(part, 2);
    assert_eq!(h.c.load(part, records.clone()), Ok(5));
    h.c.resume(part, h.now);
    assert!(h.c.metadata(T).is_none());
    // Garbage stops the load with its position; the partition stays loading.
    records.insert(1, (txn_key(T), Some(Bytes::from_static(&[0, 0, 1]))));
    let e = h.c.load_partition(part, 3, records, h.now).unwrap_err();
    assert_eq!(
        e,
        LoadError::Record {
            index: 1,
            error: DecodeError::Truncated
        }
    );
    assert_eq!(
        h.init(T, None).reply(),
        Some(Err(ErrorCode::CoordinatorLoadInProgress))
    );
}

#[test]
fn describe_and_list() {
    let mut h = H::new();
    assert_eq!(h.c.describe(""), Err(ErrorCode::InvalidRequest));
    assert_eq!(h.c.describe(T), Ok(None));
    let p = h.init_ok(T);
    h.add_ok(T, p, &[tp("b", 1), tp("a", 2), tp("a", 0)]);
    let start = h.now;
    let q = h.init_ok("other");
    h.commit_txn("other", q, &[tp("x", 0)]);
    assert_eq!(
        h.c.describe(T),
        Ok(Some(TxnDescription {
            transactional_id: T.to_string(),
            producer_id: p.producer_id,
            producer_epoch: p.producer_epoch,
            state: TxnState::Ongoing,
            transaction_timeout_ms: TIMEOUT,
            transaction_start_time_ms: start,
            topics: vec![("a".to_string(), vec![0, 2]), ("b".to_string(), vec![1])],
        }))
    );

    let names = |l: TxnListing| -> Vec<String> {
        l.transactions
            .into_iter()
            .map(|t| t.transactional_id)
            .collect()
    };
    let all = h.c.list(&ListFilter::all(), h.now).unwrap();
    assert_eq!(
        all.transactions[0],
        ListedTxn {
            transactional_id: "other".to_string(),
            producer_id: q.producer_id,
            state: TxnState::CompleteCommit,
        }
    );
    assert_eq!(names(all), vec!["other", T]);
    let f = ListFilter {
        states: vec!["Ongoing".to_string(), "Bogus".to_string()],
        ..ListFilter::all()
    };
    let l = h.c.list(&f, h.now).unwrap();
    assert_eq!(l.unknown_state_filters, vec!["Bogus".to_string()]);
    assert_eq!(names(l), vec![T]);
    let f = ListFilter {
        producer_ids: vec![q.producer_id],
        ..ListFilter::all()
    };
    assert_eq!(names(h.c.list(&f, h.now).unwrap()), vec!["other"]);
    // Running for longer than 10 s.
    let f = ListFilter {
        duration_ms: 10_000,
        ..ListFilter::all()
    };
    h.now = start + 10_000;
    assert!(names(h.c.list(&f, h.now).unwrap()).iter().all(|n| n != T));
    h.now += 1;
    assert!(names(h.c.list(&f, h.now).unwrap()).iter().any(|n| n == T));
}

#[test]
fn a_dead_record_is_taken_for_a_tombstone() {
    let mut h = H::new();
    let p = h.init_ok(T);
    let mut v = h.meta(T).log_value();
    v.state = TxnState::Dead;
    let (k, val) = txn_record(T, &v);
    h.log.push((partition_for(T, PARTITIONS), k, Some(val)));
    assert!(h.reload().is_empty());
    assert!(h.c.metadata(T).is_none());
    assert_ne!(h.init_ok(T).producer_id, p.producer_id);
}
