//! Persistence in `__consumer_offsets`: the group metadata records to write (after a
//! generation completes), and the load that rebuilds groups and committed offsets by
//! replaying the log (Kafka's `GroupMetadataManager.loadGroupsAndOffsets`; the records
//! of transactional batches and the control batches that end them are replayed by
//! [`super::txn`]).

use std::collections::BTreeSet;

use bytes::Bytes;

use super::group::compute_subscribed_topics;
use super::{Group, GroupCoordinator, GroupState, Member};
use crate::records::{self, ConsumerOffsetsRecord, DecodeError, GroupMetadataValue, StoredMember};

impl Group {
    /// The persisted form of the group.
    fn metadata_value(&self) -> GroupMetadataValue {
        let protocol = self.protocol_name.as_deref();
        GroupMetadataValue {
            protocol_type: self.protocol_type.clone().unwrap_or_default(),
            generation_id: self.generation_id,
            protocol_name: self.protocol_name.clone(),
            leader: self.leader_id.clone(),
            current_state_timestamp_ms: self.state_timestamp_ms,
            members: self
                .members
                .values()
                .map(|m| StoredMember {
                    member_id: m.member_id.clone(),
                    group_instance_id: m.group_instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    rebalance_timeout_ms: m.rebalance_timeout_ms,
                    session_timeout_ms: m.session_timeout_ms,
                    subscription: m.metadata_for(protocol),
                    assignment: m.assignment.clone(),
                })
                .collect(),
        }
    }
}

impl GroupCoordinator {
    /// The group metadata record (key, value) to persist the group's current state in
    /// `__consumer_offsets` (e.g. after a generation completes), `None` if unknown.
    pub fn group_metadata_record(&self, group_id: &str) -> Option<(Bytes, Bytes)> {
        let g = self.groups.get(group_id)?;
        Some(records::group_metadata_record(
            group_id,
            &g.metadata_value(),
        ))
    }

    /// The group metadata records to write now: every group that became Stable in a
    /// generation not yet written, and every group that became Empty after a Stable
    /// generation was written. Marks them written (write them before the next call).
    pub fn take_persist(&mut self) -> Vec<(Bytes, Bytes)> {
        let mut out = Vec::new();
        for g in self.groups.values_mut() {
            let stable = match g.state {
                GroupState::Stable => true,
                GroupState::Empty => false,
                _ => continue,
            };
            let due = match &g.persisted {
                None => stable,
                Some((generation, held, _, _)) => {
                    if stable {
                        *generation != g.generation_id || !held
                    } else {
                        *held
                    }
                }
            };
            if due {
                let (k, v) = records::group_metadata_record(&g.group_id, &g.metadata_value());
                g.persisted = Some((g.generation_id, stable, k.clone(), v.clone()));
                out.push((k, v));
            }
        }
        out
    }

    /// Ends a load: members restored by [`Self::replay`] get a full session from `now`
    /// (their heartbeats went to the previous coordinator). Transactional offsets whose
    /// marker was not in the log stay pending: their transaction is still open, and its
    /// marker comes later through [`complete_txn`](Self::complete_txn).
    pub fn loaded(&mut self, now: i64) {
        for g in self.groups.values_mut() {
            for m in g.members.values_mut() {
                m.heartbeat_deadline_ms = now + i64::from(m.session_timeout_ms);
            }
        }
    }

    /// Restores a Stable generation's members from its metadata record.
    fn restore_members(&mut self, group_id: &str, v: records::GroupMetadataValue) {
        let mut seq = self.next_member_seq;
        let g = self.group_or_create(group_id);
        g.clear_members();
        g.protocol_type = (!v.protocol_type.is_empty()).then_some(v.protocol_type.clone());
        g.generation_id = v.generation_id;
        g.state_timestamp_ms = v.current_state_timestamp_ms;
        let restorable = v.protocol_name.is_some()
            && !v.members.is_empty()
            && v.leader
                .as_ref()
                .is_some_and(|l| v.members.iter().any(|m| &m.member_id == l))
            && {
                // One member id or instance id twice is no record this coordinator
                // wrote: restoring it would leave a static mapping dangling.
                let mut ids = BTreeSet::new();
                let mut instances = BTreeSet::new();
                v.members.iter().all(|m| {
                    ids.insert(m.member_id.as_str())
                        && m.group_instance_id
                            .as_deref()
                            .is_none_or(|i| instances.insert(i))
                })
            };
        if !restorable {
            return;
        }
        let protocol = v.protocol_name.clone().unwrap_or_default();
        for m in v.members {
            seq += 1;
            if let Some(i) = &m.group_instance_id {
                g.static_members.insert(i.clone(), m.member_id.clone());
            }
            g.members.insert(
                m.member_id.clone(),
                Member {
                    member_id: m.member_id,
                    group_instance_id: m.group_instance_id,
                    client_id: m.client_id,
                    client_host: m.client_host,
                    protocol_type: v.protocol_type.clone(),
                    protocols: vec![(protocol.clone(), m.subscription)],
                    session_timeout_ms: m.session_timeout_ms,
                    rebalance_timeout_ms: m.rebalance_timeout_ms,
                    assignment: m.assignment,
                    assignment_generation: v.generation_id,
                    join_ticket: None,
                    sync_ticket: None,
                    heartbeat_deadline_ms: 0,
                    seq,
                },
            );
        }
        g.protocol_name = Some(protocol);
        g.leader_id = v.leader;
        g.subscribed_topics = compute_subscribed_topics(g);
        g.state = GroupState::Stable;
        self.next_member_seq = seq;
    }

    /// Rebuilds state from one `__consumer_offsets` record (`value == None` is a
    /// tombstone), in log order; end a load with [`Self::loaded`]. Offsets are restored
    /// exactly. A group metadata record replaces what an earlier one restored: a Stable
    /// generation's members come back as they were (so they carry on, heartbeating with
    /// their member ids and generation, without a rebalance, as with Kafka's
    /// coordinator); an Empty one restores the group with its protocol type and
    /// generation but no members. A group tombstone removes the group unless offsets
    /// remain. An offset tombstone also drops the partition's pending transactional
    /// offsets (Kafka's `OffsetMetadataManager.replay`), and a group tombstone all of the
    /// group's, as [`delete_groups`](Self::delete_groups) does.
    ///
    /// For the records of a transactional batch use [`replay_txn`](Self::replay_txn),
    /// for control batches [`replay_marker`](Self::replay_marker). A commit replayed here
    /// counts as written after every record and marker replayed before it (see
    /// [`commit`](Self::commit)), so replay in log order.
    pub fn replay(&mut self, key: &[u8], value: Option<&[u8]>) -> Result<(), DecodeError> {
        let raw = value;
        match records::decode_record(key, value)? {
            ConsumerOffsetsRecord::Offset {
                group_id,
                topic,
                partition,
                value,
            } => match value {
                Some(offset) => self.commit(&group_id, &topic, partition, offset),
                None => {
                    if let Some(g) = self.groups.get_mut(&group_id) {
                        g.offsets.remove(&(topic.clone(), partition));
                        g.drop_pending_txn(&topic, partition);
                    }
                }
            },
            ConsumerOffsetsRecord::Group { group_id, value } => match value {
                Some(v) => {
                    let stable = !v.members.is_empty();
                    let record =
                        raw.map(|b| (Bytes::copy_from_slice(key), Bytes::copy_from_slice(b)));
                    self.restore_members(&group_id, v);
                    if let (Some(g), Some((k, b))) = (self.groups.get_mut(&group_id), record) {
                        let held = stable && g.state == GroupState::Stable;
                        g.persisted = Some((g.generation_id, held, k, b));
                    }
                }
                None => {
                    // The group was deleted (only an Empty group can be): no members
                    // come back, whatever an earlier record restored, and no pending
                    // transactional offset (delete_groups dropped them).
                    if let Some(g) = self.groups.get_mut(&group_id) {
                        g.pending_txn.clear();
                    }
                    let remove = self
                        .groups
                        .get(&group_id)
                        .is_some_and(|g| g.offsets.is_empty());
                    if remove {
                        self.groups.remove(&group_id);
                    } else if let Some(g) = self.groups.get_mut(&group_id) {
                        g.clear_members();
                        g.protocol_type = None;
                        g.persisted = None;
                    }
                }
            },
        }
        Ok(())
    }
}
