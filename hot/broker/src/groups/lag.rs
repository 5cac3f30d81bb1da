//! Each group's lag on the partitions with a replica here: records, bytes, the age of
//! the oldest unconsumed record, and at its trend the time until the group's position
//! falls out of retention; exported to /metrics every 5 s.

use std::collections::HashMap;
use std::sync::Mutex;

use super::{Groups, Shard};
use crate::partition::Partition;

/// (group, topic, partition).
type GroupPartition = (String, String, i32);

/// One partition's lag for one group.
#[derive(Clone, Debug, PartialEq)]
pub struct Lag {
    pub group: String,
    pub topic: String,
    pub partition: i32,
    pub committed: i64,
    pub log_start: i64,
    pub log_end: i64,
    /// Records between the committed offset and the high-water mark.
    pub records: i64,
    /// Bytes those records take in the log, estimated from the partition's local
    /// average record size.
    pub bytes: i64,
    /// How old the oldest unconsumed record is (ms); 0 when caught up, `None` when its
    /// record is not on local disk.
    pub age_ms: Option<i64>,
    /// How long until the group's position falls out of retention at the current
    /// trend of its lag's age (ms); `None` for never (flat or shrinking lag, or
    /// unbounded retention).
    pub headroom_ms: Option<i64>,
    /// The committed offset is below the log start: the records it pointed at are gone.
    pub out_of_retention: bool,
}

/// The window over which the lag's age trend is measured.
const TREND_WINDOW_MS: i64 = 5 * 60 * 1000;

/// Time until the position falls out of retention: the age grows at `rate` (ms of age
/// per ms, 1.0 for a stopped group) from `age` towards `retention_ms`.
pub fn retention_headroom(age_ms: i64, retention_ms: i64, rate: f64) -> Option<i64> {
    if retention_ms < 0 || rate <= 0.0 {
        return None;
    }
    Some((((retention_ms - age_ms).max(0)) as f64 / rate) as i64)
}

/// The lag trend's history and the figures last exported.
#[derive(Debug, Default)]
pub(super) struct LagTracker {
    /// Per (group, topic, partition): recent (time, lag age) samples, for the trend
    /// behind the time to the retention edge.
    history: Mutex<HashMap<GroupPartition, std::collections::VecDeque<(i64, i64)>>>,
    /// The lag figures last exported, rendered into /metrics by
    /// [`LagTracker::render`]: only the (group, partition) pairs that still exist,
    /// where gauges registered with the metrics crate would stay forever.
    exported: Mutex<Vec<Lag>>,
}

impl LagTracker {
    /// Appends the last exported lag figures to a Prometheus text exposition:
    /// `strata_group_lag_records`, `strata_group_lag_bytes`, `strata_group_lag_seconds`
    /// and `strata_group_retention_headroom_seconds`, per group, topic and partition.
    pub(super) fn render(&self, out: &mut String) {
        use std::fmt::Write as _;
        let lags = self.exported.lock().unwrap_or_else(|e| e.into_inner());
        if lags.is_empty() {
            return;
        }
        type Value = fn(&Lag) -> Option<f64>;
        let series: [(&str, &str, Value); 4] = [
            (
                "strata_group_lag_records",
                "Records between the group's committed offset and the high-water mark",
                |l| Some(l.records as f64),
            ),
            (
                "strata_group_lag_bytes",
                "Bytes those records take, from the partition's average record size",
                |l| Some(l.bytes as f64),
            ),
            (
                "strata_group_lag_seconds",
                "Age of the oldest record the group has not consumed",
                |l| l.age_ms.map(|a| a as f64 / 1e3),
            ),
            (
                "strata_group_retention_headroom_seconds",
                "Time until the group's position falls out of retention at its trend",
                // +Inf for never.
                |l| Some(l.headroom_ms.map_or(f64::INFINITY, |h| h as f64 / 1e3)),
            ),
        ];
        for (name, help, value) in series {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
            for l in lags.iter() {
                let Some(v) = value(l) else { continue };
                let v = if v == f64::INFINITY {
                    "+Inf".to_string()
                } else {
                    v.to_string()
                };
                let _ = writeln!(
                    out,
                    "{name}{{group=\"{}\",topic=\"{}\",partition=\"{}\"}} {v}",
                    crate::exposition::escape_label(&l.group),
                    crate::exposition::escape_label(&l.topic),
                    l.partition
                );
            }
        }
    }
}

impl Groups {
    /// The lag of every group this broker coordinates, on the partitions with a
    /// replica here (the figures a lag dashboard and `/metrics` show).
    pub(crate) fn lags(&self) -> Vec<Lag> {
        let now = self.clock.now_ms();
        let committed: Vec<(String, String, i32, i64)> = {
            let shards = self.shards.lock().unwrap_or_else(|e| e.into_inner());
            shards
                .values()
                .flat_map(Shard::live_offsets)
                .map(|(g, t, p, c)| (g, t, p, c.offset))
                .collect()
        };
        let mut history = self.lag.history.lock().unwrap_or_else(|e| e.into_inner());
        // The trend of a (group, partition) no longer committed (a deleted group or
        // topic) is dropped with it.
        let live: std::collections::HashSet<(&str, &str, i32)> = committed
            .iter()
            .map(|(g, t, p, _)| (g.as_str(), t.as_str(), *p))
            .collect();
        history.retain(|(g, t, p), _| live.contains(&(g.as_str(), t.as_str(), *p)));
        drop(live);
        let mut out = Vec::new();
        for (group, topic, index, offset) in committed {
            let Some(p) = self.replicas.partition(&topic, index) else {
                continue;
            };
            let retention_ms = p.config().retention_ms;
            let (start, end) = (p.log_start_offset(), p.high_watermark());
            let records = (end - offset).max(0);
            let age_ms = if records == 0 {
                Some(0)
            } else {
                record_timestamp(&p, offset.max(start)).map(|ts| (now - ts).max(0))
            };
            let key = (group.clone(), topic.clone(), index);
            let samples = history.entry(key).or_default();
            if let Some(age) = age_ms {
                samples.push_back((now, age));
            }
            while samples
                .front()
                .is_some_and(|(t, _)| now - t > TREND_WINDOW_MS)
            {
                samples.pop_front();
            }
            let rate = match (samples.front(), samples.back()) {
                (Some(&(t0, a0)), Some(&(t1, a1))) if t1 - t0 >= 10_000 => {
                    (a1 - a0) as f64 / (t1 - t0) as f64
                }
                // Too little history: a position that has not moved ages at 1 ms/ms.
                _ => {
                    if records > 0 {
                        1.0
                    } else {
                        0.0
                    }
                }
            };
            let headroom_ms = age_ms.and_then(|a| retention_headroom(a, retention_ms, rate));
            let local = (p.log().log_end() - p.log().local_start()).max(1);
            let bytes = (records as f64 * p.log().local_bytes() as f64 / local as f64) as i64;
            out.push(Lag {
                group,
                topic,
                partition: index,
                committed: offset,
                log_start: start,
                log_end: end,
                records,
                bytes,
                age_ms,
                headroom_ms,
                out_of_retention: offset < start,
            });
        }
        out
    }

    /// Appends the last exported lag figures to a Prometheus text exposition:
    /// `strata_group_lag_records`, `strata_group_lag_bytes`, `strata_group_lag_seconds`
    /// and `strata_group_retention_headroom_seconds`, per group, topic and partition.
    pub fn render_lag_metrics(&self, out: &mut String) {
        self.lag.render(out)
    }
}

/// The timestamp of the record at `offset`, if it is on local disk. A batch that does
/// not decode (its records past the decompression cap, say) gives no age: it is counted
/// in `strata_group_lag_unreadable_total` and the lag is exported without it.
fn record_timestamp(p: &Partition, offset: i64) -> Option<i64> {
    let r = p.read_local(offset, 1).ok()?;
    let b = strata_proto::batch::batches(&r.data).next()?.ok()?;
    let found = b.records().and_then(|records| {
        for rec in records.iter() {
            let rec = rec?;
            if rec.offset >= offset {
                return Ok(Some(rec.timestamp));
            }
        }
        Ok(None)
    });
    found.unwrap_or_else(|e| {
        metrics::counter!("strata_group_lag_unreadable_total").increment(1);
        tracing::debug!(partition = p.index, offset, error = %e, "no lag age: the batch does not decode");
        None
    })
}

/// Exports the lag figures and warns about groups whose position aged out.
pub(super) fn export_lag(groups: &Groups, warned: &mut std::collections::HashSet<GroupPartition>) {
    let lags = groups.lags();
    let mut out_of_retention = 0;
    for l in &lags {
        let key = (l.group.clone(), l.topic.clone(), l.partition);
        if l.out_of_retention {
            out_of_retention += 1;
            if warned.insert(key) {
                tracing::warn!(
                    group = %l.group, topic = %l.topic, partition = l.partition,
                    committed = l.committed, log_start = l.log_start,
                    "the group's committed offset is below the log start: those records are gone; the consumer's auto.offset.reset decides where it resumes"
                );
            }
        } else {
            warned.remove(&key);
        }
    }
    metrics::gauge!("strata_group_out_of_retention_partitions").set(out_of_retention as f64);
    // A group or topic gone is forgotten.
    let current: std::collections::HashSet<(&str, &str, i32)> = lags
        .iter()
        .map(|l| (l.group.as_str(), l.topic.as_str(), l.partition))
        .collect();
    warned.retain(|(g, t, p)| current.contains(&(g.as_str(), t.as_str(), *p)));
    drop(current);
    *groups
        .lag
        .exported
        .lock()
        .unwrap_or_else(|e| e.into_inner()) = lags;
}

#[cfg(test)]
mod tests {
    use super::{Lag, LagTracker, retention_headroom};

    #[test]
    fn headroom_follows_the_lag_age_trend() {
        let day = 86_400_000;
        // A stopped group: its oldest unconsumed record ages in real time.
        assert_eq!(retention_headroom(day, 7 * day, 1.0), Some(6 * day));
        // Falling behind at half speed: twice as long.
        assert_eq!(retention_headroom(day, 7 * day, 0.5), Some(12 * day));
        // Flat or shrinking lag, or unbounded retention: never.
        assert_eq!(retention_headroom(day, 7 * day, 0.0), None);
        assert_eq!(retention_headroom(day, 7 * day, -0.3), None);
        assert_eq!(retention_headroom(day, -1, 1.0), None);
        // Already past the edge.
        assert_eq!(retention_headroom(8 * day, 7 * day, 1.0), Some(0));
    }

    #[test]
    fn lag_series_render_escaped_and_only_what_was_last_exported() {
        let groups = LagTracker::default();
        let mut out = String::new();
        groups.render(&mut out);
        assert_eq!(out, "", "nothing before the first export");
        let lag = Lag {
            group: "a\"b\\c\nd".to_string(),
            topic: "t".to_string(),
            partition: 3,
            committed: 10,
            log_start: 0,
            log_end: 30,
            records: 20,
            bytes: 2048,
            age_ms: None,
            headroom_ms: None,
            out_of_retention: false,
        };
        *groups.exported.lock().unwrap() = vec![lag];
        groups.render(&mut out);
        let labels = r#"{group="a\"b\\c\nd",topic="t",partition="3"}"#;
        assert!(
            out.contains(&format!("strata_group_lag_records{labels} 20\n")),
            "{out}"
        );
        assert!(
            out.contains(&format!("strata_group_lag_bytes{labels} 2048\n")),
            "{out}"
        );
        // No age (its record is not local): no series; no headroom: +Inf.
        assert!(!out.contains("strata_group_lag_seconds{"), "{out}");
        assert!(
            out.contains(&format!(
                "strata_group_retention_headroom_seconds{labels} +Inf\n"
            )),
            "{out}"
        );
        assert!(out.contains("# TYPE strata_group_lag_records gauge\n"));
        // The next export replaces the series: a group gone is gone.
        groups.exported.lock().unwrap().clear();
        let mut again = String::new();
        groups.render(&mut again);
        assert_eq!(again, "");
    }
}
