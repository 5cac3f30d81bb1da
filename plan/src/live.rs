//! What a live cluster's figures say about its groups: how long until each loses data
//! at today's trend, and what a shorter retention would do.
//!
//! The broker exports, per group and partition, the age of the oldest record the group
//! has not consumed (`strata_group_lag_seconds`, a) and the time until that position
//! falls out of retention at its trend (`strata_group_retention_headroom_seconds`, h,
//! +Inf for never). With the topic's retention R, h = (R - a) / r where r is how fast
//! the age grows (seconds per second: 1 for a stopped group, 0 for one keeping pace,
//! below 0 for one catching up), so r = (R - a) / h, and with retention R' the headroom
//! is (R' - a) / r: at once when a >= R'.

use serde::Serialize;

/// One (group, topic, partition) as the brokers export it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PartitionLag {
    pub group: String,
    pub topic: String,
    pub partition: i32,
    /// Age of the oldest unconsumed record, seconds.
    pub age_secs: f64,
    /// Until it falls out of retention at its trend; `None`: never.
    pub headroom_secs: Option<f64>,
    pub records: f64,
}

/// A group's outlook: its worst partition's.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GroupOutlook {
    pub group: String,
    /// The oldest unconsumed record's age, over its partitions.
    pub lag_secs: f64,
    pub lag_records: f64,
    /// Its position is already older than retention somewhere.
    pub already_losing: bool,
    /// The first partition to fall out of retention, and when; `None`: none does.
    pub loses_data_in_secs: Option<f64>,
    pub worst_topic: String,
    pub worst_partition: i32,
    /// The same with the retention scaled by `retention_factor`: `Some(0.0)` when
    /// some position is already older than that.
    pub retention_factor: f64,
    pub loses_data_in_secs_scaled: Option<f64>,
    /// A plain sentence.
    pub verdict: String,
}

/// Seconds for a sentence.
fn say(s: f64) -> String {
    crate::human_secs(s)
}

/// The outlook of each group in `lags`, with each topic's retention (`retention`
/// returns it in seconds; `None` for a topic kept forever) scaled by `factor` for the
/// what-if.
pub fn outlook(
    lags: &[PartitionLag],
    retention: impl Fn(&str) -> Option<f64>,
    factor: f64,
) -> Vec<GroupOutlook> {
    let mut groups: Vec<&str> = lags.iter().map(|l| l.group.as_str()).collect();
    groups.sort_unstable();
    groups.dedup();
    let mut out = Vec::new();
    for g in groups {
        let mine: Vec<&PartitionLag> = lags.iter().filter(|l| l.group == g).collect();
        let lag_secs = mine.iter().map(|l| l.age_secs).fold(0.0, f64::max);
        let lag_records = mine.iter().map(|l| l.records).sum();
        let mut already = false;
        let mut worst: Option<(f64, &PartitionLag)> = None;
        let mut worst_scaled: Option<f64> = None;
        for l in &mine {
            let Some(r) = retention(&l.topic) else {
                continue;
            };
            if l.age_secs >= r {
                already = true;
            }
            if let Some(h) = l.headroom_secs
                && worst.is_none_or(|(w, _)| h < w)
            {
                worst = Some((h, l));
            }
            let scaled_r = r * factor;
            let scaled = if l.age_secs >= scaled_r {
                Some(0.0)
            } else {
                match l.headroom_secs {
                    // The age grows at (r - a) / h seconds a second.
                    Some(h) if h > 0.0 && r > l.age_secs => {
                        let growth = (r - l.age_secs) / h;
                        Some((scaled_r - l.age_secs) / growth)
                    }
                    Some(_) => Some(0.0),
                    None => None,
                }
            };
            if let Some(s) = scaled {
                worst_scaled = Some(worst_scaled.map_or(s, |w: f64| w.min(s)));
            }
        }
        let loses = worst.map(|(h, _)| h);
        let now = match (already, loses) {
            (true, _) => "is already past retention: records it has not read are gone".to_string(),
            (false, Some(h)) => format!("loses data in {} at today's trend", say(h)),
            (false, None) => "keeps up: it never falls out of retention at today's trend".into(),
        };
        let what_if = match worst_scaled {
            Some(0.0) => format!(
                "with retention x{factor} it would lose data at once (it is {} behind)",
                say(lag_secs)
            ),
            Some(s) => format!("with retention x{factor} it would lose data in {}", say(s)),
            None => format!("with retention x{factor} it still keeps up"),
        };
        out.push(GroupOutlook {
            group: g.to_string(),
            lag_secs,
            lag_records,
            already_losing: already,
            loses_data_in_secs: loses,
            worst_topic: worst.map(|(_, l)| l.topic.clone()).unwrap_or_default(),
            worst_partition: worst.map_or(-1, |(_, l)| l.partition),
            retention_factor: factor,
            loses_data_in_secs_scaled: worst_scaled,
            verdict: format!("group {g} is {} behind and {now}; {what_if}", say(lag_secs)),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn lag(group: &str, age: f64, headroom: Option<f64>) -> PartitionLag {
        PartitionLag {
            group: group.into(),
            topic: "t".into(),
            partition: 0,
            age_secs: age,
            headroom_secs: headroom,
            records: 10.0,
        }
    }

    /// A stopped group (age grows 1 s a second) 1 h behind on a 4 h retention loses data
    /// in 3 h; with 2 h retention in 1 h; with 1 h (x0.25) at once.
    #[test]
    fn a_stopped_group_loses_data_when_its_age_reaches_retention() {
        let lags = [lag("g", 3600.0, Some(3.0 * 3600.0))];
        let o = outlook(&lags, |_| Some(4.0 * 3600.0), 0.5);
        assert_eq!(o[0].loses_data_in_secs, Some(3.0 * 3600.0));
        assert!((o[0].loses_data_in_secs_scaled.unwrap() - 3600.0).abs() < 1e-6);
        assert!(
            o[0].verdict.contains("loses data in 3.0 h"),
            "{}",
            o[0].verdict
        );
        let o = outlook(&lags, |_| Some(4.0 * 3600.0), 0.25);
        assert_eq!(o[0].loses_data_in_secs_scaled, Some(0.0));
        assert!(o[0].verdict.contains("at once"), "{}", o[0].verdict);
    }

    /// A group that keeps up never loses data, unless the shorter retention is already
    /// behind it.
    #[test]
    fn a_group_keeping_up_is_safe_until_retention_passes_it() {
        let lags = [lag("g", 600.0, None)];
        let o = outlook(&lags, |_| Some(3600.0), 0.5);
        assert_eq!(o[0].loses_data_in_secs, None);
        assert_eq!(o[0].loses_data_in_secs_scaled, None);
        assert!(o[0].verdict.contains("keeps up"), "{}", o[0].verdict);
        let o = outlook(&lags, |_| Some(3600.0), 0.1);
        assert_eq!(o[0].loses_data_in_secs_scaled, Some(0.0));
    }

    #[test]
    fn the_worst_partition_decides_and_groups_are_apart() {
        let mut a = lag("a", 100.0, Some(5000.0));
        let mut b = lag("a", 200.0, Some(800.0));
        b.partition = 3;
        a.records = 1.0;
        let c = lag("b", 0.0, None);
        let o = outlook(&[a, b, c], |_| Some(1000.0), 0.5);
        assert_eq!(o.len(), 2);
        assert_eq!(
            (o[0].loses_data_in_secs, o[0].worst_partition),
            (Some(800.0), 3)
        );
        assert_eq!(o[0].lag_secs, 200.0);
        assert_eq!(o[1].group, "b");
        // A topic kept forever never loses data.
        let o = outlook(&[lag("c", 1e6, Some(1.0))], |_| None, 0.5);
        assert_eq!(o[0].loses_data_in_secs, None);
    }
}
