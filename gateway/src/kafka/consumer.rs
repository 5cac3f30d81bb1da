//! One member of a consumer group: a librdkafka consumer of the broker's listener
//! behind [`GroupConsumer`], for v2 consumer instances and SSE streams.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::{Offset, TopicPartitionList};

use super::{blocking_err, err, poll_into};
use crate::service::{
    End, GroupConsumer, PartitionOffset, Record, ServiceError, TopicPartition, codes,
};

/// One group member.
pub(super) struct KafkaConsumer {
    /// Taken on drop: closing a consumer blocks (it leaves the group), so the last
    /// handle is dropped on the blocking pool, never on the runtime.
    c: Mutex<Option<Arc<BaseConsumer>>>,
    /// Records polled past a request's max_bytes, handed out first next time.
    pending: Arc<Mutex<VecDeque<Record>>>,
    timeout: Duration,
}

impl KafkaConsumer {
    pub(super) fn new(c: BaseConsumer, timeout: Duration) -> KafkaConsumer {
        KafkaConsumer {
            c: Mutex::new(Some(Arc::new(c))),
            pending: Arc::default(),
            timeout,
        }
    }

    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&BaseConsumer) -> Result<T, ServiceError> + Send + 'static,
    ) -> Result<T, ServiceError> {
        let c = self
            .c
            .lock()
            .ok()
            .and_then(|c| c.clone())
            .ok_or_else(|| ServiceError::new(codes::LOCAL_STATE, "the consumer is closed"))?;
        tokio::task::spawn_blocking(move || f(&c))
            .await
            .map_err(blocking_err)?
    }

    fn clear_pending(&self) {
        if let Ok(mut p) = self.pending.lock() {
            p.clear();
        }
    }
}

impl Drop for KafkaConsumer {
    fn drop(&mut self) {
        let c = self.c.lock().ok().and_then(|mut c| c.take());
        if let (Some(c), Ok(rt)) = (c, tokio::runtime::Handle::try_current()) {
            rt.spawn_blocking(move || drop(c));
        }
    }
}

fn tpl_of(partitions: &[TopicPartition]) -> TopicPartitionList {
    let mut tpl = TopicPartitionList::new();
    for p in partitions {
        tpl.add_partition(&p.topic, p.partition);
    }
    tpl
}

fn partitions_of(tpl: &TopicPartitionList) -> Vec<TopicPartition> {
    tpl.elements()
        .iter()
        .map(|e| TopicPartition {
            topic: e.topic().to_string(),
            partition: e.partition(),
        })
        .collect()
}

#[async_trait]
impl GroupConsumer for KafkaConsumer {
    async fn subscribe(&self, topics: Vec<String>) -> Result<(), ServiceError> {
        self.clear_pending();
        self.blocking(move |c| {
            let t: Vec<&str> = topics.iter().map(String::as_str).collect();
            c.subscribe(&t).map_err(err)
        })
        .await
    }

    async fn subscribe_pattern(&self, pattern: &str) -> Result<(), ServiceError> {
        self.clear_pending();
        // librdkafka takes a subscription starting with '^' as a regular expression; the
        // anchors make it match whole names, as Confluent's (Java's Pattern.matches).
        let regex = format!("^({pattern})$");
        self.blocking(move |c| c.subscribe(&[regex.as_str()]).map_err(err))
            .await
    }

    async fn unsubscribe(&self) -> Result<(), ServiceError> {
        self.clear_pending();
        self.blocking(|c| {
            c.unsubscribe();
            Ok(())
        })
        .await
    }

    async fn subscription(&self) -> Result<Vec<String>, ServiceError> {
        self.blocking(|c| {
            let tpl = c.subscription().map_err(err)?;
            let pattern = tpl.elements().iter().any(|e| e.topic().starts_with('^'));
            // A pattern subscription lists the matching topics this member is assigned.
            let tpl = if pattern {
                c.assignment().map_err(err)?
            } else {
                tpl
            };
            let mut t: Vec<String> = tpl
                .elements()
                .iter()
                .map(|e| e.topic().to_string())
                .collect();
            t.sort();
            t.dedup();
            Ok(t)
        })
        .await
    }

    async fn poll(&self, timeout: Duration, max_bytes: usize) -> Result<Vec<Record>, ServiceError> {
        let pending = self.pending.clone();
        self.blocking(move |c| {
            let mut out = Vec::new();
            let mut bytes = 0;
            let Ok(mut pending) = pending.lock() else {
                return Err(ServiceError::new(-1, "consumer state poisoned"));
            };
            while let Some(r) = pending.pop_front() {
                if !out.is_empty() && bytes + r.size() > max_bytes {
                    pending.push_front(r);
                    return Ok(out);
                }
                bytes += r.size();
                out.push(r);
            }
            if let Some(r) = poll_into(
                c,
                Instant::now() + timeout,
                max_bytes,
                &mut out,
                bytes,
                i64::MIN,
            )? {
                pending.push_back(r);
            }
            Ok(out)
        })
        .await
    }

    async fn commit(&self, offsets: Option<Vec<PartitionOffset>>) -> Result<(), ServiceError> {
        self.blocking(move |c| match offsets {
            None => c.commit_consumer_state(CommitMode::Sync).map_err(err),
            Some(offsets) => {
                let mut tpl = TopicPartitionList::new();
                for o in &offsets {
                    tpl.add_partition_offset(&o.topic, o.partition, Offset::Offset(o.offset))
                        .map_err(err)?;
                }
                c.commit(&tpl, CommitMode::Sync).map_err(err)
            }
        })
        .await
    }

    async fn committed(
        &self,
        partitions: Vec<TopicPartition>,
    ) -> Result<Vec<PartitionOffset>, ServiceError> {
        let timeout = self.timeout;
        self.blocking(move |c| {
            let tpl = if partitions.is_empty() {
                c.assignment().map_err(err)?
            } else {
                tpl_of(&partitions)
            };
            let got = c.committed_offsets(tpl, timeout).map_err(err)?;
            Ok(got
                .elements()
                .iter()
                .map(|e| PartitionOffset {
                    topic: e.topic().to_string(),
                    partition: e.partition(),
                    offset: match e.offset() {
                        Offset::Offset(o) => o,
                        _ => -1,
                    },
                })
                .collect())
        })
        .await
    }

    async fn seek(&self, offsets: Vec<PartitionOffset>) -> Result<(), ServiceError> {
        self.clear_pending();
        let timeout = self.timeout;
        self.blocking(move |c| {
            for o in &offsets {
                c.seek(&o.topic, o.partition, Offset::Offset(o.offset), timeout)
                    .map_err(err)?;
            }
            Ok(())
        })
        .await
    }

    async fn seek_to(&self, partitions: Vec<TopicPartition>, end: End) -> Result<(), ServiceError> {
        self.clear_pending();
        let timeout = self.timeout;
        let to = match end {
            End::Beginning => Offset::Beginning,
            End::End => Offset::End,
        };
        self.blocking(move |c| {
            for p in &partitions {
                c.seek(&p.topic, p.partition, to, timeout).map_err(err)?;
            }
            Ok(())
        })
        .await
    }

    async fn assignment(&self) -> Result<Vec<TopicPartition>, ServiceError> {
        self.blocking(|c| Ok(partitions_of(&c.assignment().map_err(err)?)))
            .await
    }

    async fn close(&self) {
        self.clear_pending();
        // Dropping the last handle closes the consumer: it leaves the group, which
        // blocks until the coordinator answers.
        let c = self.c.lock().ok().and_then(|mut c| c.take());
        if let Some(c) = c {
            let _ = tokio::task::spawn_blocking(move || drop(c)).await;
        }
    }
}
