//! What each consumer of an `sse-latency` run received: the stamp every value carries,
//! and per consumer the records seen, missed and duplicated, with their latency.

use anyhow::Context;
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::Latency;
use crate::report::latency_of;

/// End-to-end latency of one consumer: send (before the producer's send call) to
/// receipt (the record parsed in the consumer), in one process on one clock.
#[derive(Debug, Clone, Serialize)]
pub struct Receipt {
    /// Distinct records of the run received.
    pub received: u64,
    /// Delivered to the broker but never received.
    pub missed: u64,
    /// Received more than once.
    pub duplicates: u64,
    pub latency: Option<Latency>,
}

/// What `sse-latency` measured.
#[derive(Debug, Clone, Serialize)]
pub struct EndToEnd {
    pub kafka: Receipt,
    pub sse: Receipt,
    /// sse p99 minus kafka p99.
    pub p99_added_ms: Option<f64>,
    /// Acknowledgements the stream's client sent, and how many failed.
    pub acks: u64,
    pub ack_errors: u64,
}

/// What every value of an `sse-latency` run carries (its `data` padding is skipped).
#[derive(Debug, Deserialize)]
pub(super) struct Stamp {
    probe: bool,
    run: u64,
    sent_us: u64,
    seq: u64,
}

/// One consumer's receipts.
#[derive(Debug)]
pub(super) struct Receipts {
    run: u64,
    /// Probes seen: the consumer is in its group and reading.
    pub(super) ready: bool,
    /// Records sent before this (µs on the run's clock) are left out of the latencies.
    pub(super) warm_from_us: u64,
    seen: Vec<bool>,
    pub(super) received: u64,
    duplicates: u64,
    latency_us: Histogram<u64>,
}

impl Receipts {
    pub(super) fn new(run: u64) -> anyhow::Result<Receipts> {
        Ok(Receipts {
            run,
            ready: false,
            warm_from_us: u64::MAX,
            seen: Vec::new(),
            received: 0,
            duplicates: 0,
            latency_us: Histogram::new_with_bounds(1, 3_600_000_000, 3)
                .context("histogram bounds")?,
        })
    }

    pub(super) fn record(&mut self, s: &Stamp, now_us: u64) {
        if s.run != self.run {
            return;
        }
        if s.probe {
            self.ready = true;
            return;
        }
        let i = s.seq as usize;
        if self.seen.len() <= i {
            self.seen.resize(i + 1, false);
        }
        if self.seen[i] {
            self.duplicates += 1;
            return;
        }
        self.seen[i] = true;
        self.received += 1;
        if s.sent_us >= self.warm_from_us {
            self.latency_us
                .saturating_record(now_us.saturating_sub(s.sent_us).max(1));
        }
    }

    pub(super) fn receipt(&self, delivered: u64) -> Receipt {
        Receipt {
            received: self.received,
            missed: delivered.saturating_sub(self.received),
            duplicates: self.duplicates,
            latency: latency_of(&self.latency_us),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn receipts_count_misses_duplicates_and_skip_the_warmup() {
        let mut r = Receipts::new(7).unwrap();
        let stamp = |seq, sent_us| Stamp {
            probe: false,
            run: 7,
            sent_us,
            seq,
        };
        r.record(
            &Stamp {
                probe: true,
                run: 7,
                sent_us: 0,
                seq: 0,
            },
            5,
        );
        assert!(r.ready && r.received == 0);
        r.warm_from_us = 100;
        r.record(&stamp(0, 50), 60);
        r.record(&stamp(1, 150), 1150);
        r.record(&stamp(1, 150), 1200);
        r.record(
            &Stamp {
                run: 8,
                ..stamp(2, 200)
            },
            300,
        );
        let got = r.receipt(3);
        assert_eq!((got.received, got.missed, got.duplicates), (2, 1, 1));
        assert_eq!(got.latency.unwrap().p50_ms, 1.0);
    }
}
