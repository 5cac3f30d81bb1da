//! The seed's figures from its inputs, and the edge cases said plainly.
#![allow(clippy::unwrap_used)]

use super::*;

fn close(got: f64, want: f64, rel: f64) -> bool {
    (got - want).abs() <= rel * want.abs()
}

/// The seed: 1 GB/s in, 3 GB/s replicated, 20 brokers for writes at 150 MB/s, 86.4 TB a
/// day raw and 259.2 TB replicated, 1.8144 PB for 7 days (the seed's "~1.8 PB"), 7.776
/// PB for 30 ("~7.8 PB"), 5,000 events/s per partition, 200 readers at most, 9 GB/s of
/// reads with three live groups and one catching up, and 17,280 s (4.8 h) to drain a day.
#[test]
fn the_seeds_inputs_give_the_seeds_figures() {
    let w = Workload::default();
    w.validate().unwrap();
    let p = plan(&w);
    assert_eq!(p.ingress_bytes_per_sec, 1e9);
    assert_eq!(p.replicated_bytes_per_sec, 3e9);
    assert_eq!(p.brokers_for_writes, 20);
    assert_eq!(p.raw_bytes_per_day, 86.4e12);
    assert!(close(p.replicated_bytes_per_day, 259.2e12, 1e-12));
    assert!(close(p.retained_bytes, 1.8144e15, 1e-12));
    assert_eq!(p.events_per_partition_per_sec, 5_000.0);
    assert_eq!(p.partition_parallelism_cap, 200);
    assert!(close(p.read_bytes_per_sec, 9e9, 1e-12));
    let c = p.catch_up.as_ref().unwrap();
    assert_eq!(c.backlog_events, 86.4e9);
    assert_eq!(c.drain_events_per_sec, 6e6);
    assert_eq!(c.surplus_events_per_sec, 5e6);
    assert!(close(p.catch_up_seconds.unwrap(), 17_280.0, 1e-12));
    assert!(!c.capped_by_partitions);
    // Tiering: one day local on 20 brokers (12.96 TB each) instead of seven (90.72 TB),
    // and one copy of the week in the bucket (604.8 TB).
    assert_eq!(p.brokers, 20);
    assert!(close(p.local_bytes_per_broker, 12.96e12, 1e-12));
    assert!(close(
        p.local_bytes_per_broker_without_tiering,
        90.72e12,
        1e-12
    ));
    assert!(close(p.bucket_bytes, 604.8e12, 1e-12));
    // 30 days: ~7.8 PB.
    let month = plan(&Workload {
        retention_secs: 30.0 * DAY,
        ..Workload::default()
    });
    assert!(close(month.retained_bytes, 7.776e15, 1e-12));
}

/// The bucket side of the seed: a 1 GiB segment every ~215 s per partition, uploaded
/// in 8 MiB parts; the request rate per partition prefix stays far under S3's limit.
#[test]
fn objects_and_requests_follow_the_segment_layout() {
    let p = plan(&Workload::default());
    let roll = 1073741824.0 / 5e6;
    assert!(close(p.segment_roll_secs, roll, 1e-12));
    // 128 parts + create + complete, 4 side objects, 1 delta, 1/256 of a snapshot.
    let puts = 128.0 + 2.0 + 4.0 + 1.0 + 1.0 / 256.0;
    assert!(close(p.put_per_sec_per_partition, puts / roll, 1e-12));
    assert!(close(p.put_per_sec, 200.0 * puts / roll, 1e-12));
    let segments = (7.0 * DAY / roll).ceil();
    assert_eq!(p.segments_per_partition, segments);
    assert_eq!(p.objects_per_partition, segments * 5.0 + 257.0);
    assert!(p.put_per_sec_per_partition < 3_500.0);
    // A day behind with a day local: the backlog is on local disk, no GETs.
    assert_eq!(p.gets_per_catch_up, 0.0);
    assert!(
        p.notes.iter().any(|n| n.contains("local disk")),
        "{:?}",
        p.notes
    );
    // Two days behind: the first day's worth, and what ages out while reading it, come
    // from the bucket in 8 MiB GETs.
    let p = plan(&Workload {
        lag_secs: 2.0 * DAY,
        ..Workload::default()
    });
    let tier = DAY * 1e6 / 5e6 * 6e6 * 1_000.0;
    assert!(close(p.catch_up.as_ref().unwrap().tier_bytes, tier, 1e-12));
    assert_eq!(p.gets_per_catch_up, (tier / 8388608.0).ceil());
    assert!(close(
        p.get_per_sec_while_catching_up,
        6e9 / 8388608.0,
        1e-12
    ));
    assert!(p.get_cost_per_month > 0.0 && p.storage_cost_per_month > 0.0);
}

/// A group further behind than retention has lost data; it is said so, and the drain
/// is of what is left.
#[test]
fn lag_beyond_retention_is_data_already_lost() {
    let p = plan(&Workload {
        lag_secs: 8.0 * DAY,
        ..Workload::default()
    });
    let c = p.catch_up.unwrap();
    assert!(c.status.starts_with("data already lost"), "{}", c.status);
    assert_eq!(c.lost_events, DAY * 1e6);
    assert_eq!(c.backlog_events, 7.0 * DAY * 1e6);
}

/// More consumers than partitions: capped at the partitions, said plainly.
#[test]
fn more_consumers_than_partitions_are_capped() {
    let p = plan(&Workload {
        consumers: 300,
        ..Workload::default()
    });
    let c = p.catch_up.unwrap();
    assert!(c.capped_by_partitions);
    assert_eq!(c.consumers_effective, 200);
    assert!(c.status.contains("capped at 200"), "{}", c.status);
    assert!(close(c.seconds.unwrap(), 17_280.0, 1e-12));
}

/// Consumers that cannot outpace live traffic never drain, and the plan says when the
/// group falls out of retention.
#[test]
fn a_group_that_cannot_keep_up_never_drains() {
    let p = plan(&Workload {
        consumers: 20,
        ..Workload::default()
    });
    assert_eq!(p.catch_up_seconds, None);
    let c = p.catch_up.unwrap();
    assert!(c.status.starts_with("never drains"), "{}", c.status);
    // 600k of 1M events/s: the position ages 0.4 s a second; 6 days of headroom.
    assert!(close(c.loses_data_in_secs.unwrap(), 6.0 * DAY / 0.4, 1e-12));
}

#[test]
fn without_tiering_everything_is_local() {
    let p = plan(&Workload {
        local_retention_secs: None,
        ..Workload::default()
    });
    assert_eq!(p.bucket_bytes, 0.0);
    assert_eq!(p.put_per_sec, 0.0);
    assert_eq!(
        p.local_bytes_per_broker,
        p.local_bytes_per_broker_without_tiering
    );
}

#[test]
fn invalid_inputs_name_their_flag() {
    for (w, field) in [
        (
            Workload {
                partitions: 0,
                ..Workload::default()
            },
            "partitions",
        ),
        (
            Workload {
                event_bytes: -1.0,
                ..Workload::default()
            },
            "event-bytes",
        ),
        (
            Workload {
                lagging_groups: 5,
                ..Workload::default()
            },
            "lagging-groups",
        ),
    ] {
        assert_eq!(w.validate().unwrap_err().field, field);
    }
}

proptest::proptest! {
    /// Whatever the workload, the figures are finite and consistent: replicated is RF
    /// times ingress, brokers cover writes and reads, tiering never needs more local disk.
    #[test]
    fn figures_are_consistent(
        eps in 1.0f64..1e7,
        bytes in 1.0f64..1e5,
        rf in 1u32..5,
        partitions in 1u32..2000,
        consumers in 1u32..3000,
        rate in 1.0f64..1e6,
        lag in 0.0f64..(30.0 * DAY),
        local in 60.0f64..(7.0 * DAY),
    ) {
        let w = Workload {
            events_per_sec: eps,
            event_bytes: bytes,
            replication_factor: rf,
            partitions,
            consumers,
            consumer_rate: rate,
            lag_secs: lag,
            local_retention_secs: Some(local),
            ..Workload::default()
        };
        w.validate().unwrap();
        let p = plan(&w);
        let json = serde_json::to_value(&p).unwrap();
        proptest::prop_assert!(json.is_object());
        proptest::prop_assert!(close(p.replicated_bytes_per_sec, p.ingress_bytes_per_sec * f64::from(rf), 1e-12));
        proptest::prop_assert!(f64::from(p.brokers) * w.broker_write_budget >= p.replicated_bytes_per_sec * (1.0 - 1e-9));
        proptest::prop_assert!(f64::from(p.brokers) * w.broker_read_budget >= p.read_bytes_per_sec * (1.0 - 1e-9));
        proptest::prop_assert!(p.local_bytes_per_broker <= p.local_bytes_per_broker_without_tiering * (1.0 + 1e-12));
        proptest::prop_assert!(p.put_per_sec.is_finite() && p.objects.is_finite());
        if let Some(s) = p.catch_up_seconds {
            proptest::prop_assert!(s.is_finite() && s >= 0.0);
        }
    }
}
