//! What a bucket knows about its topics, so a topic can be recovered from the bucket
//! alone (a broker whose data dir was lost, or a new cluster pointed at the bucket).
//!
//! Each tiered topic has a descriptor (name, id, partitions, configs, and the cluster id
//! its objects live under) in two places: next to its data
//! (`{cluster}/topics/{topic}-{id}/topic.json`; docs/architecture.md, "Object layout in
//! the bucket") and in a catalog keyed by topic name (`_catalog/topics/{topic}.json`), so
//! recovery finds a topic with one GET instead of listing the bucket (which may hold
//! millions of segment objects).

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use strata_proto::TopicId;
use strata_store::{BlobStore, ErrorKind, PutMode};

use crate::error::TierError;
use crate::layout;

/// A tiered topic's descriptor.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicDescriptor {
    pub version: u32,
    pub cluster_id: String,
    pub topic: String,
    pub topic_id: TopicId,
    pub partitions: i32,
    pub configs: BTreeMap<String, String>,
}

pub fn catalog_key(topic: &str) -> String {
    format!("_catalog/topics/{topic}.json")
}

/// Writes the descriptor in both places (the catalog last: it points at the data).
pub async fn write(store: &Arc<dyn BlobStore>, d: &TopicDescriptor) -> Result<(), TierError> {
    let bytes = Bytes::from(
        serde_json::to_vec_pretty(d).map_err(|e| TierError::Corrupt {
            key: catalog_key(&d.topic),
            reason: e.to_string(),
        })?,
    );
    store
        .put(
            &layout::topic_descriptor(&d.cluster_id, &d.topic, d.topic_id),
            bytes.clone(),
            PutMode::Overwrite,
        )
        .await?;
    store
        .put(&catalog_key(&d.topic), bytes, PutMode::Overwrite)
        .await?;
    Ok(())
}

/// The catalog's descriptor of `topic`, if the bucket has one.
pub async fn read(
    store: &Arc<dyn BlobStore>,
    topic: &str,
) -> Result<Option<TopicDescriptor>, TierError> {
    let k = catalog_key(topic);
    match store.get(&k).await {
        Ok(b) => serde_json::from_slice(&b)
            .map(Some)
            .map_err(|e| TierError::Corrupt {
                key: k,
                reason: e.to_string(),
            }),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Deletes every object of a deleted topic, and its catalog entry if that still names
/// this topic id (a topic re-created under the name keeps its own).
pub async fn delete_topic(
    store: &Arc<dyn BlobStore>,
    cluster_id: &str,
    topic: &str,
    topic_id: TopicId,
) -> Result<usize, TierError> {
    if let Some(d) = read(store, topic).await?
        && d.topic_id == topic_id
    {
        store.delete(&catalog_key(topic)).await?;
    }
    let mut n = 0;
    for o in store
        .list(&layout::topic_prefix(cluster_id, topic, topic_id))
        .await?
    {
        store.delete(&o.path).await?;
        n += 1;
    }
    Ok(n)
}
