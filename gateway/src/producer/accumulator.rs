//! What waits to be sent: a request's records for one partition ([`Pending`]) with
//! the [`Sink`] its answers go to, each partition's queue and sequence
//! ([`PartitionState`]), and the [`Batch`] built from a queue (or a retry) under the
//! producer id and the partition's next sequence.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::Bytes;
use strata_proto::Compression;
use strata_proto::batch::build::{NewRecord, ProducerFields, batch};
use tokio::sync::oneshot;

use super::engine::Engine;
use crate::service::{Produced, ServiceError};

/// Bytes a record adds to a batch beyond its key, value and headers (varints and
/// deltas; an upper bound for batch sizing, not an exact figure).
const RECORD_OVERHEAD: usize = 24;
const BATCH_OVERHEAD: usize = 61;

/// Where a request's answers gather: one slot per record, filled as its batch
/// completes; the waiter wakes when the last one is.
pub(super) struct Sink {
    pub(super) results: Mutex<Vec<Option<Result<Produced, ServiceError>>>>,
    pub(super) remaining: AtomicUsize,
    pub(super) done: Mutex<Option<oneshot::Sender<()>>>,
}

impl Sink {
    pub(super) fn fill(
        &self,
        idx: &[usize],
        mut answer: impl FnMut(usize) -> Result<Produced, ServiceError>,
    ) {
        if let Ok(mut r) = self.results.lock() {
            for (i, &at) in idx.iter().enumerate() {
                r[at] = Some(answer(i));
            }
        }
        if self.remaining.fetch_sub(idx.len(), Ordering::AcqRel) == idx.len()
            && let Some(tx) = self.done.lock().ok().and_then(|mut d| d.take())
        {
            let _ = tx.send(());
        }
    }
}

/// Records of one request for one partition, in order.
pub(super) struct Pending {
    pub(super) topic: Arc<str>,
    pub(super) partition: i32,
    pub(super) records: Vec<NewRecord>,
    /// Each record's index in its request.
    pub(super) idx: Vec<usize>,
    pub(super) bytes: usize,
    pub(super) sink: Arc<Sink>,
    pub(super) enqueued: Instant,
}

impl Pending {
    pub(super) fn fail(self, e: &ServiceError) {
        self.sink.fill(&self.idx, |_| Err(e.clone()));
    }

    /// Splits off the second half (None for a single record).
    fn split(&mut self) -> Option<Pending> {
        if self.records.len() < 2 {
            return None;
        }
        let at = self.records.len() / 2;
        let records = self.records.split_off(at);
        let idx = self.idx.split_off(at);
        let bytes: usize = records.iter().map(record_bytes).sum();
        self.bytes -= bytes.min(self.bytes);
        Some(Pending {
            topic: self.topic.clone(),
            partition: self.partition,
            records,
            idx,
            bytes,
            sink: self.sink.clone(),
            enqueued: self.enqueued,
        })
    }
}

pub(super) fn record_bytes(r: &NewRecord) -> usize {
    RECORD_OVERHEAD
        + r.key.as_ref().map_or(0, Bytes::len)
        + r.value.as_ref().map_or(0, Bytes::len)
        + r.headers
            .iter()
            .map(|(k, v)| k.len() + v.as_ref().map_or(0, Bytes::len) + 4)
            .sum::<usize>()
}

/// A batch built for one partition: what was sent, and the records to answer.
pub(super) struct Batch {
    pub(super) topic: Arc<str>,
    pub(super) partition: i32,
    pub(super) parts: Vec<Pending>,
    pub(super) encoded: Bytes,
    pub(super) producer_id: i64,
    pub(super) producer_epoch: i16,
    pub(super) base_sequence: i32,
    pub(super) generation: u64,
    pub(super) count: i32,
    pub(super) attempts: u32,
    /// The broker refused this batch's producer id or sequence: it goes again under
    /// the current producer id. Any other retry keeps its id and sequence, so the broker
    /// recognises it if an earlier attempt was appended.
    pub(super) refused_producer: bool,
}

impl Batch {
    pub(super) fn fail(self, e: &ServiceError) {
        for p in self.parts {
            p.fail(e);
        }
    }

    pub(super) fn oldest(&self) -> Instant {
        self.parts
            .iter()
            .map(|p| p.enqueued)
            .min()
            .unwrap_or_else(Instant::now)
    }
}

#[derive(Default)]
pub(super) struct PartitionState {
    pub(super) queue: VecDeque<Pending>,
    /// A batch to send again (same sequence) once `not_before` has passed.
    pub(super) retry: Option<Batch>,
    pub(super) not_before: Option<Instant>,
    pub(super) in_flight: bool,
    /// Batch size learned from MESSAGE_TOO_LARGE (below `max_batch_bytes`).
    pub(super) max_bytes: Option<usize>,
    /// The next sequence, valid for producer `generation`.
    pub(super) sequence: i32,
    pub(super) generation: u64,
}

impl PartitionState {
    pub(super) fn has_work(&self) -> bool {
        self.retry.is_some() || !self.queue.is_empty()
    }
}

impl std::fmt::Debug for Pending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pending")
            .field("topic", &self.topic)
            .field("partition", &self.partition)
            .field("records", &self.records.len())
            .finish_non_exhaustive()
    }
}

impl Engine {
    /// The partition's next batch: its retry, else records from its queue.
    pub(super) fn next_batch(&mut self, key: &(Arc<str>, i32)) -> Option<Batch> {
        let max = self.config.max_batch_bytes;
        let (pid, epoch) = self.producer?;
        let generation = self.generation;
        let st = self.partitions.get_mut(key)?;
        if let Some(mut b) = st.retry.take() {
            st.not_before = None;
            if b.refused_producer {
                if st.generation != generation {
                    st.generation = generation;
                    st.sequence = 0;
                }
                let records: Vec<NewRecord> = b
                    .parts
                    .iter()
                    .flat_map(|p| p.records.iter().cloned())
                    .collect();
                b.encoded = encode(&records, pid, epoch, st.sequence);
                b.producer_id = pid;
                b.producer_epoch = epoch;
                b.base_sequence = st.sequence;
                b.generation = generation;
                b.refused_producer = false;
            }
            return Some(b);
        }
        let max = st.max_bytes.map_or(max, |m| m.min(max));
        // A request's records for one partition over the learned limit go in pieces.
        while let Some(front) = st.queue.front_mut()
            && front.bytes + BATCH_OVERHEAD > max
            && let Some(second) = front.split()
        {
            st.queue.insert(1, second);
        }
        let mut parts = Vec::new();
        let mut bytes = BATCH_OVERHEAD;
        while let Some(p) = st.queue.front() {
            if !parts.is_empty() && bytes + p.bytes > max {
                break;
            }
            bytes += p.bytes;
            parts.extend(st.queue.pop_front());
        }
        if parts.is_empty() {
            return None;
        }
        if st.generation != generation {
            st.generation = generation;
            st.sequence = 0;
        }
        let records: Vec<NewRecord> = if parts.len() == 1 {
            parts[0].records.clone()
        } else {
            parts
                .iter()
                .flat_map(|p| p.records.iter().cloned())
                .collect()
        };
        let count = records.len() as i32;
        Some(Batch {
            topic: key.0.clone(),
            partition: key.1,
            encoded: encode(&records, pid, epoch, st.sequence),
            parts,
            producer_id: pid,
            producer_epoch: epoch,
            base_sequence: st.sequence,
            generation,
            count,
            attempts: 0,
            refused_producer: false,
        })
    }
}

fn encode(
    records: &[NewRecord],
    producer_id: i64,
    producer_epoch: i16,
    base_sequence: i32,
) -> Bytes {
    batch(
        records,
        Compression::None,
        Some(ProducerFields {
            producer_id,
            producer_epoch,
            base_sequence,
        }),
    )
}
