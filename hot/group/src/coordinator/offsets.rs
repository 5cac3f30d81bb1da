//! Committed offsets: OffsetCommit validation, storing and reading offsets,
//! OffsetDelete, and their expiry (KIP-211).
//!
//! Every visible offset remembers the offset of the `__consumer_offsets` record that
//! carried it (Kafka's `CommitRecordMetadataAndOffset`). Plain commits are applied in
//! log order, so each one is the newest; the record offset matters when a transactional
//! commit becomes visible at its marker, after plain commits written since its record
//! (see [`super::txn`]).

use strata_proto::ErrorCode;

use super::group::StoredOffset;
use super::{CONSUMER_PROTOCOL_TYPE, Group, GroupCoordinator, GroupState};
use crate::records::CommittedOffset;

/// What expired of one group ([`GroupCoordinator::expired_offsets`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExpiredOffsets {
    pub group_id: String,
    /// (topic, partition, the commit's timestamp): an offset committed again since is
    /// not removed.
    pub offsets: Vec<(String, i32, i64)>,
    /// Every offset of the group expired and it has no members: the group goes too (its
    /// tombstone is written with the offsets').
    pub group: bool,
}

impl GroupCoordinator {
    /// The checks every offset commit, plain or transactional, starts with: an empty
    /// group id is INVALID_GROUP_ID; an unknown group is created Empty for a standalone
    /// commit (a negative generation) and is ILLEGAL_GENERATION otherwise. `Some`: the
    /// answer; `None`: the group exists, and the caller checks its member.
    pub(super) fn commit_group_checks(
        &mut self,
        now: i64,
        group_id: &str,
        generation_id: i32,
    ) -> Option<ErrorCode> {
        if group_id.is_empty() {
            return Some(ErrorCode::InvalidGroupId);
        }
        if self.groups.contains_key(group_id) {
            return None;
        }
        if generation_id < 0 {
            self.groups
                .insert(group_id.to_string(), Group::new(group_id, now));
            return Some(ErrorCode::None);
        }
        Some(ErrorCode::IllegalGeneration)
    }

    /// OffsetCommit validation (Kafka's `validateOffsetCommit` + `doCommitOffsets`).
    ///
    /// Generation `-1` with an empty member id and no instance id is a standalone
    /// ("simple") commit: allowed when the group is unknown (an Empty group is created)
    /// or Empty. Otherwise the member must be current (UNKNOWN_MEMBER_ID /
    /// FENCED_INSTANCE_ID), of the current generation (ILLEGAL_GENERATION), and the group
    /// not waiting for the leader's assignment (REBALANCE_IN_PROGRESS). A valid member
    /// commit counts as a heartbeat. On `None`, the caller stores the offsets with
    /// [`commit`](Self::commit) or [`commit_at`](Self::commit_at) (after persisting
    /// them).
    pub fn validate_commit(
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
            if generation_id >= 0 || !member_id.is_empty() || group_instance_id.is_some() {
                let err = g.validate_current_member(member_id, group_instance_id);
                if !err.is_ok() {
                    return err;
                }
                if generation_id != g.generation_id {
                    return ErrorCode::IllegalGeneration;
                }
            } else if g.state != GroupState::Empty {
                // A non-empty group only accepts commits from its members.
                return ErrorCode::UnknownMemberId;
            } else {
                return ErrorCode::None;
            }
            if g.state == GroupState::CompletingRebalance {
                return ErrorCode::RebalanceInProgress;
            }
            match g.members.get_mut(member_id) {
                Some(m) => {
                    m.heartbeat_deadline_ms = now + i64::from(m.session_timeout_ms);
                    ErrorCode::None
                }
                None => ErrorCode::UnknownMemberId,
            }
        })
        .unwrap_or(ErrorCode::UnknownMemberId)
    }

    /// Stores a committed offset (creating an Empty group if needed) whose record's
    /// offset in `__consumer_offsets` is not given: it counts as written after every
    /// record and marker this coordinator has been told of so far (the highest offset
    /// passed to [`commit_at`](Self::commit_at),
    /// [`prepare_txn_commit`](Self::prepare_txn_commit),
    /// [`complete_txn`](Self::complete_txn), [`replay_txn`](Self::replay_txn) or
    /// [`replay_marker`](Self::replay_marker)), which is right as long as calls come in
    /// log order. A transactional offset whose record is at that offset or below does
    /// not replace it when its transaction commits.
    pub fn commit(&mut self, group_id: &str, topic: &str, partition: i32, offset: CommittedOffset) {
        let record_offset = self.last_record_offset;
        self.store_plain(group_id, topic, partition, offset, record_offset);
    }

    /// Stores a committed offset (creating an Empty group if needed) whose record sits
    /// at `record_offset` in `__consumer_offsets`. Newer wins: it replaces the visible
    /// offset unless that one came from a record at a strictly higher offset (a
    /// transactional commit whose record was written after this one and committed
    /// before it was applied); returns whether it did.
    pub fn commit_at(
        &mut self,
        group_id: &str,
        topic: &str,
        partition: i32,
        offset: CommittedOffset,
        record_offset: i64,
    ) -> bool {
        self.saw_record_offset(record_offset);
        self.store_plain(group_id, topic, partition, offset, record_offset)
    }

    fn store_plain(
        &mut self,
        group_id: &str,
        topic: &str,
        partition: i32,
        offset: CommittedOffset,
        record_offset: i64,
    ) -> bool {
        let slot = self
            .group_or_create(group_id)
            .offsets
            .entry((topic.to_string(), partition));
        match slot {
            std::collections::btree_map::Entry::Occupied(mut o) => {
                if o.get().record_offset > record_offset {
                    return false;
                }
                o.insert(StoredOffset {
                    offset,
                    record_offset,
                });
            }
            std::collections::btree_map::Entry::Vacant(v) => {
                v.insert(StoredOffset {
                    offset,
                    record_offset,
                });
            }
        }
        true
    }

    /// Notes that `__consumer_offsets` reached `record_offset`.
    pub(super) fn saw_record_offset(&mut self, record_offset: i64) {
        self.last_record_offset = self.last_record_offset.max(record_offset);
    }

    /// The committed offset of one partition.
    pub fn committed(
        &self,
        group_id: &str,
        topic: &str,
        partition: i32,
    ) -> Option<CommittedOffset> {
        self.groups
            .get(group_id)?
            .offsets
            .get(&(topic.to_string(), partition))
            .map(|o| o.offset.clone())
    }

    /// Every committed offset of a group, ordered by topic then partition.
    pub fn offsets(&self, group_id: &str) -> Vec<(String, i32, CommittedOffset)> {
        self.groups
            .get(group_id)
            .map(|g| {
                g.offsets
                    .iter()
                    .map(|((t, p), o)| (t.clone(), *p, o.offset.clone()))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// OffsetDelete (Kafka's `handleDeleteOffsets`): returns the top-level error and one
    /// error per partition. Consumer groups keep offsets of topics a member subscribes to
    /// (GROUP_SUBSCRIBED_TO_TOPIC; subscriptions that do not parse count as subscribed to
    /// everything); other non-empty groups answer NON_EMPTY_GROUP. The caller writes
    /// [`offset_tombstone`](crate::offset_tombstone)s for the partitions answered `None`.
    /// A deleted partition's pending transactional offsets go too (Kafka's
    /// `removeOffsets`; a replayed offset tombstone drops them as well).
    pub fn delete_offsets(
        &mut self,
        group_id: &str,
        partitions: &[(String, i32)],
    ) -> (ErrorCode, Vec<(String, i32, ErrorCode)>) {
        let Some(g) = self.groups.get_mut(group_id) else {
            return (ErrorCode::GroupIdNotFound, Vec::new());
        };
        if g.state == GroupState::Dead {
            return (ErrorCode::GroupIdNotFound, Vec::new());
        }
        let consumer = g.protocol_type.as_deref() == Some(CONSUMER_PROTOCOL_TYPE);
        if !consumer && g.state != GroupState::Empty {
            return (ErrorCode::NonEmptyGroup, Vec::new());
        }
        let results = partitions
            .iter()
            .map(|(topic, partition)| {
                let subscribed = consumer
                    && g.state != GroupState::Empty
                    && g.subscribed_topics
                        .as_ref()
                        .is_none_or(|t| t.contains(topic));
                if subscribed {
                    (topic.clone(), *partition, ErrorCode::GroupSubscribedToTopic)
                } else {
                    g.offsets.remove(&(topic.clone(), *partition));
                    g.drop_pending_txn(topic, *partition);
                    (topic.clone(), *partition, ErrorCode::None)
                }
            })
            .collect();
        (ErrorCode::None, results)
    }

    /// The committed offsets that have expired at `now` (Kafka's
    /// `offsets.retention.minutes` as KIP-211 has it): a group with members keeps every
    /// offset, however old; a consumer group (one that had members) loses all of them
    /// once it has been Empty for `retention_ms`; a group of standalone commits (no
    /// protocol: consumers using assign()) loses each one `retention_ms` after it was
    /// committed. A partition with a pending transactional offset does not expire, and
    /// a group with any is not removed (as Kafka's
    /// `OffsetMetadataManager.cleanupExpiredOffsets`: the marker will bring a fresh
    /// offset or nothing). Changes nothing: the caller writes the tombstones, then
    /// removes them with [`Self::remove_expired`].
    pub fn expired_offsets(&self, now: i64, retention_ms: i64) -> Vec<ExpiredOffsets> {
        let mut out = Vec::new();
        for g in self.groups.values() {
            if g.state != GroupState::Empty || !g.members.is_empty() {
                continue;
            }
            let empty_too_long = now.saturating_sub(g.state_timestamp_ms) >= retention_ms;
            let offsets: Vec<(String, i32, i64)> = g
                .offsets
                .iter()
                // A group that ever had a generation had members (standalone commits
                // never start one); Kafka tells them apart by the protocol type, which
                // this coordinator clears when the last member goes.
                .filter(|((t, p), o)| {
                    let due = if g.generation_id > 0 {
                        empty_too_long
                    } else {
                        now.saturating_sub(o.offset.commit_timestamp_ms) >= retention_ms
                    };
                    due && !g.has_pending_txn(t, *p)
                })
                .map(|((t, p), o)| (t.clone(), *p, o.offset.commit_timestamp_ms))
                .collect();
            if offsets.is_empty() {
                continue;
            }
            let group = offsets.len() == g.offsets.len() && g.pending_txn.is_empty();
            out.push(ExpiredOffsets {
                group_id: g.group_id.clone(),
                offsets,
                group,
            });
        }
        out
    }

    /// Removes what [`Self::expired_offsets`] found, once its tombstones are written:
    /// an offset only if it was not committed again meanwhile, a group only if it is
    /// still Empty and has no offsets left, pending transactional ones included.
    pub fn remove_expired(&mut self, expired: &[ExpiredOffsets]) {
        for e in expired {
            let Some(g) = self.groups.get_mut(&e.group_id) else {
                continue;
            };
            for (t, p, ts) in &e.offsets {
                let key = (t.clone(), *p);
                if g.offsets
                    .get(&key)
                    .is_some_and(|o| o.offset.commit_timestamp_ms == *ts)
                {
                    g.offsets.remove(&key);
                }
            }
            if e.group
                && g.state == GroupState::Empty
                && g.members.is_empty()
                && g.offsets.is_empty()
                && g.pending_txn.is_empty()
            {
                self.groups.remove(&e.group_id);
            }
        }
    }
}
