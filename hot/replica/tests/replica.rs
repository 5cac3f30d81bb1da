//! The replica state machine, scenario by scenario: a new leader's epoch and HWM, follower
//! fetches (epoch fencing, diverging epochs, out of range), ISR expansion and shrinking
//! through the controller with at most one change in flight, the maximal ISR holding the
//! HWM, acks=all (NOT_ENOUGH_REPLICAS, NOT_ENOUGH_REPLICAS_AFTER_APPEND), a leader cut off
//! from the controller, and the follower's HWM and truncation.

#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use strata_replica::{
    AckStatus, AlterPartitionError, Command, CommittedIsr, EpochLog, FetchDecision, FollowerFetch,
    PartitionReplica, ReplicaConfig, Role, TruncationDecision,
};

const LAG: i64 = 30_000;

fn fetch(replica: i32, fetch_offset: i64) -> FollowerFetch {
    FollowerFetch {
        replica,
        current_leader_epoch: Some(5),
        fetch_offset,
        last_fetched_epoch: None,
    }
}

/// Broker 1 leads epoch 5 of a partition on 1, 2, 3 (all in sync), its log [0, 100)
/// with epochs 0 from 0 and 5 from 100; its HWM as a follower was 90.
fn leader() -> (PartitionReplica, EpochLog) {
    let log = epoch_log(0, 100, &[(0, 0), (5, 100)]);
    let mut r = PartitionReplica::new(1, ReplicaConfig::default(), 90);
    let out = r.become_leader(1_000, &state(1, 5, 10, &[1, 2, 3], &[1, 2, 3]), &log);
    assert_eq!(
        out,
        vec![Command::AssignEpochStart {
            leader_epoch: 5,
            start_offset: 100
        }],
        "nothing known of the followers: the HWM waits"
    );
    (r, log)
}

#[test]
fn a_new_leader_waits_for_every_in_sync_follower_before_moving_the_hwm() {
    let (mut r, mut log) = leader();
    assert_eq!((r.role(), r.high_watermark()), (Role::Leader, 90));
    assert_eq!(r.epoch_start_offset(), Some(100));
    let out = r.on_follower_fetch(1_010, &fetch(2, 100), &log);
    assert_eq!(out.decision, FetchDecision::Read { high_watermark: 90 });
    assert_eq!(advanced(&out.commands), None, "3 has not fetched yet");
    let out = r.on_follower_fetch(1_020, &fetch(3, 95), &log);
    assert_eq!(out.decision, FetchDecision::Read { high_watermark: 95 });
    assert_eq!(out.commands, vec![Command::HighWatermarkAdvanced(95)]);
    // Appends move nothing until the followers have them.
    log.log_end_offset = 110;
    assert!(r.on_local_append(1_030, 110).is_empty());
    assert!(advanced(&r.on_follower_fetch(1_040, &fetch(2, 110), &log).commands).is_none());
    let out = r.on_follower_fetch(1_050, &fetch(3, 110), &log);
    assert_eq!(advanced(&out.commands), Some(110));
    // A follower that fetches from lower down (it truncated) does not move it back.
    let out = r.on_follower_fetch(1_060, &fetch(3, 104), &log);
    assert_eq!(
        out.decision,
        FetchDecision::Read {
            high_watermark: 110
        }
    );
    assert_eq!(r.high_watermark(), 110);
}

#[test]
fn a_leader_alone_in_the_isr_moves_the_hwm_with_its_appends() {
    let log = epoch_log(0, 100, &[(0, 0)]);
    let mut r = PartitionReplica::new(1, ReplicaConfig::default(), 0);
    let out = r.become_leader(0, &state(1, 2, 1, &[1, 2], &[1]), &log);
    assert_eq!(advanced(&out), Some(100));
    assert_eq!(advanced(&r.on_local_append(1, 130)), Some(130));
    // A follower outside the ISR that has never caught up does not hold it back.
    let out = r.on_follower_fetch(
        2,
        &FollowerFetch {
            current_leader_epoch: None,
            ..fetch(2, 10)
        },
        &log,
    );
    assert_eq!(
        out.decision,
        FetchDecision::Read {
            high_watermark: 130
        }
    );
}

#[test]
fn follower_fetches_are_validated_like_kafkas() {
    let (mut r, _) = leader();
    // The leader's log: epoch 0 from 0, 3 from 50, 5 from 80; it ends at 100.
    let log = epoch_log(20, 100, &[(0, 20), (3, 50), (5, 80)]);
    let with = |epoch: Option<i32>, offset: i64, last: Option<i32>| FollowerFetch {
        replica: 2,
        current_leader_epoch: epoch,
        fetch_offset: offset,
        last_fetched_epoch: last,
    };
    let mut decide = |f: FollowerFetch| r.on_follower_fetch(2_000, &f, &log).decision;
    assert_eq!(
        decide(with(Some(4), 100, None)),
        FetchDecision::FencedLeaderEpoch
    );
    assert_eq!(
        decide(with(Some(6), 100, None)),
        FetchDecision::UnknownLeaderEpoch
    );
    assert_eq!(
        decide(with(Some(5), 101, None)),
        FetchDecision::OffsetOutOfRange
    );
    assert_eq!(
        decide(with(Some(5), 19, None)),
        FetchDecision::OffsetOutOfRange
    );
    // Epoch 4 never existed here: it ends where 5 starts, in epoch 3's terms.
    assert_eq!(
        decide(with(Some(5), 70, Some(4))),
        FetchDecision::DivergingEpoch {
            epoch: 3,
            end_offset: 80,
            high_watermark: 90
        }
    );
    // Epoch 3 ends at 80: a follower with more of it diverges, one with less does not.
    assert_eq!(
        decide(with(Some(5), 90, Some(3))),
        FetchDecision::DivergingEpoch {
            epoch: 3,
            end_offset: 80,
            high_watermark: 90
        }
    );
    assert!(matches!(
        decide(with(Some(5), 75, Some(3))),
        FetchDecision::Read { .. }
    ));
    assert!(matches!(
        decide(with(None, 100, Some(5))),
        FetchDecision::Read { .. }
    ));
    // An epoch above the leader's latest is unknown to it.
    assert_eq!(
        decide(with(Some(5), 100, Some(7))),
        FetchDecision::OffsetOutOfRange
    );
    // Not a replica of the partition.
    let f = FollowerFetch {
        replica: 9,
        ..with(Some(5), 100, None)
    };
    assert_eq!(decide(f), FetchDecision::NotLeaderOrFollower);
    assert_eq!(FetchDecision::FencedLeaderEpoch.error_code().code(), 74);
}

#[test]
fn the_isr_shrinks_after_the_lag_time_only_once_the_controller_agrees() {
    let (mut r, mut log) = leader();
    r.on_follower_fetch(1_000, &fetch(2, 100), &log);
    r.on_follower_fetch(1_000, &fetch(3, 100), &log);
    assert_eq!(r.high_watermark(), 100);
    // 3 stops fetching; 2 keeps up with the appends.
    for t in (2_000..=31_000).step_by(1_000) {
        log.log_end_offset += 1;
        r.on_local_append(t, log.log_end_offset);
        r.on_follower_fetch(t, &fetch(2, log.log_end_offset), &log);
        assert!(alter(&r.tick(t)).is_none(), "at {t}: within the lag time");
    }
    // 3 was last caught up at 1_000: out of sync after 31_000.
    let out = r.tick(31_001);
    let request = alter(&out).expect("shrink");
    assert_eq!(
        (request.new_isr.clone(), request.partition_epoch),
        (vec![1, 2], 10)
    );
    // Until the controller confirms, 3 still counts: the HWM waits for it, and the ISR
    // is unchanged. No second request goes out.
    assert_eq!(r.isr(), vec![1, 2, 3]);
    assert_eq!(r.maximal_isr(), vec![1, 2, 3]);
    assert_eq!(r.high_watermark(), 100);
    assert!(alter(&r.tick(40_000)).is_none());
    let out = r.on_alter_partition_response(
        40_001,
        &request,
        Ok(CommittedIsr {
            leader_epoch: 5,
            partition_epoch: 11,
            isr: vec![1, 2],
        }),
    );
    assert_eq!(
        out,
        vec![
            Command::IsrChanged {
                isr: vec![1, 2],
                partition_epoch: 11
            },
            Command::HighWatermarkAdvanced(log.log_end_offset),
        ]
    );
    assert_eq!((r.isr(), r.partition_epoch()), (vec![1, 2], 11));
    assert!(r.is_under_replicated());
    // The same answer again changes nothing.
    assert!(
        r.on_alter_partition_response(
            40_002,
            &request,
            Ok(CommittedIsr {
                leader_epoch: 5,
                partition_epoch: 11,
                isr: vec![1, 2]
            })
        )
        .is_empty()
    );
}

#[test]
fn a_follower_joins_the_isr_once_it_has_the_hwm_and_the_epoch_start() {
    // 3 is out of the ISR; the leader's epoch starts at 100, its HWM is 90.
    let log = epoch_log(0, 100, &[(0, 0), (5, 100)]);
    let mut r = PartitionReplica::new(1, ReplicaConfig::default(), 90);
    r.become_leader(0, &state(1, 5, 10, &[1, 2, 3], &[1, 2]), &log);
    r.on_follower_fetch(10, &fetch(2, 100), &log);
    assert_eq!(r.high_watermark(), 100);
    assert!(
        alter(&r.on_follower_fetch(20, &fetch(3, 80), &log).commands).is_none(),
        "below the HWM"
    );
    let mut log = log;
    log.log_end_offset = 120;
    r.on_local_append(30, 120);
    let out = r.on_follower_fetch(40, &fetch(3, 100), &log);
    let request = alter(&out.commands).expect("expand");
    assert_eq!(request.new_isr, vec![1, 2, 3]);
    // Being added, it counts for the HWM at once.
    assert_eq!(r.maximal_isr(), vec![1, 2, 3]);
    assert_eq!(r.isr(), vec![1, 2]);
    r.on_follower_fetch(50, &fetch(2, 120), &log);
    assert_eq!(r.high_watermark(), 100, "held by 3, which is being added");
    // The controller refuses (3 is fenced, say): back to the committed ISR.
    let out =
        r.on_alter_partition_response(60, &request, Err(AlterPartitionError::IneligibleReplica));
    assert_eq!(advanced(&out), Some(120), "3 no longer counts");
    assert!(r.pending_alter_partition().is_none());
    // It asks again on 3's next fetch, and this time the controller agrees.
    let request = alter(&r.on_follower_fetch(70, &fetch(3, 120), &log).commands).unwrap();
    let out = r.on_alter_partition_response(
        80,
        &request,
        Ok(CommittedIsr {
            leader_epoch: 5,
            partition_epoch: 11,
            isr: vec![1, 2, 3],
        }),
    );
    assert_eq!(
        out,
        vec![Command::IsrChanged {
            isr: vec![1, 2, 3],
            partition_epoch: 11
        }]
    );
    assert!(!r.is_under_replicated());
}

#[test]
fn a_follower_behind_the_leaders_epoch_start_does_not_join() {
    // The HWM is 50 but this leader's epoch starts at 100: a follower at 60 has the
    // committed records, not the tail this leader kept from before its epoch.
    let log = epoch_log(0, 100, &[(0, 0), (5, 100)]);
    let mut r = PartitionReplica::new(1, ReplicaConfig::default(), 50);
    r.become_leader(0, &state(1, 5, 10, &[1, 2], &[1]), &log);
    assert_eq!(r.high_watermark(), 100, "alone in the ISR");
    let mut r = PartitionReplica::new(1, ReplicaConfig::default(), 50);
    r.become_leader(0, &state(1, 5, 10, &[1, 2, 3], &[1, 3]), &log);
    assert!(alter(&r.on_follower_fetch(10, &fetch(2, 60), &log).commands).is_none());
    assert!(alter(&r.on_follower_fetch(10, &fetch(2, 100), &log).commands).is_some());
}

#[test]
fn alter_partition_errors_revert_retry_or_wait() {
    let (mut r, log) = leader();
    r.on_follower_fetch(1_000, &fetch(2, 100), &log);
    // 3 never fetches: out of sync after the lag time.
    let request = alter(&r.tick(1_000 + LAG + 1)).unwrap();
    // A retriable error: resent after the backoff, the same request.
    assert!(
        r.on_alter_partition_response(31_100, &request, Err(AlterPartitionError::Retriable))
            .is_empty()
    );
    assert!(alter(&r.tick(31_150)).is_none(), "within the backoff");
    assert_eq!(alter(&r.tick(31_200)), Some(request.clone()));
    assert!(alter(&r.tick(31_300)).is_none(), "once");
    // An answer to another request is ignored.
    let other = strata_replica::AlterPartitionRequest {
        partition_epoch: 9,
        ..request.clone()
    };
    assert!(
        r.on_alter_partition_response(
            31_400,
            &other,
            Err(AlterPartitionError::OperationNotAttempted)
        )
        .is_empty()
    );
    assert_eq!(r.pending_alter_partition(), Some(&request));
    // The partition changed meanwhile: wait for the metadata, sending nothing.
    r.on_alter_partition_response(
        31_500,
        &request,
        Err(AlterPartitionError::InvalidUpdateVersion),
    );
    assert_eq!(r.pending_alter_partition(), Some(&request));
    assert!(alter(&r.tick(90_000)).is_none());
    assert_eq!(r.maximal_isr(), vec![1, 2, 3]);
    // The metadata: the controller fenced 3 and removed it itself.
    let out = r.become_leader(90_001, &state(1, 5, 11, &[1, 2, 3], &[1, 2]), &log);
    assert_eq!(
        out[0],
        Command::IsrChanged {
            isr: vec![1, 2],
            partition_epoch: 11
        }
    );
    assert_eq!(advanced(&out), Some(100));
    assert!(r.pending_alter_partition().is_none());
    // Stale metadata is ignored.
    assert!(
        r.become_leader(90_002, &state(1, 5, 10, &[1, 2, 3], &[1, 2, 3]), &log)
            .is_empty()
    );
    assert_eq!(r.isr(), vec![1, 2]);
    // And the late answer to the old request too.
    assert!(
        r.on_alter_partition_response(
            90_003,
            &request,
            Ok(CommittedIsr {
                leader_epoch: 5,
                partition_epoch: 11,
                isr: vec![1, 2]
            })
        )
        .is_empty()
    );
}

#[test]
fn acks_all_checks_the_isr_at_append_and_after() {
    let (mut r, mut log) = leader();
    r.on_follower_fetch(1_000, &fetch(2, 100), &log);
    r.on_follower_fetch(1_000, &fetch(3, 100), &log);
    assert!(r.acks_all_allowed(3));
    assert!(!r.acks_all_allowed(4));
    // A batch [100, 110) appended with min.insync.replicas=3.
    log.log_end_offset = 110;
    r.on_local_append(1_001, 110);
    assert_eq!(
        r.check_enough_replicas_reach_offset(110, 3),
        AckStatus::Waiting
    );
    r.on_follower_fetch(1_002, &fetch(2, 110), &log);
    assert_eq!(
        r.check_enough_replicas_reach_offset(110, 3),
        AckStatus::Waiting
    );
    // 3 falls out before it has the batch; the HWM then passes it over {1, 2}.
    let request = alter(&r.tick(1_000 + LAG + 1)).unwrap();
    assert_eq!(
        r.check_enough_replicas_reach_offset(110, 3),
        AckStatus::Waiting,
        "3 still counts"
    );
    let out = r.on_alter_partition_response(
        31_002,
        &request,
        Ok(CommittedIsr {
            leader_epoch: 5,
            partition_epoch: 11,
            isr: vec![1, 2],
        }),
    );
    assert_eq!(advanced(&out), Some(110));
    assert_eq!(
        r.check_enough_replicas_reach_offset(110, 3),
        AckStatus::NotEnoughReplicasAfterAppend
    );
    assert_eq!(
        r.check_enough_replicas_reach_offset(110, 2),
        AckStatus::Done
    );
    assert!(
        !r.acks_all_allowed(3),
        "new acks=all writes are refused up front"
    );
    assert!(r.acks_all_allowed(2));
}

/// Split brain: a leader cut off from the controller can still take acks=1 writes, but
/// cannot complete acks=all: its followers moved to the new leader, and dropping them
/// from the ISR needs the controller (so no acks=all write is acknowledged by two
/// leaders).
#[test]
fn a_leader_cut_off_from_the_controller_cannot_complete_acks_all() {
    let (mut r, mut log) = leader();
    r.on_follower_fetch(1_000, &fetch(2, 100), &log);
    r.on_follower_fetch(1_000, &fetch(3, 100), &log);
    assert_eq!(r.high_watermark(), 100);
    // Cut off: no follower fetches any more, no AlterPartition gets through.
    for i in 0..1_000i64 {
        let now = 2_000 + i * 500;
        log.log_end_offset += 1;
        // acks=1 appends still work...
        r.on_local_append(now, log.log_end_offset);
        for c in r.tick(now) {
            if let Command::AlterPartition(request) = c {
                r.on_alter_partition_response(now, &request, Err(AlterPartitionError::Retriable));
            }
        }
        // ...but nothing is ever acknowledged with acks=all.
        assert_eq!(r.high_watermark(), 100);
        assert_eq!(
            r.check_enough_replicas_reach_offset(log.log_end_offset, 1),
            AckStatus::Waiting
        );
    }
    assert_eq!(r.isr(), vec![1, 2, 3]);
    // The metadata finally arrives: it follows 2 now; parked requests fail.
    r.become_follower(600_000, &state(2, 6, 12, &[1, 2, 3], &[2, 3]), &log);
    assert_eq!(
        r.check_enough_replicas_reach_offset(101, 1),
        AckStatus::NotLeaderOrFollower
    );
    assert!(!r.acks_all_allowed(1));
}

#[test]
fn a_follower_takes_the_leaders_hwm_as_far_as_its_log_reaches() {
    let log = epoch_log(0, 100, &[(0, 0), (4, 60)]);
    let mut r = PartitionReplica::new(2, ReplicaConfig::default(), 40);
    assert!(
        r.become_follower(0, &state(1, 5, 10, &[1, 2, 3], &[1, 2, 3]), &log)
            .is_empty()
    );
    assert_eq!(r.role(), Role::Follower { leader: 1 });
    assert_eq!(
        r.on_fetch_response(80, 100),
        vec![Command::HighWatermarkAdvanced(80)]
    );
    assert_eq!(
        r.on_fetch_response(150, 120),
        vec![Command::HighWatermarkAdvanced(120)]
    );
    assert!(r.on_fetch_response(100, 130).is_empty(), "never back");
    assert_eq!(r.high_watermark(), 120);
    // Not a leader: fetches from others are refused.
    assert_eq!(
        r.on_follower_fetch(1, &fetch(3, 0), &log).decision,
        FetchDecision::NotLeaderOrFollower
    );
    // Stale metadata is ignored.
    assert!(
        r.become_follower(1, &state(3, 4, 9, &[1, 2, 3], &[3]), &log)
            .is_empty()
    );
    assert_eq!(r.role(), Role::Follower { leader: 1 });
}

#[test]
fn a_follower_truncates_where_the_leader_says_the_logs_part() {
    // The follower led epoch 4 from 60 and wrote up to 100 alone; the leader (epoch 5)
    // has epoch 3 from 50 and 5 from 70.
    let local = epoch_log(0, 100, &[(0, 0), (3, 50), (4, 60)]);
    let leader_log = epoch_log(0, 120, &[(0, 0), (3, 50), (5, 70)]);
    let mut r = PartitionReplica::new(2, ReplicaConfig::default(), 55);
    r.become_follower(0, &state(1, 5, 10, &[1, 2], &[1, 2]), &local);
    let answer = leader_log.end_offset_for_epoch_checked(local.latest_epoch_checked());
    assert_eq!(answer, Some((3, 70)));
    // Both know epoch 3: it ends at 60 here, at 70 there.
    let out = r.on_epoch_end_offset(answer, &local);
    assert_eq!(out.decision, TruncationDecision::Truncate { offset: 60 });
    assert_eq!(out.commands, vec![Command::Truncate(60)]);
    let local = epoch_log(0, 60, &[(0, 0), (3, 50)]);
    let answer = leader_log.end_offset_for_epoch_checked(local.latest_epoch_checked());
    let out = r.on_epoch_end_offset(answer, &local);
    assert_eq!(out.decision, TruncationDecision::Truncate { offset: 60 });
    assert_eq!(
        out.commands,
        vec![Command::Truncate(60)],
        "at the end: only epochs there go"
    );
    assert_eq!(r.high_watermark(), 55);
    // The leader's log starts after this one ends: restart there.
    let out = r.on_fetch_out_of_range(200, 300, &local);
    assert_eq!(out, vec![Command::TruncateFullyAndStartAt(200)]);
    assert_eq!(r.high_watermark(), 200);
}

/// Shorthands for the test above, through the trait.
trait Checked {
    fn end_offset_for_epoch_checked(&self, epoch: i32) -> Option<(i32, i64)>;
    fn latest_epoch_checked(&self) -> i32;
}

impl Checked for EpochLog {
    fn end_offset_for_epoch_checked(&self, epoch: i32) -> Option<(i32, i64)> {
        strata_replica::LocalLog::end_offset_for_epoch(self, epoch)
    }
    fn latest_epoch_checked(&self) -> i32 {
        strata_replica::LocalLog::latest_epoch(self).unwrap()
    }
}
