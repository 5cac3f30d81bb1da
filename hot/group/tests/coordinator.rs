//! Behaviour a Kafka client relies on, driven through the public API.

mod common;
use bytes::{BufMut, Bytes, BytesMut};
use common::C;
use strata_group::*;
use strata_proto::ErrorCode;

const G: &str = "g";

fn cfg(delay: i64) -> GroupConfig {
    GroupConfig {
        initial_rebalance_delay_ms: delay,
        ..GroupConfig::default()
    }
}

/// A ConsumerProtocolSubscription v0: version, topics, user_data (null).
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

fn join_req(member_id: &str, client: &str) -> JoinGroup {
    JoinGroup {
        group_id: G.into(),
        member_id: member_id.into(),
        group_instance_id: None,
        protocol_type: "consumer".into(),
        protocols: vec![("range".into(), subscription(&["t"]))],
        session_timeout_ms: 10_000,
        rebalance_timeout_ms: 30_000,
        client_id: client.into(),
        client_host: "/127.0.0.1".into(),
        require_known_member_id: false,
    }
}

fn static_req(member_id: &str, instance: &str) -> JoinGroup {
    JoinGroup {
        group_instance_id: Some(instance.into()),
        ..join_req(member_id, instance)
    }
}

fn sync_req(generation_id: i32, member_id: &str, assignments: &[(&str, &str)]) -> SyncGroup {
    SyncGroup {
        group_id: G.into(),
        generation_id,
        member_id: member_id.into(),
        group_instance_id: None,
        protocol_type: Some("consumer".into()),
        protocol_name: Some("range".into()),
        assignments: assignments
            .iter()
            .map(|(m, a)| (m.to_string(), Bytes::copy_from_slice(a.as_bytes())))
            .collect(),
    }
}

fn join_done(completions: &[Completion], ticket: u64) -> JoinResponse {
    completions
        .iter()
        .find_map(|c| match c {
            Completion::Join(t, r) if *t == ticket => Some(r.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no join completion for ticket {ticket}: {completions:?}"))
}

fn sync_done(completions: &[Completion], ticket: u64) -> SyncResponse {
    completions
        .iter()
        .find_map(|c| match c {
            Completion::Sync(t, r) if *t == ticket => Some(r.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no sync completion for ticket {ticket}: {completions:?}"))
}

fn state(c: &C) -> &'static str {
    c.describe(G).expect("group exists").state
}

/// Forms a Stable group of `a` then `b` (delay 0) at generation 2; returns their ids.
fn two_member_group(c: &mut C) -> (String, String) {
    let ra = c
        .join(0, 1, join_req("", "a"))
        .expect("first member completes at once");
    assert_eq!(ra.error, ErrorCode::None);
    let a = ra.member_id.clone();
    assert_eq!((ra.generation_id, ra.leader.as_str()), (1, a.as_str()));
    let sa = c
        .sync(1, 2, sync_req(1, &a, &[(&a, "A1")]))
        .expect("leader sync");
    assert_eq!(sa.assignment, Bytes::from_static(b"A1"));
    assert_eq!(state(c), "Stable");

    assert!(c.join(2, 3, join_req("", "b")).is_none(), "b waits for a");
    assert_eq!(state(c), "PreparingRebalance");
    assert_eq!(
        c.heartbeat(3, G, 1, &a, None),
        ErrorCode::RebalanceInProgress
    );
    let ra = c
        .join(4, 4, join_req(&a, "a"))
        .expect("a's rejoin completes the join");
    let rb = join_done(&c.take_completions(), 3);
    assert_eq!(ra.generation_id, 2);
    assert_eq!(rb.generation_id, 2);
    assert_eq!(ra.leader, a);
    assert_eq!(rb.leader, a);
    let b = rb.member_id.clone();
    assert_eq!(ra.members.len(), 2, "leader sees every member's metadata");
    assert!(rb.members.is_empty(), "followers get no member list");
    assert!(
        ra.members
            .iter()
            .all(|m| m.metadata == subscription(&["t"]))
    );
    assert_eq!(ra.protocol_name.as_deref(), Some("range"));

    assert!(
        c.sync(5, 5, sync_req(2, &b, &[])).is_none(),
        "follower waits for leader"
    );
    let sa = c
        .sync(6, 6, sync_req(2, &a, &[(&a, "A2"), (&b, "B2")]))
        .expect("leader");
    assert_eq!(sa.assignment, Bytes::from_static(b"A2"));
    assert_eq!(
        sync_done(&c.take_completions(), 5).assignment,
        Bytes::from_static(b"B2")
    );
    assert_eq!(state(c), "Stable");
    c.check_invariants().expect("invariants");
    (a, b)
}

#[test]
fn initial_delay_gathers_members_and_leader_sees_all_metadata() {
    let mut c = C::new(cfg(3000));
    assert!(c.join(0, 1, join_req("", "a")).is_none());
    assert!(c.join(100, 2, join_req("", "b")).is_none());
    c.tick(2999);
    assert!(c.take_completions().is_empty());
    c.tick(3000); // b arrived during the delay: extended once more
    assert!(c.take_completions().is_empty());
    c.tick(6000);
    let done = c.take_completions();
    let (ra, rb) = (join_done(&done, 1), join_done(&done, 2));
    assert_eq!(ra.generation_id, 1);
    assert_eq!(ra.leader, rb.leader);
    let leader = if ra.leader == ra.member_id { &ra } else { &rb };
    assert_eq!(leader.members.len(), 2);
}

#[test]
fn join_sync_heartbeat_and_third_member_triggers_rebalance() {
    let mut c = C::new(cfg(0));
    let (a, b) = two_member_group(&mut c);
    assert_eq!(c.heartbeat(10, G, 2, &a, None), ErrorCode::None);
    assert_eq!(c.heartbeat(10, G, 2, &b, None), ErrorCode::None);

    assert!(c.join(20, 10, join_req("", "c")).is_none());
    assert_eq!(
        c.heartbeat(21, G, 2, &a, None),
        ErrorCode::RebalanceInProgress
    );
    assert_eq!(
        c.heartbeat(21, G, 2, &b, None),
        ErrorCode::RebalanceInProgress
    );
    assert!(c.join(22, 11, join_req(&a, "a")).is_none());
    let rb = c
        .join(23, 12, join_req(&b, "b"))
        .expect("last rejoin completes");
    let done = c.take_completions();
    let (ra, rc) = (join_done(&done, 11), join_done(&done, 10));
    assert_eq!(
        (ra.generation_id, rb.generation_id, rc.generation_id),
        (3, 3, 3)
    );
    assert_eq!(ra.members.len(), 3);
    // Old generation is now illegal.
    assert_eq!(
        c.heartbeat(24, G, 2, &a, None),
        ErrorCode::IllegalGeneration
    );
    assert_eq!(
        c.heartbeat(24, G, 3, &a, None),
        ErrorCode::None,
        "heartbeats in CompletingRebalance are fine"
    );
    c.check_invariants().expect("invariants");
}

#[test]
fn leave_triggers_rebalance_and_remaining_member_takes_over() {
    let mut c = C::new(cfg(0));
    let (a, b) = two_member_group(&mut c);
    let (top, per) = c.leave(10, G, vec![(a.clone(), None)]);
    assert_eq!(top, ErrorCode::None);
    assert_eq!(per, vec![(a.clone(), ErrorCode::None)]);
    assert_eq!(
        c.heartbeat(11, G, 2, &b, None),
        ErrorCode::RebalanceInProgress
    );
    assert_eq!(c.heartbeat(11, G, 2, &a, None), ErrorCode::UnknownMemberId);
    let rb = c
        .join(12, 20, join_req(&b, "b"))
        .expect("only member: completes at once");
    assert_eq!((rb.generation_id, rb.leader.as_str()), (3, b.as_str()));
    assert_eq!(rb.members.len(), 1);
    let sb = c
        .sync(13, 21, sync_req(3, &b, &[(&b, "ALL")]))
        .expect("sync");
    assert_eq!(sb.assignment, Bytes::from_static(b"ALL"));
    // Leaving again empties the group.
    c.leave(14, G, vec![(b.clone(), None)]);
    assert_eq!(state(&c), "Empty");
    assert_eq!(
        c.leave(15, G, vec![(b.clone(), None)]).1,
        vec![(b, ErrorCode::UnknownMemberId)]
    );
}

#[test]
fn session_expiry_via_tick_triggers_rebalance() {
    let mut c = C::new(cfg(0));
    let (a, b) = two_member_group(&mut c);
    // b keeps heartbeating, a goes silent.
    for t in (1000..=9000).step_by(1000) {
        assert_eq!(c.heartbeat(t, G, 2, &b, None), ErrorCode::None);
        c.tick(t);
    }
    c.tick(10_005);
    assert!(c.take_completions().is_empty());
    assert_eq!(state(&c), "PreparingRebalance");
    assert_eq!(
        c.heartbeat(10_006, G, 2, &a, None),
        ErrorCode::UnknownMemberId
    );
    let rb = c.join(10_007, 30, join_req(&b, "b")).expect("completes");
    assert_eq!(rb.generation_id, 3);
    assert_eq!(rb.leader, b, "leadership moves to the survivor");
    // b's session (10 s after its join answer) is the next thing tick must handle.
    assert_eq!(c.next_deadline(), Some(10_007 + 10_000));
}

#[test]
fn rebalance_timeout_drops_members_that_do_not_rejoin() {
    let mut c = C::new(cfg(0));
    let (a, b) = two_member_group(&mut c);
    assert!(c.join(100, 40, join_req("", "c")).is_none());
    assert!(c.join(101, 41, join_req(&b, "b")).is_none());
    // a keeps heartbeating (so its session stays alive) but never rejoins.
    for t in (1000..30_000).step_by(1000) {
        c.heartbeat(t, G, 2, &a, None);
        c.tick(t);
        assert!(c.take_completions().is_empty());
    }
    c.tick(30_100);
    let done = c.take_completions();
    assert_eq!(join_done(&done, 40).generation_id, 3);
    let rb = join_done(&done, 41);
    assert_eq!(rb.generation_id, 3);
    assert_eq!(rb.leader, b);
    assert_eq!(rb.members.len(), 2);
    assert!(rb.members.iter().all(|m| m.member_id != a));
    assert_eq!(
        c.heartbeat(30_200, G, 3, &a, None),
        ErrorCode::UnknownMemberId
    );
}

#[test]
fn sync_timeout_removes_members_that_never_sync() {
    let mut c = C::new(cfg(0));
    let ra = c.join(0, 1, join_req("", "a")).expect("join");
    // The leader never sends SyncGroup.
    c.tick(30_000);
    assert_eq!(state(&c), "Empty");
    assert_eq!(
        c.heartbeat(30_001, G, ra.generation_id, &ra.member_id, None),
        ErrorCode::UnknownMemberId
    );
}

#[test]
fn member_id_required_then_join() {
    let mut c = C::new(cfg(0));
    let req = JoinGroup {
        require_known_member_id: true,
        ..join_req("", "a")
    };
    let r = c.join(0, 1, req.clone()).expect("immediate");
    assert_eq!(r.error, ErrorCode::MemberIdRequired);
    assert!(!r.member_id.is_empty());
    let r2 = c
        .join(
            1,
            2,
            JoinGroup {
                member_id: r.member_id.clone(),
                ..req.clone()
            },
        )
        .expect("joins");
    assert_eq!(r2.error, ErrorCode::None);
    assert_eq!(r2.member_id, r.member_id);
    assert_eq!(r2.generation_id, 1);

    // A pending member that never comes back expires after its session timeout.
    let p = c.join(2, 3, req).expect("immediate");
    assert_eq!(p.error, ErrorCode::MemberIdRequired);
    c.tick(20_000);
    let late = c.join(
        20_001,
        4,
        JoinGroup {
            member_id: p.member_id.clone(),
            ..join_req("", "x")
        },
    );
    assert_eq!(late.map(|r| r.error), Some(ErrorCode::UnknownMemberId));
}

#[test]
fn request_validation_errors() {
    let mut c = C::new(cfg(0));
    // Unknown member id for an unknown group.
    let r = c.join(0, 1, join_req("ghost", "a")).expect("immediate");
    assert_eq!(r.error, ErrorCode::UnknownMemberId);
    // Session timeout out of range.
    for s in [5999, 1_800_001] {
        let r = c
            .join(
                0,
                2,
                JoinGroup {
                    session_timeout_ms: s,
                    ..join_req("", "a")
                },
            )
            .expect("immediate");
        assert_eq!(r.error, ErrorCode::InvalidSessionTimeout);
    }
    // Empty protocol type / no protocols for the first member.
    let r = c
        .join(
            0,
            3,
            JoinGroup {
                protocol_type: String::new(),
                ..join_req("", "a")
            },
        )
        .expect("immediate");
    assert_eq!(r.error, ErrorCode::InconsistentGroupProtocol);
    let r = c
        .join(
            0,
            4,
            JoinGroup {
                protocols: vec![],
                ..join_req("", "a")
            },
        )
        .expect("immediate");
    assert_eq!(r.error, ErrorCode::InconsistentGroupProtocol);

    let (a, _b) = two_member_group(&mut c);
    // Different protocol type, or no protocol in common.
    let r = c
        .join(
            10,
            5,
            JoinGroup {
                protocol_type: "connect".into(),
                ..join_req("", "c")
            },
        )
        .expect("immediate");
    assert_eq!(r.error, ErrorCode::InconsistentGroupProtocol);
    let r = c
        .join(
            10,
            6,
            JoinGroup {
                protocols: vec![("sticky".into(), Bytes::new())],
                ..join_req("", "c")
            },
        )
        .expect("immediate");
    assert_eq!(r.error, ErrorCode::InconsistentGroupProtocol);
    // Unknown member / wrong generation on every API.
    assert_eq!(
        c.heartbeat(11, G, 2, "ghost", None),
        ErrorCode::UnknownMemberId
    );
    assert_eq!(
        c.heartbeat(11, G, 7, &a, None),
        ErrorCode::IllegalGeneration
    );
    assert_eq!(
        c.heartbeat(11, "nope", 1, &a, None),
        ErrorCode::UnknownMemberId
    );
    let s = c.sync(11, 7, sync_req(7, &a, &[])).expect("immediate");
    assert_eq!(s.error, ErrorCode::IllegalGeneration);
    let s = c.sync(11, 8, sync_req(2, "ghost", &[])).expect("immediate");
    assert_eq!(s.error, ErrorCode::UnknownMemberId);
    let s = c
        .sync(
            11,
            9,
            SyncGroup {
                protocol_name: Some("sticky".into()),
                ..sync_req(2, &a, &[])
            },
        )
        .expect("immediate");
    assert_eq!(s.error, ErrorCode::InconsistentGroupProtocol);
    let r = c.join(11, 10, join_req("ghost", "a")).expect("immediate");
    assert_eq!(r.error, ErrorCode::UnknownMemberId);
    // No side effects: still Stable, nothing parked.
    assert_eq!(state(&c), "Stable");
    assert!(c.take_completions().is_empty());
}

#[test]
fn follower_rejoin_with_same_protocols_in_stable_does_not_rebalance() {
    let mut c = C::new(cfg(0));
    let (_a, b) = two_member_group(&mut c);
    let r = c.join(10, 50, join_req(&b, "b")).expect("answered at once");
    assert_eq!(r.generation_id, 2);
    assert_eq!(state(&c), "Stable");
}

#[test]
fn group_max_size() {
    let mut c = C::new(GroupConfig {
        max_group_size: Some(1),
        ..cfg(0)
    });
    c.join(0, 1, join_req("", "a")).expect("first");
    let r = c.join(1, 2, join_req("", "b")).expect("immediate");
    assert_eq!(r.error, ErrorCode::GroupMaxSizeReached);
}

#[test]
fn static_member_restart_keeps_generation_and_assignment() {
    let mut c = C::new(cfg(0));
    let ra = c.join(0, 1, static_req("", "inst-a")).expect("join");
    let a = ra.member_id.clone();
    c.sync(1, 2, sync_req(1, &a, &[(&a, "A1")])).expect("sync");
    assert!(c.join(2, 3, static_req("", "inst-b")).is_none());
    let ra = c.join(3, 4, static_req(&a, "inst-a")).expect("completes");
    let rb = join_done(&c.take_completions(), 3);
    let b = rb.member_id.clone();
    assert_eq!(ra.generation_id, 2);
    assert!(c.sync(4, 5, sync_req(2, &b, &[])).is_none());
    c.sync(5, 6, sync_req(2, &a, &[(&a, "A2"), (&b, "B2")]))
        .expect("leader");
    c.take_completions();
    assert_eq!(state(&c), "Stable");

    // b's process restarts: new member id, same instance id, within the session timeout.
    let rb2 = c
        .join(1000, 7, static_req("", "inst-b"))
        .expect("answered at once");
    assert_eq!(rb2.error, ErrorCode::None);
    assert_ne!(rb2.member_id, b);
    assert_eq!(rb2.generation_id, 2, "no rebalance");
    assert_eq!(rb2.leader, a);
    assert_eq!(state(&c), "Stable");
    let b2 = rb2.member_id.clone();
    let sb = c
        .sync(
            1001,
            8,
            SyncGroup {
                group_instance_id: Some("inst-b".into()),
                ..sync_req(2, &b2, &[])
            },
        )
        .expect("stable: immediate");
    assert_eq!(sb.assignment, Bytes::from_static(b"B2"));
    assert_eq!(c.heartbeat(1002, G, 2, &a, Some("inst-a")), ErrorCode::None);
    // The old member id is fenced.
    assert_eq!(
        c.heartbeat(1002, G, 2, &b, Some("inst-b")),
        ErrorCode::FencedInstanceId
    );
    assert_eq!(
        c.validate_commit(1002, G, 2, &b, Some("inst-b")),
        ErrorCode::FencedInstanceId
    );
    let s = c
        .sync(
            1002,
            9,
            SyncGroup {
                group_instance_id: Some("inst-b".into()),
                ..sync_req(2, &b, &[])
            },
        )
        .expect("immediate");
    assert_eq!(s.error, ErrorCode::FencedInstanceId);
    let (_, per) = c.leave(1003, G, vec![(b.clone(), Some("inst-b".into()))]);
    assert_eq!(per, vec![(b.clone(), ErrorCode::FencedInstanceId)]);
    let d = c.describe(G).expect("group");
    assert_eq!(d.members.len(), 2);
    assert!(
        d.members
            .iter()
            .any(|m| m.member_id == b2 && m.assignment == Bytes::from_static(b"B2"))
    );

    // Leave by instance id only removes the static member and rebalances.
    let (_, per) = c.leave(1004, G, vec![(String::new(), Some("inst-b".into()))]);
    assert_eq!(per, vec![(String::new(), ErrorCode::None)]);
    assert_eq!(state(&c), "PreparingRebalance");
    c.check_invariants().expect("invariants");
}

#[test]
fn static_leader_restart_and_session_expiry() {
    let mut c = C::new(cfg(0));
    let ra = c.join(0, 1, static_req("", "inst-a")).expect("join");
    let a = ra.member_id.clone();
    c.sync(1, 2, sync_req(1, &a, &[(&a, "A1")])).expect("sync");
    // The leader restarts: it is told the old leader id, so it acts as a follower.
    let r = c.join(100, 3, static_req("", "inst-a")).expect("immediate");
    assert_eq!(r.generation_id, 1);
    assert_eq!(r.leader, a);
    assert_ne!(r.member_id, a);
    let s = c
        .sync(101, 4, sync_req(1, &r.member_id, &[]))
        .expect("immediate");
    assert_eq!(s.assignment, Bytes::from_static(b"A1"));
    // A static member's session expiry removes it.
    c.tick(100 + 10_000);
    assert_eq!(state(&c), "Empty");
}

#[test]
fn validate_commit_rules() {
    let mut c = C::new(cfg(0));
    // Standalone commits: unknown group → created Empty.
    assert_eq!(c.validate_commit(0, "solo", -1, "", None), ErrorCode::None);
    assert_eq!(
        c.list_groups(),
        vec![("solo".to_string(), String::new(), "Empty")]
    );
    assert_eq!(c.validate_commit(0, "solo", -1, "", None), ErrorCode::None);
    // Unknown group with a generation: illegal.
    assert_eq!(
        c.validate_commit(0, "other", 3, "m", None),
        ErrorCode::IllegalGeneration
    );

    let ra = c.join(0, 1, join_req("", "a")).expect("join");
    let a = ra.member_id.clone();
    // CompletingRebalance: members must wait for their assignment.
    assert_eq!(
        c.validate_commit(1, G, 1, &a, None),
        ErrorCode::RebalanceInProgress
    );
    c.sync(2, 2, sync_req(1, &a, &[(&a, "x")])).expect("sync");
    assert_eq!(c.validate_commit(3, G, 1, &a, None), ErrorCode::None);
    assert_eq!(
        c.validate_commit(3, G, 0, &a, None),
        ErrorCode::IllegalGeneration
    );
    assert_eq!(
        c.validate_commit(3, G, 1, "ghost", None),
        ErrorCode::UnknownMemberId
    );
    // Standalone commits are refused while the group has members.
    assert_eq!(
        c.validate_commit(3, G, -1, "", None),
        ErrorCode::UnknownMemberId
    );
    // A commit counts as a heartbeat: committing keeps a silent member alive.
    for t in (5000..=30_000).step_by(5000) {
        assert_eq!(c.validate_commit(t, G, 1, &a, None), ErrorCode::None);
        c.tick(t);
    }
    assert_eq!(state(&c), "Stable");
    // During PreparingRebalance commits of the current generation are allowed.
    assert!(c.join(30_001, 3, join_req("", "b")).is_none());
    assert_eq!(c.validate_commit(30_002, G, 1, &a, None), ErrorCode::None);
    // a leaves: the join completes with b alone; a's commits are now refused.
    c.leave(30_003, G, vec![(a.clone(), None)]);
    let rb = join_done(&c.take_completions(), 3);
    assert_eq!(rb.generation_id, 2);
    assert_eq!(
        c.validate_commit(30_004, G, 1, &a, None),
        ErrorCode::UnknownMemberId
    );
    assert_eq!(
        c.validate_commit(30_004, G, -1, "", None),
        ErrorCode::UnknownMemberId
    );
}

#[test]
fn standalone_commit_after_group_empties() {
    let mut c = C::new(cfg(0));
    let ra = c.join(0, 1, join_req("", "a")).expect("join");
    c.leave(1, G, vec![(ra.member_id.clone(), None)]);
    assert_eq!(state(&c), "Empty");
    assert_eq!(c.validate_commit(2, G, -1, "", None), ErrorCode::None);
    assert_eq!(
        c.validate_commit(2, G, 1, &ra.member_id, None),
        ErrorCode::UnknownMemberId
    );
}

#[test]
fn offsets_delete_groups_and_admin_views() {
    let mut c = C::new(cfg(0));
    let off = |o: i64| CommittedOffset {
        offset: o,
        leader_epoch: 2,
        metadata: Some("m".into()),
        commit_timestamp_ms: 7,
    };
    c.commit(G, "t", 0, off(5));
    c.commit(G, "u", 1, off(9));
    assert_eq!(c.committed(G, "t", 0), Some(off(5)));
    assert_eq!(c.offsets(G).len(), 2);

    let (a, b) = two_member_group(&mut c);
    let d = c.describe(G).expect("group");
    assert_eq!(
        (d.state, d.protocol_type.as_str(), d.protocol.as_str()),
        ("Stable", "consumer", "range")
    );
    assert_eq!(d.members.len(), 2);
    assert_eq!(d.members[0].member_id, a);
    assert_eq!(d.members[1].assignment, Bytes::from_static(b"B2"));
    assert_eq!(d.members[1].client_id, "b");
    assert_eq!(
        c.list_groups(),
        vec![(G.to_string(), "consumer".to_string(), "Stable")]
    );

    // Members subscribe to "t": its offsets cannot be deleted; "u" can.
    let (top, per) = c.delete_offsets(G, &[("t".into(), 0), ("u".into(), 1)]);
    assert_eq!(top, ErrorCode::None);
    assert_eq!(
        per,
        vec![
            ("t".to_string(), 0, ErrorCode::GroupSubscribedToTopic),
            ("u".to_string(), 1, ErrorCode::None)
        ]
    );
    assert_eq!(c.committed(G, "u", 1), None);
    assert_eq!(c.delete_offsets("nope", &[]).0, ErrorCode::GroupIdNotFound);

    assert_eq!(
        c.delete_groups(&[G.into(), "nope".into()]),
        vec![
            (G.to_string(), ErrorCode::NonEmptyGroup),
            ("nope".to_string(), ErrorCode::GroupIdNotFound)
        ]
    );
    c.leave(10, G, vec![(a, None), (b, None)]);
    assert_eq!(state(&c), "Empty");
    let (_, per) = c.delete_offsets(G, &[("t".into(), 0)]);
    assert_eq!(per, vec![("t".to_string(), 0, ErrorCode::None)]);
    assert_eq!(
        c.delete_groups(&[G.into()]),
        vec![(G.to_string(), ErrorCode::None)]
    );
    assert!(c.describe(G).is_none());
    assert!(c.list_groups().is_empty());
}

#[test]
fn records_round_trip_and_replay() {
    let o = CommittedOffset {
        offset: 42,
        leader_epoch: 3,
        metadata: Some("meta".into()),
        commit_timestamp_ms: 1_700_000_000_000,
    };
    let (key, value) = offset_commit_record("grp", "topic", 7, &o);
    // Key v1: version, group, topic, partition.
    let mut expected_key = BytesMut::new();
    expected_key.put_i16(1);
    expected_key.put_i16(3);
    expected_key.put_slice(b"grp");
    expected_key.put_i16(5);
    expected_key.put_slice(b"topic");
    expected_key.put_i32(7);
    assert_eq!(key, expected_key.freeze());
    // Value v3: version, offset, leader epoch, metadata, commit timestamp.
    let mut expected_value = BytesMut::new();
    expected_value.put_i16(3);
    expected_value.put_i64(42);
    expected_value.put_i32(3);
    expected_value.put_i16(4);
    expected_value.put_slice(b"meta");
    expected_value.put_i64(1_700_000_000_000);
    assert_eq!(value, expected_value.freeze());
    assert_eq!(
        decode_record(&key, Some(&value)),
        Ok(ConsumerOffsetsRecord::Offset {
            group_id: "grp".into(),
            topic: "topic".into(),
            partition: 7,
            value: Some(o.clone()),
        })
    );
    assert_eq!(offset_tombstone("grp", "topic", 7), key);

    let mut c = C::new(cfg(0));
    c.replay(&key, Some(&value)).expect("replay");
    let (k2, v2) = offset_commit_record(
        "grp",
        "topic",
        8,
        &CommittedOffset {
            offset: 1,
            ..o.clone()
        },
    );
    c.replay(&k2, Some(&v2)).expect("replay");
    assert_eq!(c.committed("grp", "topic", 7), Some(o.clone()));
    c.replay(&offset_tombstone("grp", "topic", 7), None)
        .expect("tombstone");
    assert_eq!(c.committed("grp", "topic", 7), None);
    assert_eq!(c.offsets("grp").len(), 1);

    // Group metadata: persisted from a live group, replayed with its members.
    let mut live = C::new(cfg(0));
    let (a, _b) = two_member_group(&mut live);
    let (gk, gv) = live.group_metadata_record(G).expect("group");
    match decode_record(&gk, Some(&gv)).expect("decodes") {
        ConsumerOffsetsRecord::Group {
            group_id,
            value: Some(v),
        } => {
            assert_eq!(group_id, G);
            assert_eq!(v.protocol_type, "consumer");
            assert_eq!(v.generation_id, 2);
            assert_eq!(v.leader.as_deref(), Some(a.as_str()));
            assert_eq!(v.members.len(), 2);
            assert_eq!(v.members[0].subscription, subscription(&["t"]));
        }
        other => panic!("unexpected {other:?}"),
    }
    c.replay(&gk, Some(&gv)).expect("group replay");
    let d = c.describe(G).expect("restored");
    assert_eq!(
        (
            d.state,
            d.protocol_type.as_str(),
            d.generation_id,
            d.members.len()
        ),
        ("Stable", "consumer", 2, 2)
    );
    c.replay(&group_tombstone(G), None)
        .expect("group tombstone");
    assert!(c.describe(G).is_none());

    // Older offset value versions are readable.
    let mut v1 = BytesMut::new();
    v1.put_i16(1);
    v1.put_i64(10);
    v1.put_i16(0);
    v1.put_i64(5);
    v1.put_i64(99);
    let r = decode_record(&key, Some(&v1)).expect("v1");
    assert!(matches!(
        r,
        ConsumerOffsetsRecord::Offset {
            value: Some(CommittedOffset {
                offset: 10,
                leader_epoch: -1,
                metadata: None,
                commit_timestamp_ms: 5
            }),
            ..
        }
    ));
    // Garbage is an error, not a panic.
    assert_eq!(
        decode_record(&[0, 9], None),
        Err(DecodeError::UnknownKeyVersion(9))
    );
    assert_eq!(decode_record(&key[..5], None), Err(DecodeError::Truncated));
    assert!(c.replay(&key, Some(&[0, 3, 1])).is_err());
}

#[test]
fn partition_for_matches_kafka() {
    // Java String.hashCode, computed by hand: s[0]*31^(n-1) + ... + s[n-1].
    assert_eq!(java_string_hash(""), 0);
    assert_eq!(java_string_hash("a"), 97);
    let by_hand = 103 * 31i32.pow(4) + 114 * 31i32.pow(3) + 111 * 31 * 31 + 117 * 31 + 112;
    assert_eq!(by_hand, 98_629_247);
    assert_eq!(java_string_hash("group"), 98_629_247);
    assert_eq!(java_string_hash("hello"), 99_162_322);
    // A famous string whose hashCode is Integer.MIN_VALUE: Utils.abs gives 0.
    assert_eq!(java_string_hash("polygenelubricants"), i32::MIN);
    assert_eq!(partition_for("polygenelubricants", 50), 0);
    assert_eq!(partition_for("", 50), 0);
    assert_eq!(partition_for("a", 50), 97 % 50);
    assert_eq!(partition_for("group", 50), 98_629_247 % 50);
    // Negative hash: "console-consumer-…" style strings; "zzzzzzzz".hashCode() wraps.
    let h = java_string_hash("zzzzzzzz");
    assert!(h < 0);
    assert_eq!(partition_for("zzzzzzzz", 50), (h & 0x7fff_ffff) % 50);
    // Non-BMP characters hash as two UTF-16 code units.
    assert_eq!(java_string_hash("😀"), 0xD83D * 31 + 0xDE00);
}

#[test]
fn subscription_parsing() {
    assert_eq!(
        parse_consumer_subscription_topics(&subscription(&["a", "b"])),
        Some(vec!["a".to_string(), "b".to_string()])
    );
    assert_eq!(parse_consumer_subscription_topics(&[0, 1, 0]), None);
}

/// A Stable generation is written once; a new coordinator that replays it keeps the
/// members, their generation and assignments (they carry on heartbeating without a
/// rebalance, and a session that lapses after the load still expires); once the
/// group empties, that is written too and nobody is restored.
#[test]
fn stable_members_survive_a_coordinator_move() {
    let mut live = C::new(cfg(0));
    let (a, b) = two_member_group(&mut live);
    let written = live.take_persist();
    assert_eq!(written.len(), 1, "the Stable generation");
    assert!(live.take_persist().is_empty(), "written once");

    let mut moved = C::new(cfg(0));
    for (k, v) in &written {
        moved.replay(k, Some(v)).expect("replay");
    }
    moved.loaded(1_000);
    assert!(moved.take_persist().is_empty(), "nothing new to write");
    let d = moved.describe(G).expect("restored");
    assert_eq!((d.state, d.generation_id), ("Stable", 2));
    assert_eq!(moved.heartbeat(1_100, G, 2, &a, None), ErrorCode::None);
    assert_eq!(moved.heartbeat(1_100, G, 2, &b, None), ErrorCode::None);
    // A follower re-syncing gets its assignment back.
    let sb = moved
        .sync(1_200, 1, sync_req(2, &b, &[]))
        .expect("Stable answers at once");
    assert_eq!(sb.assignment, Bytes::from_static(b"B2"));
    moved.check_invariants().expect("invariants");
    // b stops heartbeating: its session lapses, and the group rebalances around a.
    let session = i64::from(join_req("", "x").session_timeout_ms);
    moved.tick(1_100 + session / 2);
    assert_eq!(
        moved.heartbeat(1_100 + session / 2, G, 2, &a, None),
        ErrorCode::None
    );
    moved.tick(1_200 + session + 1);
    assert_eq!(state(&moved), "PreparingRebalance");

    // Both leave the live group: the Empty generation is written, and a coordinator
    // replaying everything restores no members.
    live.leave(2_000, G, vec![(a.clone(), None), (b.clone(), None)]);
    live.tick(2_001);
    assert_eq!(state(&live), "Empty");
    let emptied = live.take_persist();
    assert_eq!(emptied.len(), 1);
    let mut later = C::new(cfg(0));
    for (k, v) in written.iter().chain(&emptied) {
        later.replay(k, Some(v)).expect("replay");
    }
    later.loaded(3_000);
    let d = later.describe(G).expect("group");
    assert_eq!((d.state, d.members.len()), ("Empty", 0));
    assert_eq!(
        later.heartbeat(3_001, G, 2, &a, None),
        ErrorCode::UnknownMemberId
    );
}

/// Fuzzing found it (fuzz/corpus/offsets_records/regress-duplicate-member-id): a group
/// metadata record naming one member id twice, with two instance ids, left a static
/// mapping dangling. Such a record is not restored; the offsets still load.
#[test]
fn a_group_record_with_a_member_twice_restores_no_one() {
    let mut live = C::new(cfg(0));
    let (a, _b) = two_member_group(&mut live);
    let (gk, gv) = live.group_metadata_record(G).expect("group");
    let ConsumerOffsetsRecord::Group {
        value: Some(mut v), ..
    } = decode_record(&gk, Some(&gv)).expect("decodes")
    else {
        panic!("a group record");
    };
    v.members[1].member_id = a.clone();
    v.members[0].group_instance_id = Some("worker-1".into());
    v.members[1].group_instance_id = Some("worker-2".into());
    let (gk, gv) = group_metadata_record(G, &v);
    let mut c = C::new(cfg(0));
    c.replay(&gk, Some(&gv)).expect("replay");
    c.check_invariants().expect("invariants");
    assert!(c.describe(G).is_none_or(|d| d.members.is_empty()));
}

fn committed_at(offset: i64, ts: i64) -> CommittedOffset {
    CommittedOffset {
        offset,
        leader_epoch: -1,
        metadata: None,
        commit_timestamp_ms: ts,
    }
}

/// KIP-211: a group with members keeps its offsets however old; once Empty for the
/// retention it loses all of them, and the group goes with them.
#[test]
fn offsets_expire_only_after_the_group_has_been_empty_for_the_retention() {
    const RETENTION: i64 = 10_000;
    let mut c = C::new(cfg(0));
    let (a, b) = two_member_group(&mut c);
    c.commit(G, "t", 0, committed_at(5, 6));
    c.commit(G, "t", 1, committed_at(7, 6));
    // Members heartbeat; the commits are far older than the retention: nothing expires.
    for now in (7..100_000).step_by(1_000) {
        assert_eq!(c.heartbeat(now, G, 2, &a, None), ErrorCode::None);
        assert_eq!(c.heartbeat(now, G, 2, &b, None), ErrorCode::None);
        assert!(
            c.expired_offsets(now + RETENTION * 10, RETENTION)
                .is_empty()
        );
    }
    // Both leave: Empty from then on.
    let left = 100_000;
    let (code, _) = c.leave(left, G, vec![(a.clone(), None), (b.clone(), None)]);
    assert_eq!(code, ErrorCode::None);
    assert_eq!(state(&c), "Empty");
    assert!(
        c.expired_offsets(left + RETENTION - 1, RETENTION)
            .is_empty()
    );
    let expired = c.expired_offsets(left + RETENTION, RETENTION);
    assert_eq!(
        expired,
        vec![strata_group::ExpiredOffsets {
            group_id: G.into(),
            offsets: vec![("t".into(), 0, 6), ("t".into(), 1, 6)],
            group: true,
        }]
    );
    c.remove_expired(&expired);
    assert!(c.offsets(G).is_empty());
    assert!(c.describe(G).is_none(), "the group went with its offsets");
}

/// Standalone commits (assign(), no protocol): each offset expires the retention after
/// it was committed; one committed again before the tombstones land stays.
#[test]
fn standalone_offsets_expire_one_by_one_and_a_fresh_commit_survives() {
    const RETENTION: i64 = 10_000;
    let mut c = C::new(cfg(0));
    assert_eq!(c.validate_commit(0, "solo", -1, "", None), ErrorCode::None);
    c.commit("solo", "t", 0, committed_at(1, 0));
    c.commit("solo", "t", 1, committed_at(2, 5_000));
    c.commit("solo", "t", 2, committed_at(3, 5_000));
    let expired = c.expired_offsets(RETENTION, RETENTION);
    assert_eq!(expired.len(), 1);
    assert_eq!(expired[0].offsets, vec![("t".into(), 0, 0)]);
    assert!(!expired[0].group);
    c.remove_expired(&expired);
    assert_eq!(c.offsets("solo").len(), 2);
    // Later both expire; partition 1 is committed again before they are removed.
    let expired = c.expired_offsets(RETENTION + 5_000, RETENTION);
    assert!(expired[0].group);
    c.commit("solo", "t", 1, committed_at(9, RETENTION + 5_000));
    c.remove_expired(&expired);
    let left: Vec<i64> = c.offsets("solo").iter().map(|o| o.2.offset).collect();
    assert_eq!(left, vec![9]);
    assert!(c.describe("solo").is_some());
}

/// The offsets topic is compacted: the latest record of each key, in log order, replays
/// to the same committed offsets as the whole log (later commits, tombstones, a group
/// deleted and used again).
#[test]
fn a_compacted_offsets_log_replays_to_the_same_offsets() {
    let commit = |g: &str, p: i32, o: i64| {
        let (k, v) = offset_commit_record(g, "t", p, &committed_at(o, 7));
        (k, Some(v))
    };
    let log: Vec<(Bytes, Option<Bytes>)> = vec![
        commit("a", 0, 1),
        commit("a", 1, 2),
        commit("b", 0, 3),
        commit("a", 0, 4),
        (offset_tombstone("a", "t", 1), None),
        commit("b", 0, 5),
        (group_tombstone("b"), None),
        (offset_tombstone("b", "t", 0), None),
        commit("b", 1, 6),
        commit("a", 0, 8),
    ];
    let replay = |records: &[&(Bytes, Option<Bytes>)]| {
        let mut c = C::new(cfg(0));
        for (k, v) in records {
            c.replay(k, v.as_deref()).unwrap();
        }
        c.loaded(10);
        (c.offsets("a"), c.offsets("b"))
    };
    let all: Vec<_> = log.iter().collect();
    let latest: Vec<_> = log
        .iter()
        .enumerate()
        .filter(|(i, (k, _))| log[i + 1..].iter().all(|(k2, _)| k2 != k))
        .map(|(_, r)| r)
        .collect();
    assert!(latest.len() < all.len());
    let (a, b) = replay(&all);
    assert_eq!(replay(&latest), (a.clone(), b.clone()));
    let offsets = |v: &[(String, i32, CommittedOffset)]| -> Vec<(i32, i64)> {
        v.iter().map(|(_, p, o)| (*p, o.offset)).collect()
    };
    assert_eq!(offsets(&a), vec![(0, 8)]);
    assert_eq!(offsets(&b), vec![(1, 6)]);
}
