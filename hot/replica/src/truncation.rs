//! Where a follower truncates its log: KIP-101's leader-epoch truncation with KIP-279's
//! iteration, and the out-of-range rules of Kafka's fetcher. Pure functions of the
//! local log and the leader's answer.

use strata_proto::{LeaderEpoch, Offset};

use crate::local_log::LocalLog;

/// The leader's answer to "where does epoch E end in your log?": an OffsetsForLeaderEpoch
/// response, or the `DivergingEpoch` of a fetch response. `None` is Kafka's
/// `(UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)`.
pub type EpochEndOffset = Option<(LeaderEpoch, Offset)>;

/// What a follower does with the leader's answer ([`truncation_decision`]).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum TruncationDecision {
    /// Truncate to `offset` (nothing to do if it is the log end): every offset below
    /// it agrees with the leader. Then fetch from there.
    Truncate { offset: Offset },
    /// Truncate to `offset`, then ask again with the log's new latest epoch (KIP-279):
    /// the leader answered with an epoch this log does not have, so it cannot tell yet
    /// where the logs part; `offset` is where this log's own older epochs end, a safe
    /// intermediate point.
    TruncateAndAskAgain { offset: Offset },
    /// The truncation point is below this log's start: delete everything and restart at
    /// `offset` (Kafka's `truncateTo` below the log start), then fetch from there.
    TruncateFully { offset: Offset },
    /// The leader knows no epoch at or below the one asked (it is behind this
    /// follower's metadata, or has no epochs). Kafka falls back to truncating to the
    /// high-water mark here, which can lose acknowledged records when leaders change
    /// twice quickly (the failure KIP-101 was written for): we truncate nothing and ask
    /// again once the metadata has moved on.
    Undefined,
}

/// KIP-279: given the local log and the leader's `(epoch, end offset)` for the epoch
/// the follower asked about (its latest), where to truncate. Kafka's
/// `AbstractFetcherThread.getOffsetTruncationState`:
///
/// - the follower knows the leader's epoch: truncate to the smaller of the two ends of
///   that epoch (and the log end); the logs agree below it, done;
/// - the follower does not know it (the leader answered with an older epoch than
///   asked): truncate to where the follower's largest epoch below it ends, and ask
///   again with the new latest epoch; each round removes at least one epoch, so this
///   ends;
/// - the follower knows no epoch at or below it: truncate to the leader's end.
pub fn truncation_decision(local: &impl LocalLog, leader: EpochEndOffset) -> TruncationDecision {
    let Some((leader_epoch, leader_end)) = leader else {
        return TruncationDecision::Undefined;
    };
    let leo = local.log_end_offset();
    let (offset, complete) = match local.end_offset_for_epoch(leader_epoch) {
        Some((epoch, end)) if epoch == leader_epoch => (end.min(leader_end).min(leo), true),
        Some((_, end)) => (end.min(leo), false),
        None => (leader_end.min(leo), true),
    };
    if offset < local.log_start_offset() {
        TruncationDecision::TruncateFully { offset }
    } else if complete {
        TruncationDecision::Truncate { offset }
    } else {
        TruncationDecision::TruncateAndAskAgain { offset }
    }
}

/// What a follower does when the leader answers OFFSET_OUT_OF_RANGE (Kafka's
/// `AbstractFetcherThread.fetchOffsetAndTruncate`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum OutOfRangeAction {
    /// The leader's log ends before this one: truncate to its end. With epochs checked
    /// first this happens only when the leader lost data it had acknowledged (an
    /// unclean election, or KIP-966's simultaneous power loss).
    TruncateTo(Offset),
    /// The leader's log starts after this one ends (retention, or tiering moved its
    /// local start on): restart empty at the leader's start.
    TruncateFullyAndStartAt(Offset),
    /// Nothing to change: fetch from here (`max(leader start, local end)`).
    FetchFrom(Offset),
}

pub fn out_of_range_action(
    local_log_end: Offset,
    leader_log_start: Offset,
    leader_log_end: Offset,
) -> OutOfRangeAction {
    if leader_log_end < local_log_end {
        OutOfRangeAction::TruncateTo(leader_log_end)
    } else if leader_log_start > local_log_end {
        OutOfRangeAction::TruncateFullyAndStartAt(leader_log_start)
    } else {
        OutOfRangeAction::FetchFrom(leader_log_start.max(local_log_end))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use strata_log::{EpochEntry, LeaderEpochCache};

    use super::*;
    use crate::local_log::EpochLog;

    fn log(start: Offset, end: Offset, epochs: &[(i32, i64)]) -> EpochLog {
        EpochLog {
            log_start_offset: start,
            log_end_offset: end,
            epochs: LeaderEpochCache::from_entries(
                epochs
                    .iter()
                    .map(|&(epoch, start_offset)| EpochEntry {
                        epoch,
                        start_offset,
                    })
                    .collect(),
            )
            .unwrap(),
        }
    }

    use TruncationDecision::*;

    /// KIP-101's examples: the follower has epoch 1 up to 200 (and more), the leader
    /// ends epoch 1 at 150: truncate to 150.
    #[test]
    fn same_epoch_truncates_to_the_smaller_end() {
        let f = log(0, 220, &[(0, 0), (1, 100)]);
        assert_eq!(
            truncation_decision(&f, Some((1, 150))),
            Truncate { offset: 150 }
        );
        // The leader has more of it: nothing to cut.
        assert_eq!(
            truncation_decision(&f, Some((1, 300))),
            Truncate { offset: 220 }
        );
        // The leader's epoch 1 ends early: the follower's later epochs go too.
        let f = log(0, 300, &[(0, 0), (1, 100), (3, 250)]);
        assert_eq!(
            truncation_decision(&f, Some((1, 120))),
            Truncate { offset: 120 }
        );
    }

    /// KIP-279's scenario: the follower asks about epoch 3 (its latest, from a term in
    /// which it led and wrote alone); the leader never had 3 and answers with epoch 2,
    /// which the follower does not have either: it truncates to the end of its own
    /// epoch 1 and asks again with 1, and then agrees with the leader on where 1 ends.
    #[test]
    fn an_unknown_epoch_means_truncate_and_ask_again() {
        let mut f = log(0, 300, &[(0, 0), (1, 100), (3, 200)]);
        let leader = log(0, 400, &[(0, 0), (1, 100), (2, 150), (4, 300)]);
        let answer = leader.end_offset_for_epoch(f.latest_epoch().unwrap());
        assert_eq!(answer, Some((2, 300)));
        assert_eq!(
            truncation_decision(&f, answer),
            TruncateAndAskAgain { offset: 200 }
        );
        f.log_end_offset = 200;
        f.epochs.truncate_from_end(200);
        let answer = leader.end_offset_for_epoch(f.latest_epoch().unwrap());
        assert_eq!(answer, Some((1, 150)));
        assert_eq!(truncation_decision(&f, answer), Truncate { offset: 150 });
    }

    #[test]
    fn edge_cases() {
        // The leader's answer is below this log's start: restart there.
        let f = log(500, 600, &[(4, 500)]);
        assert_eq!(
            truncation_decision(&f, Some((4, 450))),
            TruncateFully { offset: 450 }
        );
        // Asked about an epoch below the leader's first: Kafka answers with the start
        // of its first epoch, which this log knows nothing below either.
        let f = log(0, 50, &[(1, 0)]);
        assert_eq!(
            truncation_decision(&f, Some((1, 30))),
            Truncate { offset: 30 }
        );
        // The follower has no epochs at all.
        let f = log(0, 0, &[]);
        assert_eq!(
            truncation_decision(&f, Some((3, 10))),
            Truncate { offset: 0 }
        );
        // An undefined answer truncates nothing.
        let f = log(0, 50, &[(1, 0)]);
        assert_eq!(truncation_decision(&f, None), Undefined);
    }

    #[test]
    fn out_of_range() {
        use OutOfRangeAction::*;
        assert_eq!(out_of_range_action(100, 0, 80), TruncateTo(80));
        assert_eq!(
            out_of_range_action(100, 150, 200),
            TruncateFullyAndStartAt(150)
        );
        assert_eq!(out_of_range_action(100, 50, 200), FetchFrom(100));
    }
}
