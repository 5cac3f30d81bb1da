//! Object names (docs/architecture.md, "Object layout in the bucket"), relative to the
//! store's root (bucket plus prefix):
//!
//! ```text
//! {cluster_id}/topics/{topic}-{topic_id}/topic.json                       name, id, partitions, configs
//! {cluster_id}/topics/{topic}-{topic_id}/{partition}/manifest/{seq:020}.delta|.snap
//! {cluster_id}/topics/{topic}-{topic_id}/{partition}/segments/{base:020}-{epoch}-{uuid}.log
//!                                                              .../{same}.index, .timeindex, .state, .epochs
//! ```

use strata_proto::{PartitionId, TopicId};

use crate::manifest::RemoteSegment;

/// Identifies a partition in the bucket.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PartitionKey {
    pub cluster_id: String,
    pub topic: String,
    pub topic_id: TopicId,
    pub partition: PartitionId,
}

impl PartitionKey {
    pub fn topic_prefix(&self) -> String {
        topic_prefix(&self.cluster_id, &self.topic, self.topic_id)
    }

    /// `{cluster}/topics/{topic}-{id}/{partition}`
    pub fn prefix(&self) -> String {
        format!("{}/{}", self.topic_prefix(), self.partition)
    }

    pub fn manifest_prefix(&self) -> String {
        format!("{}/manifest", self.prefix())
    }

    pub fn segments_prefix(&self) -> String {
        format!("{}/segments", self.prefix())
    }

    /// The key of one of a segment's objects; `ext` is "log", "index", "timeindex" or
    /// "state".
    pub fn segment_object(&self, s: &RemoteSegment, ext: &str) -> String {
        format!("{}/{}.{ext}", self.segments_prefix(), s.object_stem())
    }
}

pub fn topic_prefix(cluster_id: &str, topic: &str, topic_id: TopicId) -> String {
    format!("{cluster_id}/topics/{topic}-{topic_id}")
}

pub fn topic_descriptor(cluster_id: &str, topic: &str, topic_id: TopicId) -> String {
    format!("{}/topic.json", topic_prefix(cluster_id, topic, topic_id))
}

/// The extensions of a segment's objects.
pub const SEGMENT_OBJECTS: [&str; 5] = ["log", "index", "timeindex", "state", "epochs"];

/// Splits `{topic}-{topic_id}` (the topic directory in the bucket).
pub fn parse_topic_dir(dir: &str) -> Option<(String, TopicId)> {
    let (topic, id) = dir.rsplit_once('-')?;
    Some((topic.to_string(), id.parse().ok()?))
}

/// The segment stem of an object name under `segments/` (for orphan cleanup).
pub fn segment_stem(name: &str) -> Option<&str> {
    let (stem, ext) = name.rsplit_once('.')?;
    SEGMENT_OBJECTS.contains(&ext).then_some(stem)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_design() {
        let k = PartitionKey {
            cluster_id: "c1".into(),
            topic: "orders.v2".into(),
            topic_id: TopicId(uuid::Uuid::from_u128(0xabc)),
            partition: 3,
        };
        let s = RemoteSegment {
            base_offset: 42,
            next_offset: 50,
            size_bytes: 1,
            max_timestamp: 0,
            leader_epoch: 7,
            id: uuid::Uuid::from_u128(1),
            has_producer_state: false,
            has_leader_epochs: false,
            has_txn_index: false,
            committed_at_ms: 0,
        };
        assert_eq!(
            k.manifest_prefix(),
            format!("c1/topics/orders.v2-{}/3/manifest", k.topic_id)
        );
        assert_eq!(
            k.segment_object(&s, "log"),
            format!(
                "c1/topics/orders.v2-{}/3/segments/00000000000000000042-7-{}.log",
                k.topic_id,
                s.id.simple()
            )
        );
        let dir = format!("orders.v2-{}", k.topic_id);
        assert_eq!(
            parse_topic_dir(&dir),
            Some(("orders.v2".to_string(), k.topic_id))
        );
        assert_eq!(segment_stem("x-1-abc.timeindex"), Some("x-1-abc"));
        assert_eq!(segment_stem("x.tmp"), None);
    }
}
