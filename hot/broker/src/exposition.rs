//! Series /metrics renders from the broker's own state rather than through the metrics
//! crate, whose registered series stay forever: per-group lag and per-partition traffic
//! are rendered from what exists now, so a deleted group, topic or partition leaves.

use std::fmt::Write as _;

use crate::fetch_sessions::FetchSessions;
use crate::groups::Groups;
use crate::replicas::ReplicaManager;

/// Appends these series to a Prometheus text exposition (the metrics crate's
/// render): per group and partition the lag (`strata_group_lag_*`), and per
/// partition led here that has had traffic since it opened,
/// `strata_partition_produce_bytes_total`, `strata_partition_produce_records_total`
/// and `strata_partition_fetch_bytes_total` (consumers only); the segment-file
/// descriptor cache (`strata_log_segment_files_*`) and the fetch sessions
/// (`strata_fetch_sessions`, `strata_fetch_session_partitions`), read at the scrape.
pub fn render(
    replicas: &ReplicaManager,
    groups: &Groups,
    fetch_sessions: &FetchSessions,
    out: &mut String,
) {
    groups.render_lag_metrics(out);
    render_segment_files(out);
    let (sessions, partitions) = fetch_sessions.usage();
    for (name, help, v) in [
        (
            "strata_fetch_sessions",
            "Fetch sessions (KIP-227) held now",
            sessions,
        ),
        (
            "strata_fetch_session_partitions",
            "Partitions all fetch sessions name together",
            partitions,
        ),
    ] {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {v}");
    }
    let mut rows = Vec::new();
    for t in replicas.topics() {
        for p in &t.partitions {
            let totals = p.traffic().totals();
            if totals != crate::traffic::Totals::default() {
                rows.push((escape_label(&t.name), p.index, totals));
            }
        }
    }
    if rows.is_empty() {
        return;
    }
    type Value = fn(&crate::traffic::Totals) -> u64;
    let series: [(&str, &str, Value); 3] = [
        (
            "strata_partition_produce_bytes_total",
            "Bytes produced to the partition while led here",
            |t| t.produce_bytes,
        ),
        (
            "strata_partition_produce_records_total",
            "Records produced to the partition while led here",
            |t| t.produce_records,
        ),
        (
            "strata_partition_fetch_bytes_total",
            "Bytes consumers fetched from the partition here",
            |t| t.fetch_bytes,
        ),
    ];
    for (name, help, value) in series {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
        for (topic, partition, totals) in &rows {
            let _ = writeln!(
                out,
                "{name}{{topic=\"{topic}\",partition=\"{partition}\"}} {}",
                value(totals)
            );
        }
    }
}

/// The segment-file descriptor cache (`strata_log::files`, `--log-open-files`) and the
/// tail buffers' budget (`strata_log::tail_budget`, `--log-tail-cache-total`).
fn render_segment_files(out: &mut String) {
    use strata_log::{files, read_cache};
    let series: [(&str, &str, &str, u64); 9] = [
        (
            "strata_log_read_cache_bytes",
            "Bytes of recently read segments in memory (direct mode, all partitions)",
            "gauge",
            read_cache::used() as u64,
        ),
        (
            "strata_log_read_cache_limit_bytes",
            "The read cache's budget (--log-read-cache)",
            "gauge",
            read_cache::limit() as u64,
        ),
        (
            "strata_log_read_cache_hits_total",
            "Reads of a chunk the read cache held",
            "counter",
            read_cache::hits(),
        ),
        (
            "strata_log_read_cache_misses_total",
            "Chunks read from the device into the read cache",
            "counter",
            read_cache::misses(),
        ),
        (
            "strata_log_tail_cache_bytes",
            "Bytes all partitions' tail buffers hold (direct mode)",
            "gauge",
            strata_log::tail_budget::used() as u64,
        ),
        (
            "strata_log_tail_cache_limit_bytes",
            "The tail buffers' budget (--log-tail-cache-total)",
            "gauge",
            strata_log::tail_budget::limit() as u64,
        ),
        (
            "strata_log_segment_files_open",
            "Segment file descriptors the broker holds now (all partitions)",
            "gauge",
            files::cached() as u64,
        ),
        (
            "strata_log_segment_files_capacity",
            "Segment file descriptors the broker keeps open at most (--log-open-files)",
            "gauge",
            files::capacity() as u64,
        ),
        (
            "strata_log_segment_file_opens_total",
            "Segment files opened (each a miss of the descriptor cache)",
            "counter",
            files::opens(),
        ),
    ];
    for (name, help, kind, v) in series {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}"
        );
    }
}

/// A Prometheus label value: backslash, double quote and newline escaped (group names
/// are any string a client sends).
pub(crate) fn escape_label(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}
