//! One member of a consumer group: a librdkafka consumer of the broker's listener
//! behind [`GroupConsumer`], for v2 consumer instances and SSE streams.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaErrorCode;
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
    local: Arc<Mutex<Local>>,
    timeout: Duration,
}

/// What the gateway knows of its member that librdkafka does not keep.
#[derive(Default)]
struct Local {
    /// Records polled past a request's max_bytes, handed out first next time.
    pending: VecDeque<Record>,
    /// Where each partition was last sought to (`i64::MAX`: its end; absent after a seek
    /// to its beginning), until a poll returns a record of it. librdkafka forgets the
    /// member's position on a seek until then, and `move_past` must know whether the
    /// member is past a record already.
    sought: HashMap<(String, i32), i64>,
}

impl Local {
    /// A seek of one partition: its pending records are not next any more (the other
    /// partitions' still are: dropping them would skip them).
    fn sought(&mut self, topic: &str, partition: i32, to: Offset) {
        self.pending
            .retain(|r| r.partition != partition || r.topic != topic);
        let key = (topic.to_string(), partition);
        match to {
            Offset::Offset(o) => self.sought.insert(key, o),
            Offset::End => self.sought.insert(key, i64::MAX),
            _ => self.sought.remove(&key),
        };
    }

    /// Where the member's next poll of a partition starts, when the gateway knows:
    /// its first pending record, or where it was sought to.
    fn next(&self, topic: &str, partition: i32) -> Option<i64> {
        self.pending
            .iter()
            .find(|r| r.partition == partition && r.topic == topic)
            .map(|r| r.offset)
            .or_else(|| self.sought.get(&(topic.to_string(), partition)).copied())
    }
}

fn poisoned() -> ServiceError {
    ServiceError::new(-1, "consumer state poisoned")
}

impl KafkaConsumer {
    pub(super) fn new(c: BaseConsumer, timeout: Duration) -> KafkaConsumer {
        KafkaConsumer {
            c: Mutex::new(Some(Arc::new(c))),
            local: Arc::default(),
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

    /// Forgets what the gateway kept of the member (a new subscription, or closing).
    fn clear_local(&self) {
        if let Ok(mut l) = self.local.lock() {
            *l = Local::default();
        }
    }

    /// Runs `f` on the blocking pool with the member, what the gateway keeps of it,
    /// `record`, its partition alone as a list (to pause or resume it) and the timeout.
    async fn at_record(
        &self,
        record: &PartitionOffset,
        f: impl FnOnce(
            &BaseConsumer,
            &Mutex<Local>,
            &PartitionOffset,
            &TopicPartitionList,
            Duration,
        ) -> Result<(), ServiceError>
        + Send
        + 'static,
    ) -> Result<(), ServiceError> {
        let local = self.local.clone();
        let timeout = self.timeout;
        let record = record.clone();
        self.blocking(move |c| {
            let mut alone = TopicPartitionList::new();
            alone.add_partition(&record.topic, record.partition);
            f(c, &local, &record, &alone, timeout)
        })
        .await
    }

    /// Seeks each of `partitions` to `to` (all of them assigned to the member, or none
    /// is sought), and resumes them: the next poll reads them from there.
    async fn seek_all(
        &self,
        partitions: Vec<(TopicPartition, Offset)>,
    ) -> Result<(), ServiceError> {
        let local = self.local.clone();
        let timeout = self.timeout;
        self.blocking(move |c| {
            let assigned = c.assignment().map_err(err)?;
            for (p, _) in &partitions {
                if assigned.find_partition(&p.topic, p.partition).is_none() {
                    return Err(not_assigned(&p.topic, p.partition, &assigned));
                }
            }
            for (p, to) in &partitions {
                seek_one(c, &local, &p.topic, p.partition, *to, timeout)?;
            }
            let parts: Vec<TopicPartition> = partitions.into_iter().map(|(p, _)| p).collect();
            c.resume(&tpl_of(&parts)).map_err(err)
        })
        .await
    }
}

/// Seeks one partition and notes where (see [`Local::sought`]).
fn seek_one(
    c: &BaseConsumer,
    local: &Mutex<Local>,
    topic: &str,
    partition: i32,
    to: Offset,
    timeout: Duration,
) -> Result<(), ServiceError> {
    c.seek(topic, partition, to, timeout)
        .map_err(|e| seek_err(c, topic, partition, e))?;
    local
        .lock()
        .map_err(|_| poisoned())?
        .sought(topic, partition, to);
    Ok(())
}

/// A seek librdkafka refused. It says only "Local: Unknown partition" or "Local:
/// Erroneous state" when the partition left the member between the caller's check and
/// the seek (a rebalance), or when its client stopped reading it.
fn seek_err(c: &BaseConsumer, topic: &str, partition: i32, e: KafkaError) -> ServiceError {
    let KafkaError::Seek(m) = &e else {
        return err(e);
    };
    if !is_code(m, RDKafkaErrorCode::UnknownPartition) && !is_code(m, RDKafkaErrorCode::State) {
        return err(e);
    }
    let assigned = c.assignment().unwrap_or_default();
    if assigned.find_partition(topic, partition).is_none() {
        return not_assigned(topic, partition, &assigned);
    }
    // Assigned, but not read: stopped (or, briefly, not started yet).
    ServiceError::new(
        codes::LOCAL_AUTO_OFFSET_RESET,
        format!(
            "The instance cannot seek partition {partition} of topic '{topic}' now. If a \
             poll said the partition {STOPPED} Otherwise poll, and seek again."
        ),
    )
}

/// What stopped a partition, and how the client resumes it: librdkafka stops reading a
/// partition whose group has no committed offset under auto.offset.reset none, and
/// refuses to seek it from then on ("Local: Erroneous state"); a new assignment, with
/// an offset committed, reads it again.
const STOPPED: &str = "has no committed offset, and the instance's auto.offset.reset is \
    none, so its Kafka client stopped reading it: commit an offset for it (POST \
    .../offsets: the group reads on after that offset) and subscribe again (DELETE, then \
    POST .../subscription), or create the instance with auto.offset.reset earliest or \
    latest.";

/// Whether `m`, librdkafka's text for an error (all that rdkafka's seek and subscribe
/// errors carry, without the code), is `code`'s.
fn is_code(m: &str, code: RDKafkaErrorCode) -> bool {
    // rdkafka shows a code as "Name (text)".
    code.to_string() == format!("{code:?} ({m})")
}

/// A partition the member is not assigned: before its first poll after subscribing it
/// has none (librdkafka answers a seek with a bare "Local: Unknown partition", or
/// "Local: Erroneous state"), and a rebalance may have moved this one to another member.
fn not_assigned(topic: &str, partition: i32, assigned: &TopicPartitionList) -> ServiceError {
    let message = if assigned.count() == 0 {
        format!(
            "The instance has no assignment for partition {partition} of topic '{topic}' \
             yet: the group assigns partitions on a poll (GET .../records) after the \
             instance subscribes, so poll first."
        )
    } else {
        let names: Vec<String> = assigned
            .elements()
            .iter()
            .map(|e| format!("{}-{}", e.topic(), e.partition()))
            .collect();
        format!(
            "The instance is not assigned partition {partition} of topic '{topic}' (it has \
             {}; a rebalance may have moved it to another member).",
            names.join(", ")
        )
    };
    ServiceError::new(codes::NOT_ASSIGNED, message)
}

/// A subscription librdkafka refuses: for a pattern, one its regular expressions
/// (POSIX extended) cannot compile although Rust's could (`(?i)...`); it says only
/// "Local: Invalid argument or configuration".
fn subscription_err(what: &str, e: KafkaError) -> ServiceError {
    match &e {
        KafkaError::Subscription(m) if is_code(m, RDKafkaErrorCode::InvalidArgument) => {
            ServiceError::new(
                codes::LOCAL_INVALID_ARG,
                format!(
                    "The Kafka client refuses {what} ({m}): a topic_pattern must be a POSIX \
                     extended regular expression (no (?i), \\d, \\w or lazy quantifiers)."
                ),
            )
        }
        _ => err(e),
    }
}

/// A poll's error; the one auto.offset.reset none gives a partition without a committed
/// offset is the client's to resolve, and librdkafka's text does not say how (nor
/// which partition: rdkafka drops that).
fn no_offset(e: ServiceError) -> ServiceError {
    if e.code != codes::LOCAL_AUTO_OFFSET_RESET {
        return e;
    }
    ServiceError::new(e.code, format!("A partition of the instance {STOPPED}"))
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
        self.clear_local();
        self.blocking(move |c| {
            let t: Vec<&str> = topics.iter().map(String::as_str).collect();
            c.subscribe(&t)
                .map_err(|e| subscription_err(&format!("the topics {topics:?}"), e))
        })
        .await
    }

    async fn subscribe_pattern(&self, pattern: &str) -> Result<(), ServiceError> {
        self.clear_local();
        // librdkafka takes a subscription starting with '^' as a regular expression; the
        // anchors make it match whole names, as Confluent's (Java's Pattern.matches).
        let regex = format!("^({pattern})$");
        let what = format!("topic_pattern '{pattern}'");
        self.blocking(move |c| {
            c.subscribe(&[regex.as_str()])
                .map_err(|e| subscription_err(&what, e))
        })
        .await
    }

    async fn unsubscribe(&self) -> Result<(), ServiceError> {
        self.clear_local();
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
        let local = self.local.clone();
        self.blocking(move |c| {
            let mut out = Vec::new();
            let mut bytes = 0;
            let Ok(mut local) = local.lock() else {
                return Err(poisoned());
            };
            while let Some(r) = local.pending.pop_front() {
                if !out.is_empty() && bytes + r.size() > max_bytes {
                    local.pending.push_front(r);
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
            )
            .map_err(no_offset)?
            {
                local.pending.push_back(r);
            }
            // librdkafka knows these partitions' positions again.
            let Local { pending, sought } = &mut *local;
            for r in out.iter().chain(pending.iter()) {
                if !sought.is_empty() {
                    sought.remove(&(r.topic.clone(), r.partition));
                }
            }
            Ok(out)
        })
        .await
    }

    async fn commit(&self, offsets: Option<Vec<PartitionOffset>>) -> Result<(), ServiceError> {
        self.blocking(move |c| match offsets {
            None => match c.commit_consumer_state(CommitMode::Sync) {
                // Nothing read yet, so nothing to commit: done, as a Kafka consumer's
                // commitSync() (librdkafka says "Local: No offset stored").
                Err(e) if e.rdkafka_error_code() == Some(RDKafkaErrorCode::NoOffset) => Ok(()),
                r => r.map_err(err),
            },
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
        self.seek_all(
            offsets
                .into_iter()
                .map(|o| {
                    let to = Offset::Offset(o.offset);
                    (
                        TopicPartition {
                            topic: o.topic,
                            partition: o.partition,
                        },
                        to,
                    )
                })
                .collect(),
        )
        .await
    }

    async fn seek_to(&self, partitions: Vec<TopicPartition>, end: End) -> Result<(), ServiceError> {
        let to = match end {
            End::Beginning => Offset::Beginning,
            End::End => Offset::End,
        };
        self.seek_all(partitions.into_iter().map(|p| (p, to)).collect())
            .await
    }

    async fn move_past(&self, record: &PartitionOffset) -> Result<(), ServiceError> {
        self.at_record(record, |c, local, r, alone, timeout| {
            let assigned = c.assignment().map_err(err)?;
            if assigned.find_partition(&r.topic, r.partition).is_none() {
                // Another member's now: it starts at the group's committed offset.
                return Ok(());
            }
            let known = {
                let mut l = local.lock().map_err(|_| poisoned())?;
                // Fetched, not handed out yet: the record itself and those before it
                // are not to be handed out.
                l.pending.retain(|p| {
                    p.partition != r.partition || p.topic != r.topic || p.offset > r.offset
                });
                l.next(&r.topic, r.partition)
            };
            let next = match known {
                Some(n) => Some(n),
                // The position librdkafka keeps: after the last record polled.
                None => c
                    .position()
                    .map_err(err)?
                    .find_partition(&r.topic, r.partition)
                    .and_then(|e| match e.offset() {
                        Offset::Offset(n) => Some(n),
                        _ => None,
                    }),
            };
            // Unknown (nothing read since the assignment or a seek to the beginning):
            // the group's commit already says the member is past it.
            if next.is_none_or(|n| n <= r.offset) {
                let past = Offset::Offset(r.offset.saturating_add(1));
                seek_one(c, local, &r.topic, r.partition, past, timeout)?;
            }
            c.resume(alone).map_err(err)
        })
        .await
    }

    async fn hold(&self, record: &PartitionOffset) -> Result<(), ServiceError> {
        self.at_record(record, |c, local, r, alone, timeout| {
            // Paused first: a pause keeps the position it finds, and the seek then sets
            // where a resume reads from.
            c.pause(alone).map_err(err)?;
            let at = Offset::Offset(r.offset);
            seek_one(c, local, &r.topic, r.partition, at, timeout)
        })
        .await
    }

    async fn assignment(&self) -> Result<Vec<TopicPartition>, ServiceError> {
        self.blocking(|c| Ok(partitions_of(&c.assignment().map_err(err)?)))
            .await
    }

    async fn close(&self) {
        self.clear_local();
        // Dropping the last handle closes the consumer: it leaves the group, which
        // blocks until the coordinator answers.
        let c = self.c.lock().ok().and_then(|mut c| c.take());
        if let Some(c) = c {
            let _ = tokio::task::spawn_blocking(move || drop(c)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn librdkafkas_bare_error_texts_are_recognised() {
        // What rdkafka's seek and subscribe errors carry (see the e2e tests' 409s).
        assert!(is_code(
            "Local: Unknown partition",
            RDKafkaErrorCode::UnknownPartition
        ));
        assert!(is_code("Local: Erroneous state", RDKafkaErrorCode::State));
        assert!(is_code(
            "Local: Invalid argument or configuration",
            RDKafkaErrorCode::InvalidArgument
        ));
        assert!(!is_code(
            "Local: Erroneous state",
            RDKafkaErrorCode::UnknownPartition
        ));
    }

    fn record(topic: &str, partition: i32, offset: i64) -> Record {
        Record {
            topic: topic.into(),
            partition,
            offset,
            key: None,
            value: None,
            headers: Vec::new(),
            timestamp: None,
        }
    }

    #[test]
    fn a_seek_forgets_the_pending_records_of_its_partition_only() {
        let mut l = Local::default();
        l.pending
            .extend([record("a", 0, 7), record("a", 1, 3), record("b", 0, 9)]);
        assert_eq!(l.next("a", 0), Some(7));
        l.sought("a", 0, Offset::Offset(2));
        // The others' pending records are still next: dropping them skipped them.
        let left: Vec<(&str, i32, i64)> = l
            .pending
            .iter()
            .map(|r| (r.topic.as_str(), r.partition, r.offset))
            .collect();
        assert_eq!(left, [("a", 1, 3), ("b", 0, 9)]);
        assert_eq!(l.next("a", 0), Some(2));
        l.sought("a", 0, Offset::End);
        assert_eq!(l.next("a", 0), Some(i64::MAX));
        // The beginning is not known as an offset.
        l.sought("a", 0, Offset::Beginning);
        assert_eq!(l.next("a", 0), None);
        assert_eq!(l.next("a", 1), Some(3));
    }
}
