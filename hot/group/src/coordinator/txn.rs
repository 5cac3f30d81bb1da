//! Transactional offset commits (KIP-98, with KIP-447's group-aware TxnOffsetCommit and
//! unstable offsets): Kafka's `GroupMetadata.pendingTransactionalOffsetCommits` with
//! `prepareTxnOffsetCommit` / `completePendingTxnOffsetCommit`, and the pending
//! transactional offsets of the newer `OffsetMetadataManager` (including its replay of
//! transactional records and end-transaction markers).
//!
//! A TxnOffsetCommit writes ordinary offset commit records (same key and value as
//! OffsetCommit's) to `__consumer_offsets`, in a transactional batch of the producer.
//! Their offsets are *pending*: kept per producer id, not visible through
//! [`committed`](GroupCoordinator::committed) / [`offsets`](GroupCoordinator::offsets),
//! until the transaction's marker (a control batch) lands in that partition: COMMIT
//! makes them visible, ABORT drops them. The producer epoch is not checked here: the
//! partition log fences the transactional batch and the marker, and Kafka's coordinator
//! keys pending offsets by producer id alone.
//!
//! **Which commit wins** (Kafka's `CommitRecordMetadataAndOffset.olderThan`): a
//! partition's visible offset comes from the record at the highest offset in
//! `__consumer_offsets` among plain commits and the transactional commits whose
//! transaction committed; aborted or still open ones are never visible. Plain commits are
//! applied in log order, so each is the newest when applied. A transactional offset
//! becomes visible at its COMMIT marker only if its record is strictly newer than the
//! record of the visible offset: a plain commit (or another transaction's offset) written
//! after it, and applied before the marker, stays. The record offsets come from the
//! caller ([`GroupCoordinator::prepare_txn_commit`], [`GroupCoordinator::commit_at`],
//! the replay calls); a plain [`GroupCoordinator::commit`] counts as the newest record
//! so far.
//!
//! A pending offset also blocks that partition's expiry and the group's removal by
//! expiry; OffsetDelete and DeleteGroups drop it (as Kafka's `removeOffsets`; Kafka
//! deletes a group with pending transactional offsets, only members make it non-empty).

use strata_proto::ErrorCode;

use super::group::StoredOffset;
use super::{GroupCoordinator, GroupState};
use crate::records::{self, CommittedOffset, ConsumerOffsetsRecord, DecodeError};

/// What became of one pending transactional offset when its transaction ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TxnOffsetOutcome {
    /// COMMIT: the offset is now the visible one.
    Committed,
    /// COMMIT, but the visible offset came from a newer record, which stays.
    Superseded,
    /// ABORT: dropped.
    Aborted,
}

/// One pending transactional offset that a marker ended
/// ([`GroupCoordinator::complete_txn`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompletedTxnOffset {
    /// The group.
    pub group_id: String,
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: i32,
    /// The offset the transaction committed.
    pub offset: CommittedOffset,
    /// The offset of its record in `__consumer_offsets`.
    pub record_offset: i64,
    /// What became of it.
    pub outcome: TxnOffsetOutcome,
}

impl GroupCoordinator {
    /// TxnOffsetCommit validation (Kafka's `validateOffsetCommit` with `isTransactional`,
    /// KIP-447).
    ///
    /// Generation `-1` with an empty member id and no instance id carries no group
    /// information (a producer that does not pass the consumer's group metadata, or an
    /// older TxnOffsetCommit version): accepted whatever the group's state, and an
    /// unknown group is created Empty as for a standalone commit. Otherwise the member
    /// must be current (UNKNOWN_MEMBER_ID / FENCED_INSTANCE_ID) and of the current
    /// generation (ILLEGAL_GENERATION); an unknown group answers ILLEGAL_GENERATION. Unlike
    /// OffsetCommit, a rebalance in progress is no error and the commit is no heartbeat
    /// (as Kafka). On `None`, the caller appends the offset commit records in the
    /// producer's transactional batch and then calls
    /// [`prepare_txn_commit`](Self::prepare_txn_commit).
    pub fn validate_txn_commit(
        &mut self,
        now: i64,
        group_id: &str,
        generation_id: i32,
        member_id: &str,
        group_instance_id: Option<&str>,
    ) -> ErrorCode {
        if let Some(code) = self.commit_group_checks(now, group_id, generation_id) {
            return code;
        }
        self.with_group(now, group_id, |_, g| {
            if g.state == GroupState::Dead {
                return ErrorCode::CoordinatorNotAvailable;
            }
            if generation_id < 0 && member_id.is_empty() && group_instance_id.is_none() {
                return ErrorCode::None;
            }
            let err = g.validate_current_member(member_id, group_instance_id);
            if !err.is_ok() {
                return err;
            }
            if generation_id != g.generation_id {
                return ErrorCode::IllegalGeneration;
            }
            ErrorCode::None
        })
        .unwrap_or(ErrorCode::UnknownMemberId)
    }

    /// Records a TxnOffsetCommit's offsets as pending for `producer_id` (creating an
    /// Empty group if needed), once its records are in `__consumer_offsets`:
    /// `record_offset` is where they went (the batch's base offset, or any offset inside
    /// the batch: batches do not overlap). Not visible until
    /// [`complete_txn`](Self::complete_txn) commits the transaction. Within one producer,
    /// a partition committed again keeps the newer record's offset.
    pub fn prepare_txn_commit(
        &mut self,
        group_id: &str,
        producer_id: i64,
        record_offset: i64,
        offsets: impl IntoIterator<Item = (String, i32, CommittedOffset)>,
    ) {
        self.saw_record_offset(record_offset);
        let g = self.group_or_create(group_id);
        for (topic, partition, offset) in offsets {
            let pending = g.pending_txn.entry(producer_id).or_default();
            let newer = pending
                .get(&(topic.clone(), partition))
                .is_none_or(|o| o.record_offset <= record_offset);
            if newer {
                pending.insert(
                    (topic, partition),
                    StoredOffset {
                        offset,
                        record_offset,
                    },
                );
            }
        }
    }

    /// Ends `producer_id`'s transaction in every group of this coordinator, once its
    /// marker is in `__consumer_offsets` at `marker_offset` (WriteTxnMarkers for this
    /// offsets partition; Kafka's `handleTxnCompletion`). COMMIT (`commit == true`)
    /// makes each pending offset whose record is below the marker visible unless the
    /// visible offset of that partition came from a newer record
    /// ([`TxnOffsetOutcome::Superseded`]); ABORT drops them. Pending offsets whose record
    /// is above the marker belong to a later transaction and stay pending. A marker with
    /// nothing pending changes nothing. Returns what it ended, by group, topic and
    /// partition.
    pub fn complete_txn(
        &mut self,
        producer_id: i64,
        commit: bool,
        marker_offset: i64,
    ) -> Vec<CompletedTxnOffset> {
        self.saw_record_offset(marker_offset);
        let mut out = Vec::new();
        for g in self.groups.values_mut() {
            let Some(pending) = g.pending_txn.remove(&producer_id) else {
                continue;
            };
            let mut later = std::collections::BTreeMap::new();
            for (key, p) in pending {
                if p.record_offset > marker_offset {
                    later.insert(key, p);
                    continue;
                }
                let outcome = if !commit {
                    TxnOffsetOutcome::Aborted
                } else if g
                    .offsets
                    .get(&key)
                    .is_some_and(|v| v.record_offset >= p.record_offset)
                {
                    TxnOffsetOutcome::Superseded
                } else {
                    g.offsets.insert(key.clone(), p.clone());
                    TxnOffsetOutcome::Committed
                };
                out.push(CompletedTxnOffset {
                    group_id: g.group_id.clone(),
                    topic: key.0,
                    partition: key.1,
                    offset: p.offset,
                    record_offset: p.record_offset,
                    outcome,
                });
            }
            if !later.is_empty() {
                g.pending_txn.insert(producer_id, later);
            }
        }
        if !out.is_empty() {
            tracing::debug!(
                producer_id,
                commit,
                marker_offset,
                offsets = out.len(),
                "transactional offsets completed"
            );
        }
        out
    }

    /// Whether a transaction holds a pending offset for this group's partition (KIP-447:
    /// OffsetFetch with `require_stable` answers UNSTABLE_OFFSET_COMMIT for it).
    pub fn has_pending_txn_offsets(&self, group_id: &str, topic: &str, partition: i32) -> bool {
        self.groups
            .get(group_id)
            .is_some_and(|g| g.has_pending_txn(topic, partition))
    }

    /// A group's pending transactional offsets: `(producer id, topic, partition, offset)`,
    /// ordered by producer id, topic, partition.
    pub fn pending_txn_offsets(&self, group_id: &str) -> Vec<(i64, String, i32, CommittedOffset)> {
        self.groups
            .get(group_id)
            .map(|g| {
                g.pending_txn
                    .iter()
                    .flat_map(|(pid, p)| {
                        p.iter()
                            .map(|((t, i), o)| (*pid, t.clone(), *i, o.offset.clone()))
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Replays one record of a *transactional* batch of `__consumer_offsets` (the batch's
    /// producer id; `record_offset` is the record's offset), in log order with
    /// [`replay`](Self::replay) and [`replay_marker`](Self::replay_marker). An offset
    /// commit is held pending for the producer, as
    /// [`prepare_txn_commit`](Self::prepare_txn_commit) does; anything else (a tombstone,
    /// a group record: Kafka writes neither transactionally) is replayed as
    /// [`replay`](Self::replay) would. A negative producer id (no producer) replays the
    /// record as a plain commit at `record_offset`.
    pub fn replay_txn(
        &mut self,
        producer_id: i64,
        key: &[u8],
        value: Option<&[u8]>,
        record_offset: i64,
    ) -> Result<(), DecodeError> {
        let record = records::decode_record(key, value)?;
        match record {
            ConsumerOffsetsRecord::Offset {
                group_id,
                topic,
                partition,
                value: Some(offset),
            } => {
                if producer_id < 0 {
                    self.commit_at(&group_id, &topic, partition, offset, record_offset);
                } else {
                    self.prepare_txn_commit(
                        &group_id,
                        producer_id,
                        record_offset,
                        [(topic, partition, offset)],
                    );
                }
                Ok(())
            }
            _ => {
                self.saw_record_offset(record_offset);
                self.replay(key, value)
            }
        }
    }

    /// Replays a control batch of `__consumer_offsets`: `producer_id`'s transaction
    /// ended (COMMIT when `commit`) with its marker at `marker_offset`. The same as
    /// [`complete_txn`](Self::complete_txn), without the report.
    pub fn replay_marker(&mut self, producer_id: i64, commit: bool, marker_offset: i64) {
        self.complete_txn(producer_id, commit, marker_offset);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::GroupConfig;

    fn off(offset: i64) -> CommittedOffset {
        CommittedOffset {
            offset,
            leader_epoch: -1,
            metadata: None,
            commit_timestamp_ms: 0,
        }
    }

    fn record_offset(c: &GroupCoordinator, topic: &str, partition: i32) -> Option<i64> {
        c.groups["g"]
            .offsets
            .get(&(topic.to_string(), partition))
            .map(|o| o.record_offset)
    }

    /// A committed transactional offset keeps its record's offset (not the marker's),
    /// and the marker moves what an unplaced `commit` counts as.
    #[test]
    fn record_offsets_follow_the_log() {
        let mut c = GroupCoordinator::new(GroupConfig::default());
        c.commit("g", "t", 0, off(1));
        assert_eq!(record_offset(&c, "t", 0), Some(-1));
        c.prepare_txn_commit("g", 1, 10, [("t".to_string(), 0, off(2))]);
        assert_eq!(c.last_record_offset, 10);
        c.complete_txn(1, true, 20);
        assert_eq!(record_offset(&c, "t", 0), Some(10));
        assert_eq!(c.last_record_offset, 20);
        c.commit("g", "t", 1, off(3));
        assert_eq!(record_offset(&c, "t", 1), Some(20));
        // Within one producer, an older record does not replace a newer one.
        c.prepare_txn_commit("g", 2, 30, [("t".to_string(), 0, off(4))]);
        c.prepare_txn_commit("g", 2, 25, [("t".to_string(), 0, off(5))]);
        assert_eq!(
            c.groups["g"].pending_txn[&2][&("t".to_string(), 0)].offset,
            off(4)
        );
        c.check_invariants().unwrap();
    }
}
