//! The gateway's produce queue: what HTTP produce requests may hold in memory at once,
//! bounded in records and in bytes.
//!
//! Why both: the record bound alone lets a few requests of large records hold gigabytes
//! (100,000 records of 8 MiB each); the byte bound alone lets many tiny records cost more
//! in per-record bookkeeping than their bytes say. A request takes permits for all its
//! records and bytes before anything is produced and gives them back when the produce
//! completes, so the queue is never oversubscribed and a request is never half admitted.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::service::{ProduceRecord, ServiceError, codes};

/// How much the queue holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueLimits {
    /// Records in flight (`--http-produce-queue`).
    pub records: u32,
    /// Bytes of keys, values and headers in flight (`--http-produce-queue-bytes`).
    pub bytes: u32,
    /// How long a request waits for room before it is refused (429).
    pub wait: Duration,
}

/// Records and bytes produce requests hold.
#[derive(Debug)]
pub struct ProduceQueue {
    limits: QueueLimits,
    records: Arc<Semaphore>,
    bytes: Arc<Semaphore>,
}

/// Room held in the queue; given back when dropped.
#[derive(Debug)]
pub struct Admitted {
    _records: OwnedSemaphorePermit,
    _bytes: OwnedSemaphorePermit,
}

/// The bytes the gateway holds for a record while it is in flight: key, value, header
/// names and header values (the same measure as a read's max_bytes).
pub fn record_bytes(r: &ProduceRecord) -> u64 {
    let len = |b: &Option<Vec<u8>>| b.as_ref().map_or(0, Vec::len) as u64;
    len(&r.key)
        + len(&r.value)
        + r.headers
            .iter()
            .map(|(k, v)| k.len() as u64 + len(v))
            .sum::<u64>()
}

impl ProduceQueue {
    pub fn new(limits: QueueLimits) -> ProduceQueue {
        ProduceQueue {
            records: Arc::new(Semaphore::new(limits.records as usize)),
            bytes: Arc::new(Semaphore::new(limits.bytes as usize)),
            limits,
        }
    }

    /// Room for `records`, waiting up to the queue's wait. A request larger than the
    /// whole queue is refused at once: waiting could never admit it.
    pub async fn admit(&self, records: &[ProduceRecord]) -> Result<Admitted, ServiceError> {
        let bytes: u64 = records.iter().map(record_bytes).sum();
        let (n, b) = match (u32::try_from(records.len()), u32::try_from(bytes)) {
            (Ok(n), Ok(b)) if n <= self.limits.records && b <= self.limits.bytes => (n, b),
            _ => return Err(self.too_large(records.len(), bytes)),
        };
        // Records first, then bytes, in every request: one order, so two requests each
        // holding what the other waits for cannot happen. Both within one deadline.
        let acquire = async {
            let r = self.records.clone().acquire_many_owned(n).await;
            let b = self.bytes.clone().acquire_many_owned(b).await;
            (r, b)
        };
        match tokio::time::timeout(self.limits.wait, acquire).await {
            Ok((Ok(records), Ok(bytes))) => Ok(Admitted {
                _records: records,
                _bytes: bytes,
            }),
            // Timed out, or (never: the semaphores are not closed) closed.
            _ => Err(self.full()),
        }
    }

    fn full(&self) -> ServiceError {
        ServiceError::new(
            codes::GATEWAY_QUEUE_FULL,
            format!(
                "the gateway's produce queue ({} records, {} bytes: --http-produce-queue, --http-produce-queue-bytes) is full; retry later or send fewer records per request",
                self.limits.records, self.limits.bytes
            ),
        )
    }

    fn too_large(&self, records: usize, bytes: u64) -> ServiceError {
        let what = if records as u64 > u64::from(self.limits.records) {
            format!(
                "{records} records, more than the whole produce queue holds ({} records, --http-produce-queue)",
                self.limits.records
            )
        } else {
            format!(
                "{bytes} bytes of keys, values and headers, more than the whole produce queue holds ({} bytes, --http-produce-queue-bytes)",
                self.limits.bytes
            )
        };
        ServiceError::new(
            codes::GATEWAY_QUEUE_FULL,
            format!(
                "this request has {what}; retrying will not help: split it into smaller requests, or raise the flag"
            ),
        )
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn record(value: usize) -> ProduceRecord {
        ProduceRecord {
            key: Some(b"k".to_vec()),
            value: Some(vec![0; value]),
            headers: vec![("h".into(), Some(b"vv".to_vec())), ("n".into(), None)],
            ..ProduceRecord::default()
        }
    }

    fn queue(records: u32, bytes: u32) -> ProduceQueue {
        ProduceQueue::new(QueueLimits {
            records,
            bytes,
            wait: Duration::from_millis(50),
        })
    }

    #[test]
    fn a_record_counts_key_value_and_headers() {
        // 1 key + 10 value + ("h" + "vv") + "n".
        assert_eq!(record_bytes(&record(10)), 15);
        assert_eq!(record_bytes(&ProduceRecord::default()), 0);
    }

    #[tokio::test]
    async fn a_request_larger_than_the_queue_is_refused_at_once() {
        let q = ProduceQueue::new(QueueLimits {
            records: 100,
            bytes: 1024,
            // Longer than the test may take: the refusal must not wait.
            wait: Duration::from_secs(60),
        });
        let e = tokio::time::timeout(Duration::from_secs(5), q.admit(&[record(1024)]))
            .await
            .expect("refused without waiting")
            .unwrap_err();
        assert_eq!(e.code, codes::GATEWAY_QUEUE_FULL);
        assert!(e.message.contains("--http-produce-queue-bytes"), "{e}");
        assert!(e.message.contains("will not help"), "{e}");
        let many: Vec<_> = (0..101).map(|_| ProduceRecord::default()).collect();
        let e = q.admit(&many).await.unwrap_err();
        assert!(e.message.contains("--http-produce-queue)"), "{e}");
        // Exactly the whole queue fits.
        let fits = record(1024 - 5);
        assert_eq!(record_bytes(&fits), 1024);
        q.admit(&[fits]).await.unwrap();
    }

    #[tokio::test]
    async fn bytes_in_flight_refuse_a_request_that_does_not_fit_in_time() {
        let q = queue(100, 1000);
        let held = q.admit(&[record(600 - 5)]).await.unwrap();
        // 400 bytes left: a 500-byte request waits, then is refused as full (retriable).
        let e = q.admit(&[record(500 - 5)]).await.unwrap_err();
        assert_eq!(e.code, codes::GATEWAY_QUEUE_FULL);
        assert!(e.message.contains("is full"), "{e}");
        assert!(e.retriable());
        // The refused request took its record permit before waiting for bytes; it gave
        // it back.
        assert_eq!(q.records.available_permits(), 99);
        // One that fits the rest is admitted meanwhile.
        let small = q.admit(&[record(400 - 5)]).await.unwrap();
        drop((small, held));
        assert_eq!(q.bytes.available_permits(), 1000);
        assert_eq!(q.records.available_permits(), 100);
    }

    #[tokio::test]
    async fn a_waiting_request_is_admitted_when_the_produce_before_it_completes() {
        let q = Arc::new(ProduceQueue::new(QueueLimits {
            records: 100,
            bytes: 1000,
            wait: Duration::from_secs(30),
        }));
        let held = q.admit(&[record(600 - 5)]).await.unwrap();
        let waiter = {
            let q = q.clone();
            tokio::spawn(async move { q.admit(&[record(1000 - 5)]).await.map(drop) })
        };
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished(), "admitted while bytes were held");
        drop(held);
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("admitted once the bytes were released")
            .unwrap()
            .unwrap();
        assert_eq!(q.bytes.available_permits(), 1000);
        assert_eq!(q.records.available_permits(), 100);
    }

    #[tokio::test]
    async fn records_in_flight_bound_too() {
        let q = queue(2, 1 << 20);
        let held = q.admit(&[record(1), record(1)]).await.unwrap();
        let e = q.admit(&[record(1)]).await.unwrap_err();
        assert!(e.message.contains("is full"), "{e}");
        // A refused request holds nothing: its record permits were given back too.
        drop(held);
        assert_eq!(q.records.available_permits(), 2);
        assert_eq!(q.bytes.available_permits(), 1 << 20);
        q.admit(&[record(1), record(1)]).await.unwrap();
    }
}
