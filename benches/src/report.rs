//! What a run reports: throughput, latency percentiles and CPU cost, printed for people
//! and as one machine-readable `RESULT {json}` line.

use std::collections::BTreeMap;

use hdrhistogram::Histogram;
use serde::Serialize;

use crate::EndToEnd;

/// Delivery latency percentiles, in milliseconds.
#[derive(Debug, Clone, Serialize)]
pub struct Latency {
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
}

/// The longest gap between two acknowledgements of one partition (a killed leader's
/// partitions: the time until they accept writes again, as a client sees it).
#[derive(Debug, Clone, Serialize)]
pub struct AckGap {
    pub max_ms: f64,
    pub partition: i32,
}

/// What one run measured. Rates use MB = 10^6 bytes and GB = 10^9 bytes; bytes are record
/// keys plus values (what clients send, not the batch framing).
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub mode: String,
    pub topic: Option<String>,
    pub records: u64,
    pub bytes: u64,
    pub seconds: f64,
    pub mb_per_s: f64,
    pub records_per_s: f64,
    /// Produce only: send to delivery callback.
    pub latency: Option<Latency>,
    /// Produce only: the longest time one partition went without an acknowledgement.
    pub ack_gap: Option<AckGap>,
    pub errors: u64,
    /// None without --broker-pid.
    pub broker_cpu_seconds: Option<f64>,
    pub broker_cpu_s_per_gb: Option<f64>,
    /// The raw sequential write rate of the same number of bytes (disk mode, or produce
    /// with --disk-dir).
    pub disk_mb_per_s: Option<f64>,
    /// sse-latency only: each consumer's end-to-end latency.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub end_to_end: Option<EndToEnd>,
    /// Transactional produce only: how long ending a transaction took (EndTxn, after
    /// its records were flushed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub end_txn: Option<Latency>,
    /// The run's settings, for the record.
    pub settings: BTreeMap<String, String>,
}

impl Report {
    /// A run of `records` and `bytes` in `seconds`, with its rates and nothing else
    /// measured: each mode sets what else it measured on top.
    pub(crate) fn new(
        mode: &str,
        topic: Option<String>,
        records: u64,
        bytes: u64,
        seconds: f64,
        settings: BTreeMap<String, String>,
    ) -> Report {
        Report {
            mode: mode.into(),
            topic,
            records,
            bytes,
            seconds,
            mb_per_s: mb_per_s(bytes, seconds),
            records_per_s: records as f64 / seconds,
            latency: None,
            ack_gap: None,
            errors: 0,
            broker_cpu_seconds: None,
            broker_cpu_s_per_gb: None,
            disk_mb_per_s: None,
            end_to_end: None,
            end_txn: None,
            settings,
        }
    }

    /// The machine-readable line: `RESULT {json}`.
    pub fn result_line(&self) -> String {
        format!(
            "RESULT {}",
            serde_json::to_string(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
        )
    }

    /// A few lines for people.
    pub fn human(&self) -> String {
        let mut s = String::new();
        let settings: Vec<String> = self
            .settings
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        s += &format!("{} {}\n", self.mode, settings.join(" "));
        s += &format!(
            "  {} records, {:.1} MB in {:.2} s: {:.1} MB/s, {:.0} records/s",
            self.records,
            self.bytes as f64 / 1e6,
            self.seconds,
            self.mb_per_s,
            self.records_per_s
        );
        if self.errors > 0 {
            s += &format!(", {} errors", self.errors);
        }
        s += "\n";
        if let Some(l) = &self.latency {
            s += &format!(
                "  delivery latency: p50 {:.2} ms, p99 {:.2} ms, p99.9 {:.2} ms, max {:.2} ms\n",
                l.p50_ms, l.p99_ms, l.p999_ms, l.max_ms
            );
        }
        if let Some(g) = &self.ack_gap {
            s += &format!(
                "  longest wait between acknowledgements of one partition: {:.0} ms (partition {})\n",
                g.max_ms, g.partition
            );
        }
        if self.mode != "disk" {
            match (self.broker_cpu_seconds, self.broker_cpu_s_per_gb) {
                (Some(cpu), Some(per_gb)) => {
                    s += &format!("  broker CPU: {cpu:.2} s, {per_gb:.3} CPU-s per GB\n")
                }
                _ => s += "  broker CPU: n/a (give --broker-pid)\n",
            }
        }
        if let Some(d) = self.disk_mb_per_s {
            s += &format!("  disk sequential write (write + fsync): {d:.1} MB/s\n");
        }
        if let Some(e) = &self.end_to_end {
            for (who, r) in [("kafka consumer", &e.kafka), ("sse stream    ", &e.sse)] {
                s += &format!(
                    "  {who}: {} received, {} missed, {} duplicates",
                    r.received, r.missed, r.duplicates
                );
                if let Some(l) = &r.latency {
                    s += &format!(
                        "; end-to-end p50 {:.2} ms, p99 {:.2} ms, p99.9 {:.2} ms, max {:.2} ms",
                        l.p50_ms, l.p99_ms, l.p999_ms, l.max_ms
                    );
                }
                s += "\n";
            }
            if let Some(d) = e.p99_added_ms {
                s += &format!("  sse p99 - kafka p99: {d:+.2} ms\n");
            }
            s += &format!("  acknowledgements: {} ({} failed)\n", e.acks, e.ack_errors);
        }
        s
    }
}

pub(crate) fn latency_of(h: &Histogram<u64>) -> Option<Latency> {
    (!h.is_empty()).then(|| Latency {
        p50_ms: h.value_at_quantile(0.5) as f64 / 1e3,
        p99_ms: h.value_at_quantile(0.99) as f64 / 1e3,
        p999_ms: h.value_at_quantile(0.999) as f64 / 1e3,
        max_ms: h.max() as f64 / 1e3,
    })
}

pub(crate) fn mb_per_s(bytes: u64, secs: f64) -> f64 {
    if secs > 0.0 {
        bytes as f64 / 1e6 / secs
    } else {
        0.0
    }
}
