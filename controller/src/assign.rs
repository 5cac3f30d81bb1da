//! Replica assignment for new topics and partitions (rack-unaware).
//!
//! Kafka's round-robin (AdminUtils.assignReplicasToBrokersRackUnaware): partition `p`'s
//! first replica is broker `(start + p) % n`; the followers come after it with a shift
//! that grows every `n` partitions, so replica sets differ and followers spread. Kafka
//! picks `start` at random; here it is the unfenced broker that is the preferred leader
//! of the fewest partitions so far (lowest id on ties), so leaders balance across topics
//! and the result is deterministic.

use std::collections::BTreeMap;

use crate::error::Rejection;
use crate::state::ClusterMetadata;
use crate::types::BrokerId;

/// The most partitions one assignment makes.
pub const MAX_NEW_PARTITIONS: i32 = 1_000_000;

/// Replica lists for `count` new partitions with `replication_factor` replicas each,
/// over the unfenced brokers of `meta`. `first_partition` is the index of the first new
/// partition (the current partition count when a topic grows).
pub fn assign_replicas(
    meta: &ClusterMetadata,
    count: i32,
    replication_factor: i32,
    first_partition: i32,
) -> Result<Vec<Vec<BrokerId>>, Rejection> {
    if count < 1 {
        return Err(Rejection::InvalidPartitions {
            count,
            reason: "must be at least 1".into(),
        });
    }
    // Brokers refuse more than their --max-partitions-per-request long before this; the
    // controller's own bound is for a request that reaches its RPC directly, so no count
    // makes it build a list it cannot hold.
    if count > MAX_NEW_PARTITIONS {
        return Err(Rejection::InvalidPartitions {
            count,
            reason: format!("at most {MAX_NEW_PARTITIONS} partitions can be added at once"),
        });
    }
    let brokers = meta.live_brokers();
    let n = brokers.len();
    let rf = usize::try_from(replication_factor).unwrap_or(0);
    if rf == 0 || rf > n {
        return Err(Rejection::InvalidReplicationFactor {
            factor: replication_factor,
            available: n,
        });
    }
    let mut led: BTreeMap<BrokerId, usize> = brokers.iter().map(|b| (*b, 0)).collect();
    for (_, p) in meta.partitions() {
        if let Some(c) = led.get_mut(&p.preferred_leader()) {
            *c += 1;
        }
    }
    let start = brokers
        .iter()
        .enumerate()
        .min_by_key(|(i, b)| (led[b], *i))
        .map(|(i, _)| i)
        .unwrap_or(0);
    let first = usize::try_from(first_partition).unwrap_or(0);
    let mut shift = start;
    let mut out = Vec::with_capacity(usize::try_from(count).unwrap_or(0));
    for k in 0..usize::try_from(count).unwrap_or(0) {
        let p = first + k;
        if p > 0 && p % n == 0 {
            shift += 1;
        }
        let lead = (k + start) % n;
        let mut replicas = vec![brokers[lead]];
        for j in 0..rf - 1 {
            // Kafka's replicaIndex: never the leader's own slot, since (shift + j) % (n-1)
            // is below n - 1.
            let idx = (lead + 1 + (shift + j) % (n - 1)) % n;
            replicas.push(brokers[idx]);
        }
        out.push(replicas);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{Command, CommandOutput, NewTopic};
    use strata_proto::TopicId;

    fn cluster(brokers: &[BrokerId]) -> ClusterMetadata {
        let mut m = ClusterMetadata::default();
        for (i, b) in brokers.iter().enumerate() {
            m.apply(
                &Command::RegisterBroker {
                    broker: *b,
                    host: "h".into(),
                    port: 1,
                    rack: None,
                    listeners: vec![],
                },
                i as u64 + 1,
            )
            .unwrap();
        }
        m
    }

    fn create(m: &mut ClusterMetadata, name: &str, count: i32, rf: i32) -> Vec<Vec<BrokerId>> {
        let assignment = assign_replicas(m, count, rf, 0).unwrap();
        let out = m
            .apply(
                &Command::CreateTopic(NewTopic {
                    id: TopicId::random(),
                    name: name.into(),
                    configs: Default::default(),
                    assignment: assignment.clone(),
                    storage_cluster_id: None,
                    initial_leader_epoch: 0,
                }),
                100,
            )
            .unwrap();
        assert!(matches!(out, CommandOutput::Topic(_)));
        assignment
    }

    #[test]
    fn replicas_spread_and_leaders_balance() {
        for n in 1..=5usize {
            for rf in 1..=n {
                let brokers: Vec<BrokerId> = (1..=n as BrokerId).collect();
                let mut m = cluster(&brokers);
                let a = create(&mut m, "t", (n * 4) as i32, rf as i32);
                let mut leaders = BTreeMap::<BrokerId, usize>::new();
                let mut replicas = BTreeMap::<BrokerId, usize>::new();
                for r in &a {
                    assert_eq!(r.len(), rf);
                    let mut s = r.clone();
                    s.sort();
                    s.dedup();
                    assert_eq!(s.len(), rf, "distinct replicas in {r:?}");
                    *leaders.entry(r[0]).or_default() += 1;
                    for b in r {
                        *replicas.entry(*b).or_default() += 1;
                    }
                }
                for b in &brokers {
                    assert_eq!(leaders[b], 4, "n={n} rf={rf} {a:?}");
                    assert_eq!(replicas[b], 4 * rf, "n={n} rf={rf} {a:?}");
                }
            }
        }
    }

    #[test]
    fn single_partition_topics_rotate_their_leaders() {
        let mut m = cluster(&[1, 2, 3]);
        let leaders: Vec<BrokerId> = (0..6)
            .map(|i| create(&mut m, &format!("t{i}"), 1, 3)[0][0])
            .collect();
        assert_eq!(leaders, vec![1, 2, 3, 1, 2, 3]);
    }

    #[test]
    fn replication_factor_above_live_brokers_is_refused() {
        let mut m = cluster(&[1, 2, 3]);
        let epoch = m.broker(3).unwrap().epoch;
        m.apply(&Command::FenceBroker { broker: 3, epoch }, 9)
            .unwrap();
        assert_eq!(
            assign_replicas(&m, 1, 3, 0),
            Err(Rejection::InvalidReplicationFactor {
                factor: 3,
                available: 2
            })
        );
        assert!(matches!(
            assign_replicas(&m, 1, 0, 0),
            Err(Rejection::InvalidReplicationFactor { .. })
        ));
        assert!(matches!(
            assign_replicas(&m, 0, 1, 0),
            Err(Rejection::InvalidPartitions { .. })
        ));
        // Fenced brokers get no new replicas.
        let a = assign_replicas(&m, 6, 2, 0).unwrap();
        assert!(a.iter().flatten().all(|b| *b != 3));
    }
}
