//! Produce and fetch traffic over the partitions hosted here: the sampling tick and
//! the hottest partitions and keys (`strata topic hot`).

use super::ReplicaManager;
use crate::traffic::HotPartition;

impl ReplicaManager {
    /// Takes every partition's rates (every [`SAMPLE_INTERVAL`], from housekeeping).
    pub(crate) fn sample_traffic(&self) {
        let now = self.clock.now_ms();
        for t in self.topics() {
            for p in &t.partitions {
                p.traffic().sample(now);
            }
        }
    }

    /// The `top` partitions led here with the highest produce rate (then fetch rate)
    /// over the last sampling interval, each with its `keys` hottest keys; only `topic`'s
    /// when given.
    pub fn hot_partitions(
        &self,
        top: usize,
        keys: usize,
        topic: Option<&str>,
    ) -> Vec<HotPartition> {
        let mut out = Vec::new();
        for t in self.topics() {
            if topic.is_some_and(|name| name != &*t.name) {
                continue;
            }
            for p in t.partitions.iter().filter(|p| p.is_leader()) {
                let traffic = p.traffic();
                let totals = traffic.totals();
                out.push(HotPartition {
                    topic: t.name.to_string(),
                    partition: p.index,
                    rates: traffic.rates(),
                    produce_bytes_total: totals.produce_bytes,
                    produce_records_total: totals.produce_records,
                    fetch_bytes_total: totals.fetch_bytes,
                    hot_keys: traffic.hot_keys(keys),
                });
            }
        }
        out.sort_by(|a, b| {
            let key =
                |h: &HotPartition| (h.rates.produce_bytes_per_sec, h.rates.fetch_bytes_per_sec);
            key(b)
                .partial_cmp(&key(a))
                .unwrap_or(std::cmp::Ordering::Equal)
                .then_with(|| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)))
        });
        out.truncate(top);
        out
    }
}
