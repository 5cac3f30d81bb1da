//! Replication throttles (Kafka's `leader.replication.throttled.rate` and
//! `follower.replication.throttled.rate`, KIP-73): a cap, in bytes per second, on the
//! replication of replicas that are catching up, so that moving replicas (a
//! reassignment, a broker rebuilt from empty) does not starve producers and consumers of
//! disk and network.
//!
//! Which replicas are throttled, as Kafka decides it: only replicas out of the ISR (an
//! in-sync replica is never slowed: that would slow acks=all producers), and of those the
//! ones a reassignment is adding plus the ones the topic lists in
//! `leader.replication.throttled.replicas` (on the leader, `PARTITION:LEADER`) or
//! `follower.replication.throttled.replicas` (on the follower, `PARTITION:FOLLOWER`).
//! When the bucket is empty, a throttled partition gets no data in that fetch (the leader
//! leaves it out of its answer; the follower leaves it out of its request), as Kafka's
//! quota managers do; the others are served as usual.

use std::sync::Mutex;
use std::time::Instant;

use strata_controller::{ClusterMetadata, PartitionRecord};
use strata_proto::ThrottledReplicas;

/// Which side of replication a throttle caps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Side {
    Leader,
    Follower,
}

impl Side {
    /// The broker config holding the rate.
    pub(crate) fn rate_key(self) -> &'static str {
        match self {
            Side::Leader => "leader.replication.throttled.rate",
            Side::Follower => "follower.replication.throttled.rate",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Side::Leader => "leader",
            Side::Follower => "follower",
        }
    }
}

/// The two throttles of a broker: on what it serves as leader and what it fetches as
/// follower.
#[derive(Debug)]
pub struct Throttles {
    pub(crate) leader: Throttle,
    pub(crate) follower: Throttle,
}

impl Default for Throttles {
    fn default() -> Self {
        Throttles {
            leader: Throttle::new(Side::Leader),
            follower: Throttle::new(Side::Follower),
        }
    }
}

/// A token bucket holding at most one second of the rate.
#[derive(Debug)]
pub(crate) struct Throttle {
    side: Side,
    bucket: Mutex<Bucket>,
}

#[derive(Debug)]
struct Bucket {
    rate: u64,
    /// May go below zero: a fetch takes what it read, and the next waits for the debt.
    tokens: f64,
    last: Instant,
}

impl Throttle {
    pub(crate) fn new(side: Side) -> Throttle {
        Throttle {
            side,
            bucket: Mutex::new(Bucket {
                rate: u64::MAX,
                tokens: 0.0,
                last: Instant::now(),
            }),
        }
    }

    /// The rate broker `node` is to apply, from the dynamic broker configs; `None`:
    /// unthrottled (unset, or Kafka's default of `Long.MAX_VALUE`).
    pub(crate) fn rate(&self, md: &ClusterMetadata, node: i32) -> Option<u64> {
        md.broker_config(node, self.side.rate_key())
            .and_then(|v| v.parse::<u64>().ok())
            .filter(|r| *r < i64::MAX as u64)
    }

    /// Whether a throttled replica may be sent (leader) or asked for (follower) data now,
    /// at `rate` bytes per second.
    pub(crate) fn admits(&self, rate: u64, now: Instant) -> bool {
        let mut b = self.bucket.lock().unwrap_or_else(|e| e.into_inner());
        if b.rate != rate {
            // A new rate starts with a full second of it.
            b.rate = rate;
            b.tokens = rate as f64;
            b.last = now;
        }
        let elapsed = now.saturating_duration_since(b.last).as_secs_f64();
        b.last = now;
        b.tokens = (b.tokens + elapsed * rate as f64).min(rate as f64);
        let ok = b.tokens > 0.0;
        if !ok {
            metrics::counter!("strata_replication_throttled_total", "side" => self.side.label())
                .increment(1);
        }
        ok
    }

    /// A throttled replica was sent or received `bytes`.
    pub(crate) fn record(&self, bytes: usize) {
        let mut b = self.bucket.lock().unwrap_or_else(|e| e.into_inner());
        b.tokens -= bytes as f64;
        metrics::counter!("strata_replication_throttled_bytes_total", "side" => self.side.label())
            .increment(bytes as u64);
    }
}

/// Whether `replica`'s replication of `p` is throttled on `side`, where `listed` is the
/// topic's `*.replication.throttled.replicas` and `this` the broker applying it (the
/// leader on the leader side, the follower on the follower side).
pub(crate) fn is_throttled(
    p: &PartitionRecord,
    replica: i32,
    this: i32,
    listed: &ThrottledReplicas,
) -> bool {
    !p.isr.contains(&replica)
        && (p.adding_replicas.contains(&replica) || listed.contains(p.partition, this))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_bucket_admits_its_rate_per_second() {
        let t = Throttle::new(Side::Leader);
        let t0 = Instant::now();
        // A fresh rate has a second of it: 1 MB/s lets 1 MB through, then waits.
        assert!(t.admits(1_000_000, t0));
        t.record(1_500_000);
        assert!(!t.admits(1_000_000, t0 + Duration::from_millis(100)));
        // The debt (0.5 MB) is paid after half a second more.
        assert!(!t.admits(1_000_000, t0 + Duration::from_millis(450)));
        assert!(t.admits(1_000_000, t0 + Duration::from_millis(550)));
        // Idle time does not bank more than a second.
        t.record(10);
        assert!(t.admits(1_000_000, t0 + Duration::from_secs(60)));
        t.record(1_000_000);
        assert!(!t.admits(1_000_000, t0 + Duration::from_secs(60)));
    }

    #[test]
    fn only_catching_up_replicas_are_throttled() {
        let p = PartitionRecord {
            partition: 3,
            replicas: vec![4, 2, 3, 1],
            isr: vec![1, 2, 3],
            leader: 1,
            leader_epoch: 0,
            partition_epoch: 1,
            adding_replicas: vec![4],
            removing_replicas: vec![1],
        };
        let none = ThrottledReplicas::None;
        assert!(is_throttled(&p, 4, 1, &none));
        assert!(!is_throttled(&p, 2, 1, &none));
        // Listed for the leader: only the out-of-sync replicas it serves.
        let listed = ThrottledReplicas::Listed(vec![(3, 1)]);
        let mut q = p.clone();
        q.adding_replicas.clear();
        q.isr = vec![1, 2];
        assert!(is_throttled(&q, 3, 1, &listed));
        assert!(!is_throttled(&q, 2, 1, &listed));
        assert!(!is_throttled(&q, 3, 1, &none));
    }
}
