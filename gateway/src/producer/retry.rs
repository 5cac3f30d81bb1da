//! What a refused or failed batch becomes: split and resent (too large), resent under
//! a new producer id (the broker doubts its sequence), resent after a backoff
//! (retriable, with the delivery timeout for a leader change and `retries` otherwise),
//! or failed; and when the producer id must be retired so no later batch can be taken
//! for a duplicate.

use std::time::{Duration, Instant};

use super::accumulator::Batch;
use super::engine::Engine;
use crate::service::{ServiceError, codes};

// Kafka error codes this producer acts on (beyond `codes`).
const OUT_OF_ORDER_SEQUENCE_NUMBER: i16 = 45;
const INVALID_PRODUCER_EPOCH: i16 = 47;
const UNKNOWN_PRODUCER_ID: i16 = 59;
const PRODUCER_FENCED: i16 = 90;

impl Engine {
    /// Retires the producer id: the next batch of every partition starts sequence 0
    /// under a new one.
    fn retire_producer(&mut self) {
        metrics::counter!("strata_gateway_producer_resets_total").increment(1);
        self.producer = None;
        self.generation += 1;
    }

    pub(super) fn failed(&mut self, mut b: Batch, code: i16, e: ServiceError) {
        let c = i32::from(code);
        match code {
            _ if c == codes::MESSAGE_TOO_LARGE || c == codes::RECORD_LIST_TOO_LARGE => {
                // Refused whole, so nothing was appended: this partition's batches are
                // cut smaller from now on and the records go again, in order, with the
                // same sequence.
                let total: usize = b.parts.iter().map(|p| p.records.len()).sum();
                self.release(&b);
                if total < 2 {
                    b.fail(&e);
                    return;
                }
                let limit = (b.encoded.len() / 2).max(1);
                match self.partitions.get_mut(&(b.topic.clone(), b.partition)) {
                    Some(st) => {
                        st.max_bytes = Some(st.max_bytes.map_or(limit, |m| m.min(limit)));
                        for p in b.parts.into_iter().rev() {
                            st.queue.push_front(p);
                        }
                    }
                    None => b.fail(&e),
                }
            }
            OUT_OF_ORDER_SEQUENCE_NUMBER
            | UNKNOWN_PRODUCER_ID
            | INVALID_PRODUCER_EPOCH
            | PRODUCER_FENCED => {
                // The broker lost or doubts this producer's state; the batch was refused.
                // A new producer id sends it again from sequence 0.
                tracing::warn!(error = %e, "gateway producer: retiring the producer id");
                if b.generation == self.generation {
                    self.retire_producer();
                }
                b.refused_producer = true;
                self.retry_or_fail(b, e, false);
            }
            _ if e.retriable() => {
                if (c == codes::NOT_LEADER_OR_FOLLOWER || c == codes::LEADER_NOT_AVAILABLE)
                    && let Some(m) = self.topics.get_mut(&b.topic)
                {
                    m.stale = true;
                }
                let unknown = c == codes::REQUEST_TIMED_OUT
                    || c == codes::NOT_ENOUGH_REPLICAS_AFTER_APPEND
                    || c == codes::NETWORK_EXCEPTION
                    || c == codes::KAFKA_STORAGE_ERROR;
                self.retry_or_fail(b, e, unknown);
            }
            _ => {
                // Refused for good (unknown partition, invalid record, ...): nothing was
                // appended, so the sequence stays for the next batch.
                self.release(&b);
                b.fail(&e);
            }
        }
    }

    /// Sends `b` again after a backoff, or fails it once its retries or the delivery
    /// time are spent. `unknown`: the broker may have appended it.
    ///
    /// A leader change (lost connection, NOT_LEADER_OR_FOLLOWER, no leader, a timeout)
    /// is retried for the whole delivery timeout, so an election is a pause to an HTTP
    /// client, not an error, as with a Kafka client. Other retriable refusals
    /// (NOT_ENOUGH_REPLICAS, a storage error) describe the cluster's state rather than a
    /// moment in it and get `retries`, so the client hears 503 within about a second.
    pub(super) fn retry_or_fail(&mut self, mut b: Batch, e: ServiceError, unknown: bool) {
        b.attempts += 1;
        let failover = matches!(
            e.code,
            codes::NETWORK_EXCEPTION
                | codes::NOT_LEADER_OR_FOLLOWER
                | codes::LEADER_NOT_AVAILABLE
                | codes::REQUEST_TIMED_OUT
        );
        let spent = (!failover && b.attempts > self.config.retries)
            || b.oldest().elapsed() >= self.config.delivery_timeout;
        if spent {
            self.release(&b);
            if unknown && b.generation == self.generation {
                // A later batch must not reuse this one's sequences: if it was appended,
                // the broker would answer that batch as a duplicate of this one.
                self.retire_producer();
            }
            b.fail(&e);
            return;
        }
        metrics::counter!("strata_gateway_produce_retries_total", "code" => e.code.to_string())
            .increment(1);
        let backoff = Duration::from_millis((100u64 << (b.attempts - 1).min(3)).min(500));
        if let Some(st) = self.partitions.get_mut(&(b.topic.clone(), b.partition)) {
            st.in_flight = false;
            st.not_before = Some(Instant::now() + backoff);
            st.retry = Some(b);
        } else {
            b.fail(&e);
        }
    }
}
