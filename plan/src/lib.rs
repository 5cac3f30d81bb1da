//! Capacity planning for a Strata cluster (strata-plan, behind `strata plan`), sans IO:
//! from a workload (event rate and size,
//! replication, retention local and total, partitions, consumer groups and how far one
//! is behind, per-broker budgets, object-store prices and limits) the figures an
//! operator sizes a cluster with, and what tiering changes in them.
//!
//! The default [`Workload`] is the reference example: 1 M events/s of 1 KB, RF 3, 7 days
//! kept, 1 day local, 200 partitions, one group a day behind. [`plan`] gives its figures:
//! 1 GB/s in, 3 GB/s replicated, 86.4 TB a day raw, ~1.8 PB for 7 days at RF 3, the
//! day-behind group drained in 4.8 h.
//!
//! Bytes are bytes and rates are per second throughout; units are decimal
//! (1 GB = 10^9 bytes), as cloud prices and NIC speeds are. The month object stores
//! bill by is 30 days.
//!
//! * this file: [`Workload`] in, [`plan`] out: the arithmetic.
//! * [`live`]: a running cluster's exported lag and headroom as "loses data in ...",
//!   with a scaled retention as the what-if (`strata plan --from-cluster`).
//! * [`sim`]: a seeded model of a lagging group draining through the tier, for what
//!   arithmetic cannot say (cache misses, read-ahead, GET latency; `--simulate`).

use serde::{Deserialize, Serialize};

pub mod live;
pub mod sim;

pub const DAY: f64 = 86_400.0;
/// The month object-store prices are quoted for.
pub const MONTH: f64 = 30.0 * DAY;

/// Object-store prices, in dollars (S3 Standard's list prices by default).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Prices {
    /// Per 1,000 PUT-class requests (PUT, UploadPart, Create/CompleteMultipartUpload).
    pub put_per_1000: f64,
    /// Per 1,000 GET requests.
    pub get_per_1000: f64,
    /// Per GB (10^9 bytes) stored for a month.
    pub storage_per_gb_month: f64,
}

impl Default for Prices {
    fn default() -> Self {
        Prices {
            put_per_1000: 0.005,
            get_per_1000: 0.0004,
            storage_per_gb_month: 0.023,
        }
    }
}

/// How Strata lays a segment out in the bucket: what one offloaded segment costs in
/// objects, requests and manifest bytes.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Layout {
    /// Objects per segment besides the data (`.index`, `.timeindex`, `.state`,
    /// `.epochs`), each one PUT.
    pub side_objects: f64,
    /// A data object of at least this many bytes is a multipart upload.
    pub multipart_threshold: f64,
    /// Its part size (one UploadPart each, plus Create and Complete).
    pub part_bytes: f64,
    /// Manifest deltas per segment committed (one create-only PUT each).
    pub manifest_puts_per_segment: f64,
    /// A manifest snapshot every this many deltas.
    pub snapshot_every: f64,
    /// Bytes of an empty manifest snapshot, and what each segment adds to it.
    pub manifest_base_bytes: f64,
    pub manifest_bytes_per_segment: f64,
}

impl Default for Layout {
    /// strata-tier's and strata-store's defaults; `strata plan` measures the manifest
    /// sizes from strata-tier's own encoding and passes them in.
    fn default() -> Self {
        Layout {
            side_objects: 4.0,
            multipart_threshold: 16.0 * 1024.0 * 1024.0,
            part_bytes: 8.0 * 1024.0 * 1024.0,
            manifest_puts_per_segment: 1.0,
            snapshot_every: 256.0,
            manifest_base_bytes: 64.0,
            manifest_bytes_per_segment: 64.0,
        }
    }
}

/// A workload and the cluster it runs on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Workload {
    pub events_per_sec: f64,
    pub event_bytes: f64,
    pub replication_factor: u32,
    /// How long records are kept.
    pub retention_secs: f64,
    /// How long they stay on local disk too; `None`: no tiering, everything local.
    pub local_retention_secs: Option<f64>,
    /// Partitions of the topic (the workload's events are spread over them).
    pub partitions: u32,
    /// Consumer groups reading everything; `lagging_groups` of them are `lag_secs` behind,
    /// the rest live.
    pub consumer_groups: u32,
    pub lagging_groups: u32,
    pub lag_secs: f64,
    /// Consumers per group, and the events per second each processes flat out.
    pub consumers: u32,
    pub consumer_rate: f64,
    /// Replicated write bytes per second one broker takes (disk and network).
    pub broker_write_budget: f64,
    /// Bytes per second one broker serves to consumers.
    pub broker_read_budget: f64,
    /// A segment rolls at this size or age (segment.bytes, segment.ms).
    pub segment_bytes: f64,
    pub segment_secs: f64,
    /// Bytes per GET when a consumer reads from the tier (--remote-chunk).
    pub chunk_bytes: f64,
    /// Requests per second the bucket takes per prefix (S3: 3,500 PUT, 5,500 GET);
    /// Strata's prefix is per partition.
    pub bucket_put_limit: f64,
    pub bucket_get_limit: f64,
    /// How many times a month a lagging group catches up (for the month's GETs).
    pub catch_ups_per_month: f64,
    pub prices: Prices,
    pub layout: Layout,
}

impl Default for Workload {
    /// The seed's workload: 1 M events/s of 1 KB, RF 3, 7 days kept, 1 day local, 200
    /// partitions, four groups of 200 consumers at 30,000 events/s, one a day behind, 150
    /// MB/s of replicated write per broker.
    fn default() -> Self {
        Workload {
            events_per_sec: 1_000_000.0,
            event_bytes: 1_000.0,
            replication_factor: 3,
            retention_secs: 7.0 * DAY,
            local_retention_secs: Some(DAY),
            partitions: 200,
            consumer_groups: 4,
            lagging_groups: 1,
            lag_secs: DAY,
            consumers: 200,
            consumer_rate: 30_000.0,
            broker_write_budget: 150e6,
            broker_read_budget: 500e6,
            segment_bytes: 1024.0 * 1024.0 * 1024.0,
            segment_secs: 7.0 * DAY,
            chunk_bytes: 8.0 * 1024.0 * 1024.0,
            bucket_put_limit: 3_500.0,
            bucket_get_limit: 5_500.0,
            catch_ups_per_month: 1.0,
            prices: Prices::default(),
            layout: Layout::default(),
        }
    }
}

/// What is wrong with a workload, by the flag that says it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalid {
    pub field: &'static str,
    pub reason: String,
}

impl std::fmt::Display for Invalid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.reason)
    }
}

impl std::error::Error for Invalid {}

impl Workload {
    /// Checks what the arithmetic needs: positive rates and sizes, whole counts.
    pub fn validate(&self) -> Result<(), Invalid> {
        let positive: [(&'static str, f64); 9] = [
            ("events-per-sec", self.events_per_sec),
            ("event-bytes", self.event_bytes),
            ("retention", self.retention_secs),
            ("consumer-rate", self.consumer_rate),
            ("broker-write-budget", self.broker_write_budget),
            ("broker-read-budget", self.broker_read_budget),
            ("segment-bytes", self.segment_bytes),
            ("segment-ms", self.segment_secs),
            ("chunk-bytes", self.chunk_bytes),
        ];
        for (field, v) in positive {
            if !(v.is_finite() && v > 0.0) {
                return Err(Invalid {
                    field,
                    reason: format!("must be above 0, not {v}"),
                });
            }
        }
        let non_negative: [(&'static str, f64); 6] = [
            ("lag", self.lag_secs),
            ("catch-ups-per-month", self.catch_ups_per_month),
            ("bucket-put-limit", self.bucket_put_limit),
            ("bucket-get-limit", self.bucket_get_limit),
            ("put-price", self.prices.put_per_1000),
            ("get-price", self.prices.get_per_1000),
        ];
        for (field, v) in non_negative
            .into_iter()
            .chain([("storage-price", self.prices.storage_per_gb_month)])
        {
            if !(v.is_finite() && v >= 0.0) {
                return Err(Invalid {
                    field,
                    reason: format!("must be 0 or more, not {v}"),
                });
            }
        }
        if let Some(l) = self.local_retention_secs
            && !(l.is_finite() && l > 0.0)
        {
            return Err(Invalid {
                field: "local-retention",
                reason: format!("must be above 0, not {l}"),
            });
        }
        for (field, v) in [
            ("replication-factor", self.replication_factor),
            ("partitions", self.partitions),
            ("consumers", self.consumers),
        ] {
            if v == 0 {
                return Err(Invalid {
                    field,
                    reason: "must be at least 1".into(),
                });
            }
        }
        if self.lagging_groups > self.consumer_groups {
            return Err(Invalid {
                field: "lagging-groups",
                reason: format!(
                    "{} lagging groups but only {} consumer groups",
                    self.lagging_groups, self.consumer_groups
                ),
            });
        }
        Ok(())
    }
}

/// A lagging group's catch-up.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CatchUp {
    pub lag_secs: f64,
    /// Events behind when it starts (at most what retention still holds).
    pub backlog_events: f64,
    pub backlog_bytes: f64,
    /// Events already deleted by retention (the group is further behind than retention).
    pub lost_events: f64,
    /// Of the backlog, bytes older than local retention: read from the bucket.
    pub tier_bytes: f64,
    /// Consumers that get partitions (no more than the partitions), and whether that
    /// capped them.
    pub consumers_effective: u32,
    pub capped_by_partitions: bool,
    /// Events per second the group processes flat out, and what that gains on live
    /// traffic.
    pub drain_events_per_sec: f64,
    pub surplus_events_per_sec: f64,
    /// How long the drain takes; `None`: never (it does not outpace live traffic).
    pub seconds: Option<f64>,
    /// When it does not catch up: how long until its position falls out of retention.
    pub loses_data_in_secs: Option<f64>,
    /// The finding in a sentence.
    pub status: String,
}

/// The figures for a workload.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Plan {
    pub ingress_bytes_per_sec: f64,
    pub replicated_bytes_per_sec: f64,
    pub events_per_partition_per_sec: f64,
    pub bytes_per_partition_per_sec: f64,
    /// Readers a group can use at once: one per partition.
    pub partition_parallelism_cap: u32,
    /// Consumer bytes per second: the live groups' plus the lagging ones' drain.
    pub read_bytes_per_sec: f64,
    pub brokers_for_writes: u32,
    pub brokers_for_reads: u32,
    /// The larger of the two, and at least the replication factor.
    pub brokers: u32,
    pub raw_bytes_per_day: f64,
    pub replicated_bytes_per_day: f64,
    /// Replicated bytes over the whole retention.
    pub retained_bytes: f64,
    pub tiered: bool,
    /// Local disk one broker needs (over `brokers`), as configured (local retention
    /// with tiering), and without tiering (the whole retention).
    pub local_bytes_per_broker: f64,
    pub local_bytes_per_broker_without_tiering: f64,
    /// One copy of the whole retention (the object store keeps its own redundancy); 0
    /// without tiering.
    pub bucket_bytes: f64,
    /// Seconds between segment rolls in one partition (size or age, whichever first).
    pub segment_roll_secs: f64,
    pub segments_per_partition: f64,
    pub objects_per_partition: f64,
    pub objects: f64,
    pub manifest_bytes_per_partition: f64,
    pub put_per_sec: f64,
    pub put_per_sec_per_partition: f64,
    /// GETs one catch-up makes (the backlog older than local retention, in chunks), and
    /// their rate while it runs.
    pub gets_per_catch_up: f64,
    pub get_per_sec_while_catching_up: f64,
    pub get_per_sec_per_partition_while_catching_up: f64,
    pub put_cost_per_month: f64,
    pub get_cost_per_month: f64,
    pub storage_cost_per_month: f64,
    pub catch_up: Option<CatchUp>,
    /// `catch_up.seconds`, at the top for scripts; `None` when nothing lags or it never
    /// catches up.
    pub catch_up_seconds: Option<f64>,
    /// Findings worth a line each: caps hit, data lost, limits near.
    pub notes: Vec<String>,
}

/// `x` rounded up to a whole count, forgiving the last bits of float error (3e9 / 150e6
/// is 20, not 21).
fn whole(x: f64) -> u32 {
    let r = x.round();
    let n = if (x - r).abs() < 1e-9 * x.abs().max(1.0) {
        r
    } else {
        x.ceil()
    };
    n.clamp(0.0, f64::from(u32::MAX)) as u32
}

/// A duration for a sentence: seconds, minutes, hours or days.
pub fn human_secs(s: f64) -> String {
    if s < 120.0 {
        format!("{s:.0} s")
    } else if s < 2.0 * 3600.0 {
        format!("{:.1} min", s / 60.0)
    } else if s < 2.0 * DAY {
        format!("{:.1} h", s / 3600.0)
    } else {
        format!("{:.1} days", s / DAY)
    }
}

/// Bytes for a sentence, decimal units.
pub fn human_bytes(b: f64) -> String {
    const UNITS: [&str; 7] = ["B", "KB", "MB", "GB", "TB", "PB", "EB"];
    let mut v = b;
    let mut i = 0;
    while v.abs() >= 1000.0 && i + 1 < UNITS.len() {
        v /= 1000.0;
        i += 1;
    }
    if i == 0 {
        format!("{v:.0} B")
    } else {
        format!("{v:.1} {}", UNITS[i])
    }
}

fn catch_up(w: &Workload) -> Option<CatchUp> {
    if w.lagging_groups == 0 || w.lag_secs <= 0.0 {
        return None;
    }
    let eps = w.events_per_sec;
    let lost_secs = (w.lag_secs - w.retention_secs).max(0.0);
    // A group behind retention restarts at the log start (auto.offset.reset=earliest):
    // what is left to read is the retention window.
    let behind_secs = w.lag_secs.min(w.retention_secs);
    let backlog_events = behind_secs * eps;
    let local = w.local_retention_secs.unwrap_or(w.retention_secs);
    let consumers_effective = w.consumers.min(w.partitions);
    let capped_by_partitions = w.consumers > w.partitions;
    let drain = f64::from(consumers_effective) * w.consumer_rate;
    let surplus = drain - eps;
    // The group reads the bucket while its position is older than local retention. Its
    // age falls by surplus/eps seconds a second, so that lasts (behind - local) * eps /
    // surplus seconds, at `drain` events a second: more than the (behind - local) * eps
    // events behind the local edge at the start, as records age out of local disk while
    // it reads. A group that never drains reads the bucket for good (none counted here).
    let tier_bytes = if surplus > 0.0 {
        (behind_secs - local).max(0.0) * eps / surplus * drain * w.event_bytes
    } else {
        0.0
    };
    let seconds = (surplus > 0.0).then(|| backlog_events / surplus);
    // Its position ages by (1 - drain/eps) seconds per second while it falls behind.
    let loses_data_in_secs = (surplus < 0.0 && lost_secs == 0.0)
        .then(|| (w.retention_secs - behind_secs) / (1.0 - drain / eps));
    let mut status = match seconds {
        Some(s) => format!(
            "drains {} behind in {} ({:.0} events/s over live traffic)",
            human_secs(w.lag_secs),
            human_secs(s),
            surplus
        ),
        None if surplus == 0.0 => format!(
            "never drains: {consumers_effective} consumers at {:.0} events/s only keep up \
             with live traffic",
            w.consumer_rate
        ),
        None => format!(
            "never drains: {consumers_effective} consumers process {drain:.0} events/s, \
             less than the {eps:.0} arriving"
        ),
    };
    if lost_secs > 0.0 {
        status = format!(
            "data already lost: the group is {} behind and retention keeps {}, so {:.0} \
             events are gone; from the log start it {status}",
            human_secs(w.lag_secs),
            human_secs(w.retention_secs),
            lost_secs * eps
        );
    } else if let Some(l) = loses_data_in_secs {
        status = format!("{status}; it falls out of retention in {}", human_secs(l));
    }
    if capped_by_partitions {
        status = format!(
            "{status}; consumers capped at {} (the partitions): {} of {} are idle",
            w.partitions,
            w.consumers - w.partitions,
            w.consumers
        );
    }
    Some(CatchUp {
        lag_secs: w.lag_secs,
        backlog_events,
        backlog_bytes: backlog_events * w.event_bytes,
        lost_events: lost_secs * eps,
        tier_bytes,
        consumers_effective,
        capped_by_partitions,
        drain_events_per_sec: drain,
        surplus_events_per_sec: surplus,
        seconds,
        loses_data_in_secs,
        status,
    })
}

/// The figures for `w` (validated with [`Workload::validate`] first).
pub fn plan(w: &Workload) -> Plan {
    let ingress = w.events_per_sec * w.event_bytes;
    let rf = f64::from(w.replication_factor);
    let replicated = ingress * rf;
    let partitions = f64::from(w.partitions);
    let per_partition = ingress / partitions;
    let catch_up = catch_up(w);

    let live_groups = w.consumer_groups - w.lagging_groups.min(w.consumer_groups);
    let lagging_read = catch_up
        .as_ref()
        .map_or(0.0, |c| c.drain_events_per_sec * w.event_bytes);
    let read = f64::from(live_groups) * ingress + f64::from(w.lagging_groups) * lagging_read;
    let brokers_for_writes = whole(replicated / w.broker_write_budget).max(1);
    let brokers_for_reads = whole(read / w.broker_read_budget);
    let brokers = brokers_for_writes
        .max(brokers_for_reads)
        .max(w.replication_factor);

    let retained = replicated * w.retention_secs;
    let tiered = w.local_retention_secs.is_some();
    let local_secs = w
        .local_retention_secs
        .unwrap_or(w.retention_secs)
        .min(w.retention_secs);
    let local_bytes_per_broker = replicated * local_secs / f64::from(brokers);
    let local_without = retained / f64::from(brokers);
    let bucket_bytes = if tiered {
        ingress * w.retention_secs
    } else {
        0.0
    };

    // Objects and requests: only with tiering.
    let l = &w.layout;
    let roll = (w.segment_bytes / per_partition).min(w.segment_secs);
    let segment_bytes = per_partition * roll;
    let data_puts = if segment_bytes >= l.multipart_threshold {
        (segment_bytes / l.part_bytes).ceil() + 2.0
    } else {
        1.0
    };
    let puts_per_segment =
        data_puts + l.side_objects + l.manifest_puts_per_segment * (1.0 + 1.0 / l.snapshot_every);
    let segments = if tiered {
        (w.retention_secs / roll).ceil()
    } else {
        0.0
    };
    let manifest_objects = if tiered {
        segments.min(l.snapshot_every) + 1.0
    } else {
        0.0
    };
    let objects_per_partition = segments * (1.0 + l.side_objects) + manifest_objects;
    let manifest_bytes = if tiered {
        l.manifest_base_bytes + segments * l.manifest_bytes_per_segment
    } else {
        0.0
    };
    let put_per_partition = if tiered { puts_per_segment / roll } else { 0.0 };
    let put_per_sec = put_per_partition * partitions;
    let tier_bytes = catch_up.as_ref().map_or(0.0, |c| c.tier_bytes);
    let gets_per_catch_up = (tier_bytes / w.chunk_bytes).ceil() * f64::from(w.lagging_groups);
    let get_rate = match catch_up.as_ref() {
        Some(c) if tiered && c.lag_secs.min(w.retention_secs) > local_secs => {
            // The group reads the tier at its drain rate until the tier part is done.
            f64::from(w.lagging_groups) * c.drain_events_per_sec * w.event_bytes / w.chunk_bytes
        }
        _ => 0.0,
    };
    let get_per_partition = get_rate / partitions;
    let put_cost = put_per_sec * MONTH / 1000.0 * w.prices.put_per_1000;
    let get_cost = gets_per_catch_up * w.catch_ups_per_month / 1000.0 * w.prices.get_per_1000;
    let storage_cost = bucket_bytes / 1e9 * w.prices.storage_per_gb_month;

    let mut notes = Vec::new();
    if let Some(c) = &catch_up
        && c.tier_bytes == 0.0
        && tiered
    {
        notes.push(format!(
            "the backlog is within local retention ({}): it is read from local disk, not \
             the bucket",
            human_secs(local_secs)
        ));
    }
    if w.consumers > w.partitions {
        notes.push(format!(
            "each group's consumers are capped at {} (the partitions)",
            w.partitions
        ));
    }
    if put_per_partition > w.bucket_put_limit {
        notes.push(format!(
            "{put_per_partition:.0} PUT/s per partition is over the bucket's {:.0} per prefix",
            w.bucket_put_limit
        ));
    }
    if get_per_partition > w.bucket_get_limit {
        notes.push(format!(
            "{get_per_partition:.0} GET/s per partition while catching up is over the bucket's \
             {:.0} per prefix: the drain is slower than planned",
            w.bucket_get_limit
        ));
    }
    if brokers_for_reads > brokers_for_writes {
        notes.push(format!(
            "reads ({}/s) need more brokers than writes: {brokers_for_reads} against \
             {brokers_for_writes}",
            human_bytes(read)
        ));
    }
    if !tiered {
        notes.push(format!(
            "without tiering every broker keeps the whole {} on local disk",
            human_secs(w.retention_secs)
        ));
    }

    Plan {
        ingress_bytes_per_sec: ingress,
        replicated_bytes_per_sec: replicated,
        events_per_partition_per_sec: w.events_per_sec / partitions,
        bytes_per_partition_per_sec: per_partition,
        partition_parallelism_cap: w.partitions,
        read_bytes_per_sec: read,
        brokers_for_writes,
        brokers_for_reads,
        brokers,
        raw_bytes_per_day: ingress * DAY,
        replicated_bytes_per_day: replicated * DAY,
        retained_bytes: retained,
        tiered,
        local_bytes_per_broker,
        local_bytes_per_broker_without_tiering: local_without,
        bucket_bytes,
        segment_roll_secs: roll,
        segments_per_partition: segments,
        objects_per_partition,
        objects: objects_per_partition * partitions,
        manifest_bytes_per_partition: manifest_bytes,
        put_per_sec,
        put_per_sec_per_partition: put_per_partition,
        gets_per_catch_up,
        get_per_sec_while_catching_up: get_rate,
        get_per_sec_per_partition_while_catching_up: get_per_partition,
        put_cost_per_month: put_cost,
        get_cost_per_month: get_cost,
        storage_cost_per_month: storage_cost,
        catch_up_seconds: catch_up.as_ref().and_then(|c| c.seconds),
        catch_up,
        notes,
    }
}

#[cfg(test)]
mod tests;
