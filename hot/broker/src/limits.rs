//! What one client may make this broker hold: connections, request bytes in flight,
//! partitions, decompressed batches. Each limit has Kafka's name where Kafka has one,
//! and a refusal is a Kafka error with a message naming the flag that sets it.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use strata_proto::ErrorCode;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::error::ApiError;

/// The limits (`strata serve` flags of the same names).
#[derive(Clone, Debug)]
pub struct Limits {
    /// Kafka connections open at once (Kafka's max.connections). New ones beyond it are
    /// closed at accept.
    pub max_connections: usize,
    /// Kafka connections open at once from one address (Kafka's
    /// max.connections.per.ip), so one client cannot take every slot.
    pub max_connections_per_ip: usize,
    /// Request bytes one connection may have read and not yet answered; reading stops
    /// until responses go out. One request larger than this is still read, alone.
    pub max_in_flight_bytes_per_connection: usize,
    /// Request bytes all connections may hold at once (Kafka's queued.max.request.bytes),
    /// counted as what decoding may make of them (see [`decoded_weight`]).
    pub queued_max_request_bytes: usize,
    /// Partitions one CreateTopics or CreatePartitions request may add, summed over its
    /// topics.
    pub max_partitions_per_request: i64,
    /// Partition replicas a broker may host, on average over the live brokers after the
    /// change (replicas are spread evenly).
    pub max_partitions_per_broker: i64,
    /// What one record batch may decompress to.
    pub max_decompressed_batch_bytes: usize,
    /// The smallest segment.bytes a topic may set. The default is Kafka 3.x's 14 bytes:
    /// segment descriptors come from one bounded cache (`--log-open-files`), so small
    /// segments cost files on disk, not open descriptors (tests/e2e_usability.rs keeps
    /// 10,000 of them within the budget). An operator who wants Kafka 4.0's floor
    /// (KIP-1030: 1 MiB, against directories of millions of files) sets it here.
    pub min_segment_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 10_000,
            max_connections_per_ip: 1_000,
            max_in_flight_bytes_per_connection: 100 << 20,
            queued_max_request_bytes: 1 << 30,
            max_partitions_per_request: 10_000,
            max_partitions_per_broker: 10_000,
            max_decompressed_batch_bytes: strata_proto::compression::DEFAULT_MAX_DECOMPRESSED_BYTES,
            min_segment_bytes: 14,
        }
    }
}

/// How many bytes of the request-memory pool a frame of `len` bytes for `api_key`
/// takes. A produce request decodes to little more than its size (the batches are
/// slices of the frame); any other request decodes into structures up to ~40 times
/// its wire size (a two-byte topic name becomes a ~70-byte struct; hot/broker's
/// hostile_decode test bounds it at 64), so those count that much.
pub fn decoded_weight(api_key: i16, len: usize) -> usize {
    const PRODUCE: i16 = 0;
    if api_key == PRODUCE {
        len
    } else {
        len.saturating_mul(DECODE_EXPANSION)
    }
}

/// The factor [`decoded_weight`] charges non-produce requests.
pub const DECODE_EXPANSION: usize = 40;

/// Counts open connections, in all and per address.
#[derive(Debug)]
pub struct ConnectionCounter {
    max: usize,
    max_per_ip: usize,
    open: Mutex<(usize, HashMap<IpAddr, usize>)>,
}

/// Why a connection was refused at accept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    Total,
    PerIp,
}

/// One open connection's slot; dropping it frees the slot.
#[derive(Debug)]
pub struct ConnectionSlot {
    counter: Arc<ConnectionCounter>,
    ip: IpAddr,
}

impl ConnectionCounter {
    pub fn new(limits: &Limits) -> Arc<Self> {
        Arc::new(ConnectionCounter {
            max: limits.max_connections.max(1),
            max_per_ip: limits.max_connections_per_ip.max(1),
            open: Mutex::new((0, HashMap::new())),
        })
    }

    /// Takes a slot for a connection from `ip`, or says which limit is full.
    pub fn admit(self: &Arc<Self>, ip: IpAddr) -> Result<ConnectionSlot, Refused> {
        let mut g = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let (total, per_ip) = &mut *g;
        if *total >= self.max {
            return Err(Refused::Total);
        }
        let n = per_ip.entry(ip).or_insert(0);
        if *n >= self.max_per_ip {
            return Err(Refused::PerIp);
        }
        *n += 1;
        *total += 1;
        Ok(ConnectionSlot {
            counter: self.clone(),
            ip,
        })
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.open.lock().unwrap_or_else(|e| e.into_inner()).0
    }
}

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        let mut g = self.counter.open.lock().unwrap_or_else(|e| e.into_inner());
        let (total, per_ip) = &mut *g;
        *total = total.saturating_sub(1);
        if let Some(n) = per_ip.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                per_ip.remove(&self.ip);
            }
        }
    }
}

/// Request bytes held: a connection's own budget and the broker-wide pool. A permit is
/// taken before a frame's body is read and given back when its response is written, so
/// a client that sends faster than it reads answers stops being read (TCP pushes back)
/// instead of growing the broker.
#[derive(Debug, Clone)]
pub struct RequestMemory {
    pool: Arc<Semaphore>,
    pool_size: usize,
}

/// Bytes held for one request until it is answered.
#[derive(Debug)]
pub struct HeldBytes {
    _connection: OwnedSemaphorePermit,
    _pool: OwnedSemaphorePermit,
}

impl RequestMemory {
    pub fn new(limits: &Limits) -> Self {
        let size = limits
            .queued_max_request_bytes
            .clamp(1, Semaphore::MAX_PERMITS);
        RequestMemory {
            pool: Arc::new(Semaphore::new(size)),
            pool_size: size,
        }
    }

    /// A connection's own budget.
    pub fn connection_budget(limits: &Limits) -> (Arc<Semaphore>, usize) {
        let size = limits
            .max_in_flight_bytes_per_connection
            .clamp(1, Semaphore::MAX_PERMITS);
        (Arc::new(Semaphore::new(size)), size)
    }

    /// Waits until `weight` bytes are free in the connection's budget and the pool. A
    /// request larger than a budget takes all of it (it is read alone). None when the
    /// request could never fit the pool: the caller closes the connection.
    pub async fn hold(
        &self,
        connection: &(Arc<Semaphore>, usize),
        weight: usize,
    ) -> Option<HeldBytes> {
        if weight > self.pool_size {
            return None;
        }
        let own = weight.min(connection.1) as u32;
        let c = connection.0.clone().acquire_many_owned(own).await.ok()?;
        let p = self
            .pool
            .clone()
            .acquire_many_owned(u32::try_from(weight).ok()?)
            .await
            .ok()?;
        Some(HeldBytes {
            _connection: c,
            _pool: p,
        })
    }

    /// Bytes of the pool in use now.
    pub fn in_use(&self) -> usize {
        self.pool_size - self.pool.available_permits()
    }
}

/// Checks that adding `new_partitions` partitions of `rf` replicas each stays within
/// the request's remaining allowance and the per-broker average.
pub fn check_new_partitions(
    limits: &Limits,
    request_so_far: i64,
    new_partitions: i64,
    rf: i64,
    replicas_now: i64,
    live_brokers: i64,
) -> Result<(), ApiError> {
    let asked = request_so_far.saturating_add(new_partitions);
    if asked > limits.max_partitions_per_request {
        return Err(ApiError::new(
            ErrorCode::InvalidPartitions,
            format!(
                "the request adds {asked} partitions, more than {} (the broker's \
                 --max-partitions-per-request); create them in several requests",
                limits.max_partitions_per_request
            ),
        ));
    }
    let live = live_brokers.max(1);
    let after = replicas_now.saturating_add(new_partitions.saturating_mul(rf.max(1)));
    let per_broker = (after + live - 1) / live;
    if per_broker > limits.max_partitions_per_broker {
        return Err(ApiError::new(
            ErrorCode::PolicyViolation,
            format!(
                "{after} partition replicas on {live} live brokers is {per_broker} per broker, \
                 more than {} (the broker's --max-partitions-per-broker); add brokers or \
                 raise the limit",
                limits.max_partitions_per_broker
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn connections_are_counted_in_all_and_per_address() {
        let limits = Limits {
            max_connections: 3,
            max_connections_per_ip: 2,
            ..Limits::default()
        };
        let c = ConnectionCounter::new(&limits);
        let a: IpAddr = [127, 0, 0, 2].into();
        let b: IpAddr = [127, 0, 0, 3].into();
        let a1 = c.admit(a).unwrap();
        let _a2 = c.admit(a).unwrap();
        assert_eq!(c.admit(a).unwrap_err(), Refused::PerIp);
        let _b1 = c.admit(b).unwrap();
        assert_eq!(c.admit(b).unwrap_err(), Refused::Total);
        drop(a1);
        assert_eq!(c.open(), 2);
        let _a3 = c.admit(a).unwrap();
    }

    #[tokio::test]
    async fn request_bytes_wait_for_answers() {
        let limits = Limits {
            max_in_flight_bytes_per_connection: 100,
            queued_max_request_bytes: 150,
            ..Limits::default()
        };
        let mem = RequestMemory::new(&limits);
        let conn = RequestMemory::connection_budget(&limits);
        let first = mem.hold(&conn, 80).await.unwrap();
        // The connection has 20 left: a 30-byte request waits for the first answer.
        let waiting =
            tokio::time::timeout(std::time::Duration::from_millis(50), mem.hold(&conn, 30));
        assert!(waiting.await.is_err());
        drop(first);
        let second = mem.hold(&conn, 30).await.unwrap();
        // Larger than the connection's budget but within the pool: read alone.
        drop(second);
        let big = mem.hold(&conn, 120).await.unwrap();
        assert_eq!(mem.in_use(), 120);
        drop(big);
        // Never fits the pool.
        assert!(mem.hold(&conn, 151).await.is_none());
    }

    #[test]
    fn partition_limits_name_their_flags() {
        let limits = Limits {
            max_partitions_per_request: 100,
            max_partitions_per_broker: 50,
            ..Limits::default()
        };
        let e = check_new_partitions(&limits, 60, 41, 1, 0, 3).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidPartitions);
        assert!(
            e.message.contains("--max-partitions-per-request"),
            "{}",
            e.message
        );
        let e = check_new_partitions(&limits, 0, 2_147_483_647, 1, 0, 3).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidPartitions);
        // 3 brokers, 100 replicas now, 20 partitions x RF 3 more: 160 / 3 = 54 > 50.
        let e = check_new_partitions(&limits, 0, 20, 3, 100, 3).unwrap_err();
        assert_eq!(e.code, ErrorCode::PolicyViolation);
        assert!(
            e.message.contains("--max-partitions-per-broker"),
            "{}",
            e.message
        );
        check_new_partitions(&limits, 0, 10, 3, 100, 3).unwrap();
    }
}
