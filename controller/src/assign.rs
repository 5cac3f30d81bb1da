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

/// One partition's replicas in a reassignment plan (the shape of Kafka's
/// `kafka-reassign-partitions.sh` JSON: `{"topic", "partition", "replicas"}`).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PlannedPartition {
    pub topic: String,
    pub partition: i32,
    pub replicas: Vec<BrokerId>,
}

/// A reassignment that spreads `partitions`' replicas evenly over `brokers`, moving as
/// few as it can: a replica on a broker not in `brokers` moves (a decommission), then
/// replicas move from the broker holding the most to the one holding the fewest until
/// they differ by at most one, and preferred leaders (first replicas) are evened out
/// the same way by swapping leadership within each partition's replicas. A moved
/// replica keeps its place in the list, so a partition's preferred leader moves only
/// when its own broker does. Returns only the partitions that change, in the order
/// given; deterministic (ties go to the lowest broker id).
pub fn balance(
    partitions: &[PlannedPartition],
    brokers: &[BrokerId],
) -> Result<Vec<PlannedPartition>, Rejection> {
    plan_moves(partitions, brokers, true)
}

/// The fewest moves that leave no replica outside `brokers` (a decommission): each
/// replica on another broker goes to the least-loaded of `brokers` that the partition
/// does not have yet, in its place in the list. Nothing else moves.
pub fn drain(
    partitions: &[PlannedPartition],
    brokers: &[BrokerId],
) -> Result<Vec<PlannedPartition>, Rejection> {
    plan_moves(partitions, brokers, false)
}

fn plan_moves(
    partitions: &[PlannedPartition],
    brokers: &[BrokerId],
    even_out: bool,
) -> Result<Vec<PlannedPartition>, Rejection> {
    let mut brokers: Vec<BrokerId> = brokers.to_vec();
    brokers.sort_unstable();
    brokers.dedup();
    let mut plan: Vec<PlannedPartition> = partitions.to_vec();
    for p in &plan {
        if p.replicas.len() > brokers.len() {
            return Err(Rejection::InvalidReplicationFactor {
                factor: i32::try_from(p.replicas.len()).unwrap_or(i32::MAX),
                available: brokers.len(),
            });
        }
    }
    let mut load: BTreeMap<BrokerId, usize> = brokers.iter().map(|b| (*b, 0)).collect();
    for p in &plan {
        for r in &p.replicas {
            if let Some(c) = load.get_mut(r) {
                *c += 1;
            }
        }
    }
    // The least-loaded broker of `brokers` not already in `replicas`.
    let least = |load: &BTreeMap<BrokerId, usize>, replicas: &[BrokerId]| {
        load.iter()
            .filter(|(b, _)| !replicas.contains(b))
            .min_by_key(|(b, c)| (**c, **b))
            .map(|(b, _)| *b)
    };
    // 1. Replicas on brokers that are not to hold any.
    for p in &mut plan {
        for i in 0..p.replicas.len() {
            if !load.contains_key(&p.replicas[i]) {
                let to = least(&load, &p.replicas).expect("replicas fit the brokers: checked");
                p.replicas[i] = to;
                *load.get_mut(&to).expect("a broker of the list") += 1;
            }
        }
    }
    if !even_out {
        return Ok(changed(plan, partitions));
    }
    // 2. From the most to the least loaded, one replica at a time.
    loop {
        let (&max_b, &max_c) = load
            .iter()
            .max_by_key(|(b, c)| (**c, std::cmp::Reverse(**b)))
            .expect("at least one broker");
        let (&min_b, &min_c) = load
            .iter()
            .min_by_key(|(b, c)| (**c, **b))
            .expect("at least one broker");
        if max_c <= min_c + 1 {
            break;
        }
        // A partition on max_b but not on min_b; a follower first, so leadership stays.
        let pick = plan
            .iter()
            .enumerate()
            .filter(|(_, p)| p.replicas.contains(&max_b) && !p.replicas.contains(&min_b))
            .min_by_key(|(i, p)| (p.replicas[0] == max_b, *i))
            .map(|(i, _)| i);
        let Some(i) = pick else { break };
        let r = &mut plan[i].replicas;
        let at = r.iter().position(|b| *b == max_b).expect("filtered on it");
        r[at] = min_b;
        *load.get_mut(&max_b).expect("listed") -= 1;
        *load.get_mut(&min_b).expect("listed") += 1;
    }
    // 3. Preferred leaders: swap a partition's first replica with another of its own.
    let mut leads: BTreeMap<BrokerId, usize> = brokers.iter().map(|b| (*b, 0)).collect();
    for p in &plan {
        if let Some(c) = p.replicas.first().and_then(|b| leads.get_mut(b)) {
            *c += 1;
        }
    }
    loop {
        let (&max_b, &max_c) = leads
            .iter()
            .max_by_key(|(b, c)| (**c, std::cmp::Reverse(**b)))
            .expect("at least one broker");
        // The partition led by max_b whose other replica leads the fewest.
        let best = plan
            .iter()
            .enumerate()
            .filter(|(_, p)| p.replicas.first() == Some(&max_b))
            .flat_map(|(i, p)| p.replicas.iter().skip(1).map(move |b| (i, *b)))
            .min_by_key(|(i, b)| (leads[b], *b, *i));
        let Some((i, to)) = best else { break };
        if leads[&to] + 1 >= max_c {
            break;
        }
        let r = &mut plan[i].replicas;
        let at = r.iter().position(|b| *b == to).expect("found in it");
        r.swap(0, at);
        *leads.get_mut(&max_b).expect("listed") -= 1;
        *leads.get_mut(&to).expect("listed") += 1;
    }
    Ok(changed(plan, partitions))
}

/// The entries of `plan` whose replicas differ from `before`'s (same order).
fn changed(plan: Vec<PlannedPartition>, before: &[PlannedPartition]) -> Vec<PlannedPartition> {
    plan.into_iter()
        .zip(before)
        .filter(|(new, old)| new.replicas != old.replicas)
        .map(|(new, _)| new)
        .collect()
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

    fn planned(lists: &[&[BrokerId]]) -> Vec<PlannedPartition> {
        lists
            .iter()
            .enumerate()
            .map(|(i, r)| PlannedPartition {
                topic: "t".into(),
                partition: i as i32,
                replicas: r.to_vec(),
            })
            .collect()
    }

    /// Replicas and preferred leaders per broker after applying `plan` to `before`.
    fn counts(
        before: &[PlannedPartition],
        plan: &[PlannedPartition],
    ) -> (BTreeMap<BrokerId, usize>, BTreeMap<BrokerId, usize>) {
        let mut replicas = BTreeMap::new();
        let mut leaders = BTreeMap::new();
        for p in before {
            let r = plan
                .iter()
                .find(|q| q.partition == p.partition)
                .map_or(&p.replicas, |q| &q.replicas);
            let mut s = r.clone();
            s.sort();
            s.dedup();
            assert_eq!(s.len(), r.len(), "distinct replicas in {r:?}");
            *leaders.entry(r[0]).or_default() += 1;
            for b in r {
                *replicas.entry(*b).or_default() += 1;
            }
        }
        (replicas, leaders)
    }

    #[test]
    fn balancing_in_a_new_broker_moves_a_quarter_of_the_replicas() {
        // 8 partitions, RF 3, on brokers 1-3: 24 replicas, 8 per broker.
        let before = planned(&[
            &[1, 2, 3],
            &[2, 3, 1],
            &[3, 1, 2],
            &[1, 3, 2],
            &[2, 1, 3],
            &[3, 2, 1],
            &[1, 2, 3],
            &[2, 3, 1],
        ]);
        let plan = balance(&before, &[1, 2, 3, 4]).unwrap();
        let (replicas, leaders) = counts(&before, &plan);
        assert_eq!(replicas.values().copied().collect::<Vec<_>>(), [6, 6, 6, 6]);
        assert_eq!(leaders.values().copied().collect::<Vec<_>>(), [2, 2, 2, 2]);
        // Exactly the 6 replicas broker 4 gets moved.
        let moved: usize = plan
            .iter()
            .map(|p| {
                let old = &before[p.partition as usize].replicas;
                p.replicas.iter().filter(|b| !old.contains(b)).count()
            })
            .sum();
        assert_eq!(moved, 6);
        // Balanced already: nothing to do.
        assert!(balance(&before, &[1, 2, 3]).unwrap().is_empty());
    }

    #[test]
    fn decommissioning_moves_every_replica_off_the_broker() {
        let before = planned(&[&[1, 2], &[2, 3], &[3, 4], &[4, 1], &[1, 3], &[2, 4]]);
        let plan = balance(&before, &[1, 2, 3]).unwrap();
        let (replicas, leaders) = counts(&before, &plan);
        assert!(
            !replicas.contains_key(&4) && !leaders.contains_key(&4),
            "{plan:?}"
        );
        assert_eq!(replicas.values().copied().collect::<Vec<_>>(), [4, 4, 4]);
        // Draining moves only what is on broker 4: 3 replicas.
        let plan = drain(&before, &[1, 2, 3]).unwrap();
        assert_eq!(plan.len(), 3, "{plan:?}");
        let (replicas, _) = counts(&before, &plan);
        assert!(!replicas.contains_key(&4));
        // Too few brokers for the replication factor.
        assert!(matches!(
            balance(&planned(&[&[1, 2, 3]]), &[1, 2]),
            Err(Rejection::InvalidReplicationFactor { .. })
        ));
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
