//! The replicated metadata state and the commands that change it.
//!
//! Everything here is pure: [`ClusterMetadata::apply`] is a function of the state, the
//! command and the command's raft log index, so every voter that applies the same log
//! holds the same state. Randomness (topic ids, the cluster id) and time (liveness) are
//! decided by the leader before it proposes a command, and travel inside it.
//!
//! Partition changes follow Kafka's KRaft controller (ReplicationControlManager and
//! PartitionChangeBuilder):
//! * every leadership change bumps the leader epoch; every change of leader or ISR bumps
//!   the partition epoch (KIP-497's version of the partition state);
//! * a fenced broker leaves every ISR, except that the last ISR member stays (it holds
//!   every acknowledged record, so it is the one to elect when it returns), and loses
//!   every leadership;
//! * leaders are elected from the ISR, in replica order, among unfenced brokers; with
//!   unclean.leader.election.enable=true and no such member, from any unfenced replica
//!   (whose ISR becomes itself alone); otherwise the partition has no leader (offline).
//!
//! The parts, one file each:
//! * `records`: [`ClusterMetadata`] and the records in it (brokers, topics, partitions).
//! * `commands`: [`Command`], what commands carry and return, and [`MetadataDelta`].
//! * `validation`: topic names and configs, broker configs, replica assignments.
//! * `apply`: [`ClusterMetadata::apply`] and what each command does.
//! * `leadership`: leader elections and ISR changes.
//! * `reassignment`: moving a partition's replicas (KIP-455).

mod apply;
mod commands;
mod leadership;
mod reassignment;
mod records;
mod validation;

#[cfg(test)]
mod tests;

pub use commands::{
    AlterPartitionRequest, Command, CommandOutput, CommandResult, DeltaError, ElectionError,
    ElectionOutcome, ElectionType, MetadataDelta, MetadataUpdate, NewTopic, Reassignment,
    ReassignmentOutcome,
};
pub use records::{
    BrokerRecord, ClusterMetadata, Endpoint, NO_LEADER, PartitionRecord, TopicRecord,
};
pub use validation::{
    DYNAMIC_BROKER_CONFIGS, validate_broker_configs, validate_configs, validate_topic_name,
};
