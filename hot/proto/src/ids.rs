//! Identifiers.
//!
//! Offsets, epochs and producer ids are plain integer aliases with the exact widths the
//! Kafka protocol uses, so values move between the wire structs of the kafka-protocol
//! crate and our own code without conversions. The topic id is a newtype because a
//! UUID is easy to confuse with other 16-byte values.

use std::fmt;
use std::sync::Arc;

/// A record's position in a partition. Dense and monotonic (docs/architecture.md, "The
/// log model").
pub type Offset = i64;
/// A partition's index within its topic.
pub type PartitionId = i32;
/// The leader epoch: bumped on every leadership change of a partition.
pub type LeaderEpoch = i32;
/// An idempotent/transactional producer's id, handed out by InitProducerId.
pub type ProducerId = i64;
/// The producer's epoch, bumped when a producer id is re-initialised.
pub type ProducerEpoch = i16;

/// The "no producer" id Kafka puts in batches from non-idempotent producers.
pub const NO_PRODUCER_ID: ProducerId = -1;
/// The "no epoch" value used on the wire.
pub const NO_PARTITION_LEADER_EPOCH: LeaderEpoch = -1;

/// A topic's immutable id (KIP-516). Distinguishes a topic from an earlier one that had
/// the same name and was deleted.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct TopicId(pub uuid::Uuid);

impl TopicId {
    /// The all-zero id Kafka uses for "no topic id".
    pub const ZERO: TopicId = TopicId(uuid::Uuid::nil());

    /// A fresh random id.
    pub fn random() -> Self {
        TopicId(uuid::Uuid::new_v4())
    }

    /// Whether this is the all-zero "unset" id.
    pub fn is_zero(&self) -> bool {
        self.0.is_nil()
    }
}

impl fmt::Debug for TopicId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TopicId({})", self.0)
    }
}

impl fmt::Display for TopicId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0.simple(), f)
    }
}

impl std::str::FromStr for TopicId {
    type Err = uuid::Error;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        uuid::Uuid::parse_str(s).map(TopicId)
    }
}

impl serde::Serialize for TopicId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for TopicId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// A topic name and partition index.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct TopicPartition {
    pub topic: Arc<str>,
    pub partition: PartitionId,
}

impl TopicPartition {
    pub fn new(topic: impl Into<Arc<str>>, partition: PartitionId) -> Self {
        TopicPartition {
            topic: topic.into(),
            partition,
        }
    }
}

impl fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_id_round_trips_through_text() {
        let id = TopicId::random();
        let parsed: TopicId = id.to_string().parse().unwrap();
        assert_eq!(id, parsed);
        assert!(!id.is_zero());
        assert!(TopicId::ZERO.is_zero());
    }

    #[test]
    fn topic_partition_displays_like_kafka_directories() {
        assert_eq!(TopicPartition::new("orders", 7).to_string(), "orders-7");
    }
}
