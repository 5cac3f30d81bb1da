//! Cluster metadata: topics, their ids, partition counts and config overrides.
//!
//! The broker reads and changes metadata only through [`MetadataStore`]. In this release
//! the store is a local JSON file written atomically ([`FileMetadataStore`]); the
//! controller (an openraft quorum) replaces it behind the same trait.

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use strata_proto::{ErrorCode, TopicConfig, TopicId};

/// A topic as metadata knows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicMeta {
    pub name: String,
    pub id: TopicId,
    pub partitions: i32,
    /// Only the keys set on the topic; defaults are not stored.
    pub configs: BTreeMap<String, String>,
    /// The leader epoch of every partition (a single broker never changes leader).
    #[serde(default)]
    pub leader_epoch: i32,
    /// The cluster id under which the topic's objects live in the bucket: this cluster's,
    /// except for a topic recovered from another cluster's bucket contents.
    #[serde(default)]
    pub storage_cluster_id: Option<String>,
}

/// Why a metadata change was refused.
#[derive(Debug, thiserror::Error)]
pub enum MetadataError {
    #[error("topic '{0}' already exists")]
    TopicExists(String),
    #[error("topic '{0}' does not exist")]
    UnknownTopic(String),
    #[error("invalid topic name '{name}': {reason}")]
    InvalidTopicName { name: String, reason: &'static str },
    #[error("invalid partition count {count}: {reason}")]
    InvalidPartitions { count: i32, reason: String },
    #[error(transparent)]
    InvalidConfig(#[from] strata_proto::ConfigError),
    #[error("metadata storage failed ({path}): {source}")]
    Storage {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("metadata file {path} is unreadable: {reason}")]
    Corrupt { path: PathBuf, reason: String },
}

impl MetadataError {
    pub fn error_code(&self) -> ErrorCode {
        match self {
            MetadataError::TopicExists(_) => ErrorCode::TopicAlreadyExists,
            MetadataError::UnknownTopic(_) => ErrorCode::UnknownTopicOrPartition,
            MetadataError::InvalidTopicName { .. } => ErrorCode::InvalidTopicException,
            MetadataError::InvalidPartitions { .. } => ErrorCode::InvalidPartitions,
            MetadataError::InvalidConfig(e) => e.error_code(),
            MetadataError::Storage { .. } | MetadataError::Corrupt { .. } => {
                ErrorCode::UnknownServerError
            }
        }
    }
}

/// Kafka's rules for topic names (Topic.validate): 1..=249 characters of
/// `[a-zA-Z0-9._-]`, and not "." or "..".
pub fn validate_topic_name(name: &str) -> Result<(), MetadataError> {
    let bad = |reason| {
        Err(MetadataError::InvalidTopicName {
            name: name.to_string(),
            reason,
        })
    };
    if name.is_empty() {
        return bad("it is empty");
    }
    if name == "." || name == ".." {
        return bad("'.' and '..' are not allowed");
    }
    if name.len() > 249 {
        return bad("it is longer than 249 characters");
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
    {
        return bad("only ASCII letters, digits, '.', '_' and '-' are allowed");
    }
    Ok(())
}

/// The metadata the broker needs. Implementations are shared by every connection.
#[async_trait::async_trait]
pub trait MetadataStore: Send + Sync + std::fmt::Debug {
    /// The cluster's id (stable across restarts).
    fn cluster_id(&self) -> String;
    /// Every topic, as of now.
    fn topics(&self) -> Vec<TopicMeta>;
    /// Creates a topic. Configs are validated; the id is assigned here.
    async fn create_topic(
        &self,
        name: &str,
        partitions: i32,
        configs: BTreeMap<String, String>,
    ) -> Result<TopicMeta, MetadataError>;
    async fn delete_topic(&self, name: &str) -> Result<TopicMeta, MetadataError>;
    /// Adds a topic as described (id included): recovery of a topic from the bucket.
    async fn restore_topic(&self, meta: TopicMeta) -> Result<TopicMeta, MetadataError>;
    /// Grows a topic to `count` partitions (never shrinks, as in Kafka).
    async fn create_partitions(&self, name: &str, count: i32) -> Result<TopicMeta, MetadataError>;
    /// Replaces a topic's config overrides (validated).
    async fn set_configs(
        &self,
        name: &str,
        configs: BTreeMap<String, String>,
    ) -> Result<TopicMeta, MetadataError>;
    /// Reserves a block of producer ids; returns the first. Ids are never reused, even
    /// across restarts.
    async fn allocate_producer_ids(&self, count: i64) -> Result<i64, MetadataError>;
}

#[derive(Debug, Serialize, Deserialize)]
struct FileState {
    version: u32,
    cluster_id: String,
    next_producer_id: i64,
    topics: BTreeMap<String, TopicMeta>,
}

/// Metadata in one JSON file, replaced atomically (write, fsync, rename, fsync dir) on
/// every change.
#[derive(Debug)]
pub struct FileMetadataStore {
    path: PathBuf,
    state: Mutex<FileState>,
}

impl FileMetadataStore {
    /// Opens `dir/metadata.json`, creating it with a new cluster id if absent.
    pub fn open(dir: &Path) -> Result<Self, MetadataError> {
        let storage = |path: &Path| {
            let path = path.to_path_buf();
            move |source| MetadataError::Storage { path, source }
        };
        fs::create_dir_all(dir).map_err(storage(dir))?;
        let path = dir.join("metadata.json");
        let state = match fs::read(&path) {
            Ok(bytes) => {
                serde_json::from_slice::<FileState>(&bytes).map_err(|e| MetadataError::Corrupt {
                    path: path.clone(),
                    reason: e.to_string(),
                })?
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let s = FileState {
                    version: 1,
                    cluster_id: new_cluster_id(),
                    next_producer_id: 1000,
                    topics: BTreeMap::new(),
                };
                write_atomically(&path, &s)?;
                s
            }
            Err(e) => return Err(MetadataError::Storage { path, source: e }),
        };
        Ok(FileMetadataStore {
            path,
            state: Mutex::new(state),
        })
    }

    fn update<R>(
        &self,
        f: impl FnOnce(&mut FileState) -> Result<R, MetadataError>,
    ) -> Result<R, MetadataError> {
        let mut g = self.state.lock().unwrap_or_else(|e| e.into_inner());
        // Work on a copy so a failed write leaves memory and disk in agreement.
        let mut next = FileState {
            version: g.version,
            cluster_id: g.cluster_id.clone(),
            next_producer_id: g.next_producer_id,
            topics: g.topics.clone(),
        };
        let r = f(&mut next)?;
        write_atomically(&self.path, &next)?;
        *g = next;
        Ok(r)
    }
}

fn new_cluster_id() -> String {
    // Kafka cluster ids are 22-character URL-safe base64 UUIDs; any stable string works.
    let id = uuid::Uuid::new_v4();
    id.simple().to_string()[..22].to_string()
}

fn write_atomically(path: &Path, state: &FileState) -> Result<(), MetadataError> {
    let err = |source| MetadataError::Storage {
        path: path.to_path_buf(),
        source,
    };
    let tmp = path.with_extension("json.tmp");
    let bytes = serde_json::to_vec_pretty(state).map_err(|e| MetadataError::Corrupt {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    let mut f = fs::File::create(&tmp).map_err(err)?;
    f.write_all(&bytes).map_err(err)?;
    f.sync_all().map_err(err)?;
    fs::rename(&tmp, path).map_err(err)?;
    if let Some(dir) = path.parent() {
        fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(err)?;
    }
    Ok(())
}

#[async_trait::async_trait]
impl MetadataStore for FileMetadataStore {
    fn cluster_id(&self) -> String {
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .cluster_id
            .clone()
    }

    fn topics(&self) -> Vec<TopicMeta> {
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .topics
            .values()
            .cloned()
            .collect()
    }

    async fn create_topic(
        &self,
        name: &str,
        partitions: i32,
        configs: BTreeMap<String, String>,
    ) -> Result<TopicMeta, MetadataError> {
        validate_topic_name(name)?;
        if partitions < 1 {
            return Err(MetadataError::InvalidPartitions {
                count: partitions,
                reason: "must be at least 1".into(),
            });
        }
        TopicConfig::resolve(&configs)?;
        self.update(|s| {
            if s.topics.contains_key(name) {
                return Err(MetadataError::TopicExists(name.to_string()));
            }
            let meta = TopicMeta {
                name: name.to_string(),
                id: TopicId::random(),
                partitions,
                configs,
                leader_epoch: 0,
                storage_cluster_id: None,
            };
            s.topics.insert(name.to_string(), meta.clone());
            Ok(meta)
        })
    }

    async fn delete_topic(&self, name: &str) -> Result<TopicMeta, MetadataError> {
        self.update(|s| {
            s.topics
                .remove(name)
                .ok_or_else(|| MetadataError::UnknownTopic(name.to_string()))
        })
    }

    async fn restore_topic(&self, meta: TopicMeta) -> Result<TopicMeta, MetadataError> {
        validate_topic_name(&meta.name)?;
        TopicConfig::resolve(&meta.configs)?;
        self.update(|s| {
            if s.topics.contains_key(&meta.name) {
                return Err(MetadataError::TopicExists(meta.name.clone()));
            }
            s.topics.insert(meta.name.clone(), meta.clone());
            Ok(meta)
        })
    }

    async fn create_partitions(&self, name: &str, count: i32) -> Result<TopicMeta, MetadataError> {
        self.update(|s| {
            let t = s
                .topics
                .get_mut(name)
                .ok_or_else(|| MetadataError::UnknownTopic(name.to_string()))?;
            if count <= t.partitions {
                return Err(MetadataError::InvalidPartitions {
                    count,
                    reason: format!(
                        "topic '{name}' has {} partitions; the count can only grow",
                        t.partitions
                    ),
                });
            }
            t.partitions = count;
            Ok(t.clone())
        })
    }

    async fn set_configs(
        &self,
        name: &str,
        configs: BTreeMap<String, String>,
    ) -> Result<TopicMeta, MetadataError> {
        TopicConfig::resolve(&configs)?;
        self.update(|s| {
            let t = s
                .topics
                .get_mut(name)
                .ok_or_else(|| MetadataError::UnknownTopic(name.to_string()))?;
            t.configs = configs;
            Ok(t.clone())
        })
    }

    async fn allocate_producer_ids(&self, count: i64) -> Result<i64, MetadataError> {
        self.update(|s| {
            let first = s.next_producer_id;
            s.next_producer_id += count;
            Ok(first)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_names_follow_kafka_rules() {
        for ok in ["a", "orders.v2", "A_b-c", &"x".repeat(249)] {
            validate_topic_name(ok).unwrap();
        }
        for bad in ["", ".", "..", "has space", "ünï", "a/b", &"x".repeat(250)] {
            assert_eq!(
                validate_topic_name(bad).unwrap_err().error_code(),
                ErrorCode::InvalidTopicException
            );
        }
    }

    #[tokio::test]
    async fn file_store_survives_reopen_and_refuses_bad_changes() {
        let dir = tempfile::tempdir().unwrap();
        let s = FileMetadataStore::open(dir.path()).unwrap();
        let cid = s.cluster_id();
        let t = s
            .create_topic(
                "orders",
                3,
                BTreeMap::from([("retention.ms".into(), "1000".into())]),
            )
            .await
            .unwrap();
        assert_eq!(
            s.create_topic("orders", 1, BTreeMap::new())
                .await
                .unwrap_err()
                .error_code(),
            ErrorCode::TopicAlreadyExists
        );
        assert_eq!(
            s.create_topic("x", 1, BTreeMap::from([("nope".into(), "1".into())]))
                .await
                .unwrap_err()
                .error_code(),
            ErrorCode::InvalidConfig
        );
        assert_eq!(
            s.create_partitions("orders", 2)
                .await
                .unwrap_err()
                .error_code(),
            ErrorCode::InvalidPartitions
        );
        s.create_partitions("orders", 5).await.unwrap();
        let p1 = s.allocate_producer_ids(100).await.unwrap();
        drop(s);
        let s = FileMetadataStore::open(dir.path()).unwrap();
        assert_eq!(s.cluster_id(), cid);
        let topics = s.topics();
        assert_eq!(topics.len(), 1);
        assert_eq!(topics[0].id, t.id);
        assert_eq!(topics[0].partitions, 5);
        assert!(
            s.allocate_producer_ids(1).await.unwrap() >= p1 + 100,
            "producer ids are never reused"
        );
        s.delete_topic("orders").await.unwrap();
        assert!(s.topics().is_empty());
    }
}
