//! Transactional offset commits (KIP-98, KIP-447): pending until the marker, the newest
//! record wins, require_stable, expiry and deletion, and replaying `__consumer_offsets`
//! with transactional batches and markers giving what the live path gave.

mod common;
use std::collections::BTreeMap;

use bytes::{BufMut, Bytes, BytesMut};
use common::C;
use proptest::prelude::*;
use strata_group::*;
use strata_proto::ErrorCode;

const G: &str = "g";

fn cfg() -> GroupConfig {
    GroupConfig {
        initial_rebalance_delay_ms: 0,
        ..GroupConfig::default()
    }
}

fn off(offset: i64, ts: i64) -> CommittedOffset {
    CommittedOffset {
        offset,
        leader_epoch: -1,
        metadata: None,
        commit_timestamp_ms: ts,
    }
}

fn visible(c: &GroupCoordinator, group: &str) -> Vec<(String, i32, i64)> {
    c.offsets(group)
        .into_iter()
        .map(|(t, p, o)| (t, p, o.offset))
        .collect()
}

fn tp(t: &str, p: i32, o: i64) -> (String, i32, i64) {
    (t.to_string(), p, o)
}

fn outcomes(done: &[CompletedTxnOffset]) -> Vec<(String, i32, i64, TxnOffsetOutcome)> {
    done.iter()
        .map(|d| (d.topic.clone(), d.partition, d.offset.offset, d.outcome))
        .collect()
}

/// One entry of an offsets partition, as the loader would hand it over.
#[derive(Clone, Debug)]
enum Entry {
    /// A record of a non-transactional batch.
    Plain(Bytes, Option<Bytes>),
    /// A record of a transactional batch of this producer.
    Txn(i64, Bytes, Option<Bytes>),
    /// A control batch of this producer (COMMIT when true).
    Marker(i64, bool),
}

/// `__consumer_offsets` as the live path writes it: each entry at its index.
#[derive(Default, Debug, Clone)]
struct Log(Vec<Entry>);

impl Log {
    fn next(&self) -> i64 {
        self.0.len() as i64
    }

    fn plain(&mut self, g: &str, t: &str, p: i32, o: &CommittedOffset) -> i64 {
        let (k, v) = offset_commit_record(g, t, p, o);
        self.0.push(Entry::Plain(k, Some(v)));
        self.next() - 1
    }

    fn tombstone(&mut self, key: Bytes) -> i64 {
        self.0.push(Entry::Plain(key, None));
        self.next() - 1
    }

    /// One transactional batch: returns its base offset.
    fn txn(&mut self, pid: i64, g: &str, offsets: &[(String, i32, CommittedOffset)]) -> i64 {
        let base = self.next();
        for (t, p, o) in offsets {
            let (k, v) = offset_commit_record(g, t, *p, o);
            self.0.push(Entry::Txn(pid, k, Some(v)));
        }
        base
    }

    fn marker(&mut self, pid: i64, commit: bool) -> i64 {
        self.0.push(Entry::Marker(pid, commit));
        self.next() - 1
    }

    /// A fresh coordinator loaded from this log.
    fn replay(&self, now: i64) -> GroupCoordinator {
        let mut c = GroupCoordinator::new(cfg());
        for (i, e) in self.0.iter().enumerate() {
            let at = i as i64;
            match e {
                Entry::Plain(k, v) => c.replay(k, v.as_deref()).expect("replay"),
                Entry::Txn(pid, k, v) => c.replay_txn(*pid, k, v.as_deref(), at).expect("replay"),
                Entry::Marker(pid, commit) => c.replay_marker(*pid, *commit, at),
            }
        }
        c.loaded(now);
        c.check_invariants().expect("invariants after replay");
        c
    }
}

/// What a coordinator shows of a group: visible offsets and pending ones.
type Shown = (
    Vec<(String, i32, CommittedOffset)>,
    Vec<(i64, String, i32, CommittedOffset)>,
);

fn shown(c: &GroupCoordinator, group: &str) -> Shown {
    (c.offsets(group), c.pending_txn_offsets(group))
}

/// A live coordinator and the log it wrote, kept in step as the broker would.
struct Live {
    c: GroupCoordinator,
    log: Log,
}

impl Live {
    fn new() -> Self {
        Live {
            c: GroupCoordinator::new(cfg()),
            log: Log::default(),
        }
    }

    fn commit(&mut self, g: &str, t: &str, p: i32, value: i64) {
        let o = off(value, self.log.next());
        let at = self.log.plain(g, t, p, &o);
        assert!(self.c.commit_at(g, t, p, o, at));
    }

    fn txn(&mut self, pid: i64, g: &str, offsets: &[(&str, i32, i64)]) {
        let ts = self.log.next();
        let offsets: Vec<_> = offsets
            .iter()
            .map(|(t, p, v)| (t.to_string(), *p, off(*v, ts)))
            .collect();
        let base = self.log.txn(pid, g, &offsets);
        self.c.prepare_txn_commit(g, pid, base, offsets);
    }

    fn marker(&mut self, pid: i64, commit: bool) -> Vec<CompletedTxnOffset> {
        let at = self.log.marker(pid, commit);
        self.c.complete_txn(pid, commit, at)
    }
}

#[test]
fn commit_marker_makes_offsets_visible_and_abort_drops_them() {
    let mut c = GroupCoordinator::new(cfg());
    assert_eq!(c.validate_txn_commit(0, G, -1, "", None), ErrorCode::None);
    assert_eq!(c.describe(G).expect("created").state, "Empty");
    c.prepare_txn_commit(
        G,
        7,
        10,
        vec![("t".into(), 0, off(5, 1)), ("t".into(), 1, off(6, 1))],
    );
    assert_eq!(c.committed(G, "t", 0), None, "pending is not visible");
    assert!(c.offsets(G).is_empty());
    assert!(c.has_pending_txn_offsets(G, "t", 0));
    assert_eq!(
        c.pending_txn_offsets(G),
        vec![(7, "t".into(), 0, off(5, 1)), (7, "t".into(), 1, off(6, 1))]
    );
    c.check_invariants().unwrap();

    // Another producer's marker changes nothing.
    assert!(c.complete_txn(8, true, 11).is_empty());
    assert!(c.has_pending_txn_offsets(G, "t", 0));

    let done = c.complete_txn(7, true, 12);
    assert_eq!(
        outcomes(&done),
        vec![
            ("t".into(), 0, 5, TxnOffsetOutcome::Committed),
            ("t".into(), 1, 6, TxnOffsetOutcome::Committed)
        ]
    );
    assert_eq!(done[0].group_id, G);
    assert_eq!(done[0].record_offset, 10);
    assert_eq!(c.committed(G, "t", 0), Some(off(5, 1)));
    assert!(!c.has_pending_txn_offsets(G, "t", 0));
    assert!(c.pending_txn_offsets(G).is_empty());

    // The next transaction of the same producer aborts: nothing changes.
    c.prepare_txn_commit(G, 7, 13, vec![("t".into(), 0, off(50, 2))]);
    assert!(c.has_pending_txn_offsets(G, "t", 0));
    let done = c.complete_txn(7, false, 14);
    assert_eq!(
        outcomes(&done),
        vec![("t".into(), 0, 50, TxnOffsetOutcome::Aborted)]
    );
    assert_eq!(c.committed(G, "t", 0), Some(off(5, 1)));
    assert!(!c.has_pending_txn_offsets(G, "t", 0));
    // A second marker for the ended transaction is a no-op.
    assert!(c.complete_txn(7, true, 15).is_empty());
    c.check_invariants().unwrap();
}

#[test]
fn producers_pending_offsets_stay_separate_and_a_marker_covers_every_group() {
    let mut live = Live::new();
    live.txn(1, G, &[("t", 0, 5)]);
    live.txn(2, G, &[("t", 0, 6), ("t", 1, 7)]);
    live.txn(1, "other", &[("u", 3, 8)]);
    assert_eq!(live.c.pending_txn_offsets(G).len(), 3);

    let done = live.marker(2, false);
    assert_eq!(done.len(), 2);
    assert!(done.iter().all(|d| d.outcome == TxnOffsetOutcome::Aborted));
    assert!(
        live.c.has_pending_txn_offsets(G, "t", 0),
        "producer 1's stays"
    );
    assert!(!live.c.has_pending_txn_offsets(G, "t", 1));
    assert!(visible(&live.c, G).is_empty());

    let done = live.marker(1, true);
    let mut groups: Vec<&str> = done.iter().map(|d| d.group_id.as_str()).collect();
    groups.sort();
    assert_eq!(groups, vec!["g", "other"]);
    assert_eq!(visible(&live.c, G), vec![tp("t", 0, 5)]);
    assert_eq!(visible(&live.c, "other"), vec![tp("u", 3, 8)]);
    live.c.check_invariants().unwrap();
    assert_eq!(shown(&live.log.replay(0), G), shown(&live.c, G));
}

/// A plain commit written after a transactional one's record stays when that
/// transaction commits later; a transactional commit written after a plain one wins.
#[test]
fn the_newer_record_wins_between_plain_and_transactional_commits() {
    // Transactional record, then a plain commit, then the COMMIT marker.
    let mut live = Live::new();
    live.txn(1, G, &[("t", 0, 5), ("t", 1, 5)]);
    live.commit(G, "t", 0, 8);
    let done = live.marker(1, true);
    assert_eq!(
        outcomes(&done),
        vec![
            ("t".into(), 0, 5, TxnOffsetOutcome::Superseded),
            ("t".into(), 1, 5, TxnOffsetOutcome::Committed)
        ]
    );
    assert_eq!(visible(&live.c, G), vec![tp("t", 0, 8), tp("t", 1, 5)]);
    assert_eq!(shown(&live.log.replay(0), G), shown(&live.c, G));

    // Plain commit, then the transactional record (a lower offset value), then COMMIT:
    // the newer record wins, whatever the offsets say.
    let mut live = Live::new();
    live.commit(G, "t", 0, 8);
    live.txn(1, G, &[("t", 0, 5)]);
    assert_eq!(visible(&live.c, G), vec![tp("t", 0, 8)]);
    let done = live.marker(1, true);
    assert_eq!(
        outcomes(&done),
        vec![("t".into(), 0, 5, TxnOffsetOutcome::Committed)]
    );
    assert_eq!(visible(&live.c, G), vec![tp("t", 0, 5)]);
    assert_eq!(shown(&live.log.replay(0), G), shown(&live.c, G));

    // Two transactions: the later record committed first keeps its offset when the
    // earlier one commits.
    let mut live = Live::new();
    live.txn(1, G, &[("t", 0, 5)]);
    live.txn(2, G, &[("t", 0, 6)]);
    live.marker(2, true);
    assert_eq!(visible(&live.c, G), vec![tp("t", 0, 6)]);
    let done = live.marker(1, true);
    assert_eq!(done[0].outcome, TxnOffsetOutcome::Superseded);
    assert_eq!(visible(&live.c, G), vec![tp("t", 0, 6)]);
    assert_eq!(shown(&live.log.replay(0), G), shown(&live.c, G));
}

/// `commit` (no record offset) counts as the newest record so far, so a broker that does
/// not pass record offsets for plain commits gets the same answers as with `commit_at`.
#[test]
fn a_commit_without_record_offset_counts_as_the_newest() {
    let mut c = GroupCoordinator::new(cfg());
    c.commit(G, "t", 0, off(1, 0));
    c.prepare_txn_commit(G, 1, 10, vec![("t".into(), 0, off(5, 0))]);
    c.commit(G, "t", 0, off(8, 0));
    assert_eq!(
        c.complete_txn(1, true, 12)[0].outcome,
        TxnOffsetOutcome::Superseded
    );
    assert_eq!(c.committed(G, "t", 0).map(|o| o.offset), Some(8));
    // A plain commit before the transactional record loses to it.
    c.commit(G, "t", 1, off(8, 0));
    c.prepare_txn_commit(G, 1, 13, vec![("t".into(), 1, off(5, 0))]);
    c.complete_txn(1, true, 14);
    assert_eq!(c.committed(G, "t", 1).map(|o| o.offset), Some(5));
    // A plain commit after a committed transaction replaces it.
    c.commit(G, "t", 1, off(9, 0));
    assert_eq!(c.committed(G, "t", 1).map(|o| o.offset), Some(9));
    // commit_at with an older record than the visible one's is ignored.
    assert!(!c.commit_at(G, "t", 1, off(3, 0), 11));
    assert_eq!(c.committed(G, "t", 1).map(|o| o.offset), Some(9));
    assert!(c.commit_at(G, "t", 1, off(4, 0), 20));
    assert_eq!(c.committed(G, "t", 1).map(|o| o.offset), Some(4));
    c.check_invariants().unwrap();
}

/// A marker ends only the records written before it: a later transaction of the same
/// producer (whose record was applied before the earlier marker) stays pending.
#[test]
fn a_marker_ends_only_records_before_it() {
    let mut c = GroupCoordinator::new(cfg());
    c.prepare_txn_commit(G, 1, 10, vec![("t".into(), 0, off(5, 0))]);
    c.prepare_txn_commit(G, 1, 12, vec![("t".into(), 1, off(6, 0))]);
    let done = c.complete_txn(1, true, 11);
    assert_eq!(
        outcomes(&done),
        vec![("t".into(), 0, 5, TxnOffsetOutcome::Committed)]
    );
    assert!(c.has_pending_txn_offsets(G, "t", 1));
    c.complete_txn(1, false, 13);
    assert!(!c.has_pending_txn_offsets(G, "t", 1));
    assert_eq!(visible(&c, G), vec![tp("t", 0, 5)]);
}

/// KIP-447: OffsetFetch with require_stable answers UNSTABLE_OFFSET_COMMIT exactly for
/// the partitions a transaction holds.
#[test]
fn require_stable_sees_pending_partitions() {
    let mut live = Live::new();
    live.commit(G, "t", 0, 1);
    live.txn(1, G, &[("t", 0, 2), ("t", 2, 3)]);
    let unstable = |c: &GroupCoordinator| -> Vec<(&str, &str, i32)> {
        let mut v = Vec::new();
        for g in [G, "other"] {
            for t in ["t", "u"] {
                for p in 0..3 {
                    if c.has_pending_txn_offsets(g, t, p) {
                        v.push((g, t, p));
                    }
                }
            }
        }
        v
    };
    assert_eq!(unstable(&live.c), vec![(G, "t", 0), (G, "t", 2)]);
    // The committed offset of a pending partition is still the old one.
    assert_eq!(live.c.committed(G, "t", 0).map(|o| o.offset), Some(1));
    // A reload keeps them pending.
    assert_eq!(
        unstable(&live.log.replay(0)),
        vec![(G, "t", 0), (G, "t", 2)]
    );
    live.marker(1, true);
    assert!(unstable(&live.c).is_empty());
    assert!(unstable(&live.log.replay(0)).is_empty());
}

/// Replaying a log with transactional batches and markers (in either order, with one
/// transaction still open at the end) gives what the live path gave; the open
/// transaction's marker then arrives through `complete_txn`.
#[test]
fn replay_matches_the_live_path() {
    let mut live = Live::new();
    live.commit(G, "t", 0, 1);
    live.txn(1, G, &[("t", 0, 10), ("t", 1, 11)]);
    live.txn(2, G, &[("t", 1, 20), ("t", 2, 21)]);
    live.commit(G, "t", 1, 2);
    live.txn(3, G, &[("t", 3, 30)]);
    live.marker(2, true); // later producer's marker first
    live.marker(1, true);
    live.txn(1, "other", &[("t", 0, 12)]);
    live.marker(1, false);
    live.txn(2, G, &[("t", 0, 22)]); // open at the end
    live.c.check_invariants().unwrap();
    assert_eq!(
        visible(&live.c, G),
        vec![tp("t", 0, 10), tp("t", 1, 2), tp("t", 2, 21)]
    );

    let mut loaded = live.log.replay(1_000);
    for g in [G, "other"] {
        assert_eq!(shown(&loaded, g), shown(&live.c, g), "group {g}");
    }
    assert_eq!(loaded.list_groups(), live.c.list_groups());
    assert!(loaded.has_pending_txn_offsets(G, "t", 0));
    assert!(
        loaded.has_pending_txn_offsets(G, "t", 3),
        "producer 3 never ended"
    );

    // The open transactions end after the load, on both.
    let at = live.log.next();
    let on_loaded = loaded.complete_txn(2, true, at);
    let on_live = live.marker(2, true);
    assert_eq!(on_loaded, on_live);
    assert_eq!(visible(&loaded, G)[0], tp("t", 0, 22));
    let at = live.log.next();
    loaded.complete_txn(3, false, at);
    live.marker(3, false);
    assert_eq!(shown(&loaded, G), shown(&live.c, G));
    assert_eq!(shown(&live.log.replay(0), G), shown(&live.c, G));
    loaded.check_invariants().unwrap();
}

/// The records of a transactional batch are offset commits like any other: the same
/// bytes replayed with `replay_txn` stay pending, with `replay` they are visible.
#[test]
fn replay_txn_holds_offset_records_and_passes_the_rest_through() {
    let (k, v) = offset_commit_record(G, "t", 0, &off(5, 0));
    let mut c = GroupCoordinator::new(cfg());
    c.replay_txn(4, &k, Some(&v), 3).unwrap();
    assert_eq!(c.committed(G, "t", 0), None);
    assert_eq!(
        c.pending_txn_offsets(G),
        vec![(4, "t".into(), 0, off(5, 0))]
    );
    // A tombstone drops the partition's pending offsets (Kafka's replay).
    c.replay_txn(4, &offset_tombstone(G, "t", 0), None, 4)
        .unwrap();
    assert!(c.pending_txn_offsets(G).is_empty());
    c.replay_marker(4, true, 5);
    assert_eq!(c.committed(G, "t", 0), None);
    // No producer: a plain commit.
    c.replay_txn(-1, &k, Some(&v), 6).unwrap();
    assert_eq!(c.committed(G, "t", 0), Some(off(5, 0)));
    // Bad bytes are an error, as for `replay`.
    assert!(c.replay_txn(4, &k, Some(&[0, 3, 1]), 7).is_err());
    c.check_invariants().unwrap();
}

#[test]
fn expiry_skips_partitions_with_pending_transactional_offsets() {
    const RETENTION: i64 = 10_000;
    let mut c = GroupCoordinator::new(cfg());
    assert_eq!(c.validate_commit(0, "solo", -1, "", None), ErrorCode::None);
    c.commit("solo", "t", 0, off(1, 0));
    c.commit("solo", "t", 1, off(2, 0));
    c.prepare_txn_commit("solo", 9, 5, vec![("t".into(), 1, off(3, 1))]);
    let expired = c.expired_offsets(RETENTION, RETENTION);
    assert_eq!(
        expired,
        vec![ExpiredOffsets {
            group_id: "solo".into(),
            offsets: vec![("t".into(), 0, 0)],
            group: false,
        }]
    );
    c.remove_expired(&expired);
    assert_eq!(visible(&c, "solo"), vec![tp("t", 1, 2)]);

    // A group holding only pending offsets does not go either.
    c.prepare_txn_commit("only-pending", 9, 6, vec![("t".into(), 0, off(4, 1))]);
    assert!(
        c.expired_offsets(RETENTION * 10, RETENTION)
            .iter()
            .all(|e| e.group_id != "only-pending")
    );
    // Even if the expiry was computed before the transactional commit arrived.
    c.commit("late", "t", 0, off(1, 0));
    let expired = c.expired_offsets(RETENTION * 10, RETENTION);
    let late: Vec<_> = expired
        .iter()
        .filter(|e| e.group_id == "late")
        .cloned()
        .collect();
    assert!(late[0].group);
    c.prepare_txn_commit("late", 9, 7, vec![("t".into(), 1, off(2, 1))]);
    c.remove_expired(&late);
    assert!(c.offsets("late").is_empty());
    assert!(c.describe("late").is_some(), "kept for its pending offset");

    // Once the transaction commits, its offsets are there and expire on their own clock.
    c.complete_txn(9, true, 8);
    assert_eq!(visible(&c, "solo"), vec![tp("t", 1, 3)]);
    assert_eq!(visible(&c, "late"), vec![tp("t", 1, 2)]);
    let expired = c.expired_offsets(RETENTION * 10, RETENTION);
    assert_eq!(expired.len(), 3);
    assert!(expired.iter().all(|e| e.group));
    c.check_invariants().unwrap();
}

/// OffsetDelete drops a partition's pending offsets; DeleteGroups deletes a group with
/// pending offsets (only members keep a group) and drops them, and a reload agrees.
#[test]
fn deleting_offsets_or_the_group_drops_pending_offsets() {
    let mut live = Live::new();
    live.commit(G, "t", 0, 1);
    live.txn(1, G, &[("t", 0, 2), ("t", 1, 3)]);
    let (code, per) = live.c.delete_offsets(G, &[("t".into(), 1)]);
    assert_eq!(code, ErrorCode::None);
    assert_eq!(per, vec![("t".into(), 1, ErrorCode::None)]);
    live.log.tombstone(offset_tombstone(G, "t", 1));
    assert!(!live.c.has_pending_txn_offsets(G, "t", 1));
    assert!(live.c.has_pending_txn_offsets(G, "t", 0));
    assert_eq!(shown(&live.log.replay(0), G), shown(&live.c, G));

    // DeleteGroups as the broker does it: tombstones for the visible offsets, the
    // group's tombstone, then delete_groups.
    for (t, p, _) in live.c.offsets(G) {
        live.log.tombstone(offset_tombstone(G, &t, p));
    }
    live.log.tombstone(group_tombstone(G));
    assert_eq!(
        live.c.delete_groups(&[G.to_string()]),
        vec![(G.to_string(), ErrorCode::None)]
    );
    assert!(live.c.describe(G).is_none());
    assert!(!live.c.has_pending_txn_offsets(G, "t", 0));
    // The transaction commits afterwards: nothing comes back.
    assert!(live.marker(1, true).is_empty());
    assert!(live.c.describe(G).is_none());
    let loaded = live.log.replay(0);
    assert!(loaded.describe(G).is_none());
    assert_eq!(shown(&loaded, G), shown(&live.c, G));
}

// --- TxnOffsetCommit validation -------------------------------------------------------

fn join_req(member_id: &str, instance: Option<&str>) -> JoinGroup {
    JoinGroup {
        group_id: G.into(),
        member_id: member_id.into(),
        group_instance_id: instance.map(str::to_string),
        protocol_type: "consumer".into(),
        protocols: vec![("range".into(), subscription(&["t"]))],
        session_timeout_ms: 10_000,
        rebalance_timeout_ms: 30_000,
        client_id: "c".into(),
        client_host: "/127.0.0.1".into(),
        require_known_member_id: false,
    }
}

fn subscription(topics: &[&str]) -> Bytes {
    let mut b = BytesMut::new();
    b.put_i16(0);
    b.put_i32(topics.len() as i32);
    for t in topics {
        b.put_i16(t.len() as i16);
        b.put_slice(t.as_bytes());
    }
    b.put_i32(-1);
    b.freeze()
}

#[test]
fn validate_txn_commit_rules() {
    let mut c = C::new(cfg());
    assert_eq!(
        c.validate_txn_commit(0, "", -1, "", None),
        ErrorCode::InvalidGroupId
    );
    // Unknown group: created Empty without group information, else ILLEGAL_GENERATION.
    assert_eq!(
        c.validate_txn_commit(0, "other", 3, "m", None),
        ErrorCode::IllegalGeneration
    );
    assert!(c.describe("other").is_none());

    // A static member of generation 1.
    let r = c
        .join(0, 1, join_req("", Some("inst")))
        .expect("completes at once");
    let a = r.member_id.clone();
    assert_eq!(r.generation_id, 1);
    assert_eq!(c.describe(G).unwrap().state, "CompletingRebalance");
    // A rebalance in progress is no error for a transactional commit (unlike
    // OffsetCommit's REBALANCE_IN_PROGRESS).
    assert_eq!(
        c.validate_commit(1, G, 1, &a, Some("inst")),
        ErrorCode::RebalanceInProgress
    );
    assert_eq!(
        c.validate_txn_commit(1, G, 1, &a, Some("inst")),
        ErrorCode::None
    );
    assert_eq!(
        c.validate_txn_commit(1, G, 0, &a, Some("inst")),
        ErrorCode::IllegalGeneration
    );
    assert_eq!(
        c.validate_txn_commit(1, G, 1, "ghost", None),
        ErrorCode::UnknownMemberId
    );
    assert_eq!(
        c.validate_txn_commit(1, G, 1, "ghost", Some("inst")),
        ErrorCode::FencedInstanceId
    );
    // Without group information a transactional commit is accepted even though the
    // group has members (OffsetCommit refuses it).
    assert_eq!(
        c.validate_commit(1, G, -1, "", None),
        ErrorCode::UnknownMemberId
    );
    assert_eq!(c.validate_txn_commit(1, G, -1, "", None), ErrorCode::None);

    // A transactional commit is no heartbeat: the member's session (10 s from its
    // JoinGroup answer) still runs out.
    for now in (1_000..10_000).step_by(1_000) {
        assert_eq!(
            c.validate_txn_commit(now, G, 1, &a, Some("inst")),
            ErrorCode::None,
            "at {now}"
        );
    }
    c.tick(10_000);
    assert_eq!(
        c.validate_txn_commit(10_001, G, 1, &a, Some("inst")),
        ErrorCode::UnknownMemberId,
        "the session expired"
    );
    c.take_completions();
    c.check_invariants().unwrap();
}

// --- Model ----------------------------------------------------------------------------

const GROUPS: [&str; 2] = ["a", "b"];
const PRODUCERS: i64 = 3;
const PARTITIONS: i32 = 3;

#[derive(Clone, Debug)]
enum Op {
    /// A plain OffsetCommit; `explicit`: applied with `commit_at`, else `commit`.
    Plain {
        group: usize,
        partition: i32,
        value: i64,
        explicit: bool,
    },
    /// One TxnOffsetCommit (one transactional batch).
    Txn {
        producer: i64,
        group: usize,
        offsets: Vec<(i32, i64)>,
    },
    /// The transaction's marker.
    Marker { producer: i64, commit: bool },
    /// OffsetDelete of one partition.
    Delete { group: usize, partition: i32 },
    /// DeleteGroups.
    DeleteGroup { group: usize },
    /// The coordinator moves: the live state is replaced by a load of the log.
    Reload,
}

fn op() -> impl Strategy<Value = Op> {
    let group = 0..GROUPS.len();
    prop_oneof![
        4 => (group.clone(), 0..PARTITIONS, 0i64..1000, any::<bool>()).prop_map(
            |(group, partition, value, explicit)| Op::Plain { group, partition, value, explicit }
        ),
        5 => (0..PRODUCERS, group.clone(), prop::collection::vec((0..PARTITIONS, 0i64..1000), 1..4))
            .prop_map(|(producer, group, offsets)| Op::Txn { producer, group, offsets }),
        4 => (0..PRODUCERS, prop::bool::weighted(0.7))
            .prop_map(|(producer, commit)| Op::Marker { producer, commit }),
        1 => (group.clone(), 0..PARTITIONS).prop_map(|(group, partition)| Op::Delete { group, partition }),
        1 => group.prop_map(|group| Op::DeleteGroup { group }),
        1 => Just(Op::Reload),
    ]
}

/// What the log says, read declaratively: per (group, topic, partition), among the
/// records after the last tombstone of the key or of its group, the plain commits and
/// the transactional ones whose producer's next marker is a COMMIT, the one at the
/// highest offset is visible; transactional ones with no marker after them are pending.
fn reference(log: &Log) -> BTreeMap<(String, String, i32), (Option<i64>, bool)> {
    let decode = |k: &Bytes, v: &Option<Bytes>| decode_record(k, v.as_deref()).expect("decodes");
    let mut keys = BTreeMap::new();
    for e in &log.0 {
        let (Entry::Plain(k, v) | Entry::Txn(_, k, v)) = e else {
            continue;
        };
        if let ConsumerOffsetsRecord::Offset {
            group_id,
            topic,
            partition,
            ..
        } = decode(k, v)
        {
            keys.insert((group_id, topic, partition), (None, false));
        }
    }
    for ((g, t, p), (shown, pending)) in keys.iter_mut() {
        let deleted_at = |e: &Entry| -> bool {
            let Entry::Plain(k, None) = e else {
                return false;
            };
            match decode(k, &None) {
                ConsumerOffsetsRecord::Offset {
                    group_id,
                    topic,
                    partition,
                    ..
                } => group_id == *g && topic == *t && partition == *p,
                ConsumerOffsetsRecord::Group { group_id, .. } => &group_id == g,
            }
        };
        let from = log.0.iter().rposition(deleted_at).map_or(0, |i| i + 1);
        let mut best: Option<(usize, i64)> = None;
        for (i, e) in log.0.iter().enumerate().skip(from) {
            let (k, v, producer) = match e {
                Entry::Plain(k, v) => (k, v, None),
                Entry::Txn(pid, k, v) => (k, v, Some(*pid)),
                Entry::Marker(..) => continue,
            };
            let ConsumerOffsetsRecord::Offset {
                group_id,
                topic,
                partition,
                value: Some(o),
            } = decode(k, v)
            else {
                continue;
            };
            if group_id != *g || topic != *t || partition != *p {
                continue;
            }
            let counts = match producer {
                None => true,
                Some(pid) => {
                    let marker = log.0[i + 1..].iter().find_map(|e| match e {
                        Entry::Marker(m, commit) if *m == pid => Some(*commit),
                        _ => None,
                    });
                    match marker {
                        None => {
                            *pending = true;
                            false
                        }
                        Some(commit) => commit,
                    }
                }
            };
            if counts {
                best = Some((i, o.offset));
            }
        }
        *shown = best.map(|(_, o)| o);
    }
    keys
}

fn check(c: &GroupCoordinator, log: &Log) -> Result<(), TestCaseError> {
    c.check_invariants().map_err(TestCaseError::fail)?;
    let model = reference(log);
    for g in GROUPS {
        let want: Vec<(String, i32, i64)> = model
            .iter()
            .filter(|((mg, _, _), (o, _))| mg == g && o.is_some())
            .map(|((_, t, p), (o, _))| (t.clone(), *p, o.unwrap_or_default()))
            .collect();
        prop_assert_eq!(visible(c, g), want, "visible offsets of {}", g);
        for p in 0..PARTITIONS {
            let pending = model
                .get(&(g.to_string(), "t".to_string(), p))
                .is_some_and(|(_, pending)| *pending);
            prop_assert_eq!(
                c.has_pending_txn_offsets(g, "t", p),
                pending,
                "pending {}/{}",
                g,
                p
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Random plain commits, transactional commits of three producers, markers,
    /// deletions and coordinator moves: the live state always equals the reference read
    /// of the log, and replaying the log gives the live state.
    #[test]
    fn live_state_equals_the_log_and_its_replay(ops in prop::collection::vec(op(), 1..60)) {
        let mut live = Live::new();
        for op in ops {
            match op {
                Op::Plain { group, partition, value, explicit } => {
                    let g = GROUPS[group];
                    let o = off(value, live.log.next());
                    let at = live.log.plain(g, "t", partition, &o);
                    if explicit {
                        prop_assert!(live.c.commit_at(g, "t", partition, o, at));
                    } else {
                        live.c.commit(g, "t", partition, o);
                    }
                }
                Op::Txn { producer, group, offsets } => {
                    let offsets: Vec<(&str, i32, i64)> =
                        offsets.iter().map(|(p, v)| ("t", *p, *v)).collect();
                    live.txn(producer, GROUPS[group], &offsets);
                }
                Op::Marker { producer, commit } => {
                    let done = live.marker(producer, commit);
                    let aborted = done
                        .iter()
                        .all(|d| (d.outcome == TxnOffsetOutcome::Aborted) != commit);
                    prop_assert!(aborted, "outcomes {:?}", done);
                }
                Op::Delete { group, partition } => {
                    let g = GROUPS[group];
                    if live.c.describe(g).is_some() {
                        let (code, per) = live.c.delete_offsets(g, &[("t".into(), partition)]);
                        prop_assert_eq!(code, ErrorCode::None);
                        prop_assert_eq!(per[0].2, ErrorCode::None);
                        live.log.tombstone(offset_tombstone(g, "t", partition));
                    }
                }
                Op::DeleteGroup { group } => {
                    let g = GROUPS[group];
                    if live.c.describe(g).is_some() {
                        for (t, p, _) in live.c.offsets(g) {
                            live.log.tombstone(offset_tombstone(g, &t, p));
                        }
                        live.log.tombstone(group_tombstone(g));
                        let r = live.c.delete_groups(&[g.to_string()]);
                        prop_assert_eq!(r[0].1, ErrorCode::None);
                    }
                }
                Op::Reload => live.c = live.log.replay(0),
            }
            check(&live.c, &live.log)?;
        }
        let loaded = live.log.replay(0);
        for g in GROUPS {
            prop_assert_eq!(shown(&loaded, g), shown(&live.c, g), "group {}", g);
        }
        prop_assert_eq!(loaded.list_groups(), live.c.list_groups());
    }
}
