//! Tests of the state machine: broker fencing and registration, elections, AlterPartition,
//! reassignments, topic creation, producer ids.

use std::collections::BTreeMap;

use strata_proto::TopicId;

use super::*;
use crate::error::Rejection;
use crate::types::BrokerId;

fn register(m: &mut ClusterMetadata, id: BrokerId, index: u64) -> i64 {
    match m
        .apply(
            &Command::RegisterBroker {
                broker: id,
                host: "127.0.0.1".into(),
                port: 9092,
                rack: None,
                listeners: vec![],
            },
            index,
        )
        .unwrap()
    {
        CommandOutput::Broker(b) => b.epoch,
        o => panic!("{o:?}"),
    }
}

fn topic(
    m: &mut ClusterMetadata,
    name: &str,
    assignment: Vec<Vec<BrokerId>>,
    configs: &[(&str, &str)],
) -> TopicRecord {
    let cmd = Command::CreateTopic(NewTopic {
        id: TopicId::random(),
        name: name.into(),
        configs: configs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        assignment,
        storage_cluster_id: None,
        initial_leader_epoch: 0,
    });
    match m.apply(&cmd, 0).unwrap() {
        CommandOutput::Topic(t) => t,
        o => panic!("{o:?}"),
    }
}

fn three_brokers() -> (ClusterMetadata, [i64; 3]) {
    let mut m = ClusterMetadata::default();
    let e = [
        register(&mut m, 1, 1),
        register(&mut m, 2, 2),
        register(&mut m, 3, 3),
    ];
    (m, e)
}

#[test]
fn fencing_the_leader_elects_from_the_isr_and_shrinks_it() {
    let (mut m, e) = three_brokers();
    topic(&mut m, "t", vec![vec![1, 2, 3]], &[]);
    let v = m.version;
    m.apply(
        &Command::FenceBroker {
            broker: 1,
            epoch: e[0],
        },
        10,
    )
    .unwrap();
    assert_eq!(m.version, v + 1);
    let p = m.partition("t", 0).unwrap();
    assert_eq!((p.leader, p.isr.clone()), (2, vec![2, 3]));
    assert_eq!((p.leader_epoch, p.partition_epoch), (1, 1));
    // Fencing a follower shrinks the ISR without a leader change.
    m.apply(
        &Command::FenceBroker {
            broker: 3,
            epoch: e[2],
        },
        11,
    )
    .unwrap();
    let p = m.partition("t", 0).unwrap();
    assert_eq!((p.leader, p.isr.clone()), (2, vec![2]));
    assert_eq!((p.leader_epoch, p.partition_epoch), (1, 2));
    // The last ISR member stays in the ISR; the partition goes offline.
    m.apply(
        &Command::FenceBroker {
            broker: 2,
            epoch: e[1],
        },
        12,
    )
    .unwrap();
    let p = m.partition("t", 0).unwrap();
    assert_eq!((p.leader, p.isr.clone()), (NO_LEADER, vec![2]));
    assert_eq!(p.leader_epoch, 2);
    // An out-of-sync replica coming back does not make it a leader (clean only)...
    m.apply(
        &Command::UnfenceBroker {
            broker: 1,
            epoch: e[0],
        },
        13,
    )
    .unwrap();
    assert!(m.partition("t", 0).unwrap().is_offline());
    // ...the last ISR member does.
    m.apply(
        &Command::UnfenceBroker {
            broker: 2,
            epoch: e[1],
        },
        14,
    )
    .unwrap();
    let p = m.partition("t", 0).unwrap();
    assert_eq!((p.leader, p.isr.clone(), p.leader_epoch), (2, vec![2], 3));
}

#[test]
fn unclean_election_only_when_the_topic_enables_it() {
    let (mut m, e) = three_brokers();
    topic(&mut m, "clean", vec![vec![1, 2]], &[]);
    topic(
        &mut m,
        "dirty",
        vec![vec![1, 2]],
        &[("unclean.leader.election.enable", "true")],
    );
    for t in ["clean", "dirty"] {
        let p = m.partition(t, 0).unwrap().clone();
        let id = m.topic(t).unwrap().id;
        // The leader drops 2 from the ISR (it lags).
        m.apply(
            &Command::AlterPartition(AlterPartitionRequest {
                broker: 1,
                broker_epoch: e[0],
                topic_id: id,
                partition: 0,
                leader_epoch: p.leader_epoch,
                partition_epoch: p.partition_epoch,
                new_isr: vec![1],
            }),
            20,
        )
        .unwrap();
    }
    m.apply(
        &Command::FenceBroker {
            broker: 1,
            epoch: e[0],
        },
        21,
    )
    .unwrap();
    assert!(m.partition("clean", 0).unwrap().is_offline());
    let dirty = m.partition("dirty", 0).unwrap();
    assert_eq!((dirty.leader, dirty.isr.clone()), (2, vec![2]));
    // Enabling it later elects at once.
    m.apply(
        &Command::SetTopicConfigs {
            name: "clean".into(),
            configs: BTreeMap::from([("unclean.leader.election.enable".into(), "true".into())]),
        },
        22,
    )
    .unwrap();
    assert_eq!(m.partition("clean", 0).unwrap().leader, 2);
}

fn reassign(
    m: &mut ClusterMetadata,
    partition: i32,
    target: Option<Vec<BrokerId>>,
) -> Result<PartitionRecord, Rejection> {
    let cmd = Command::AlterReassignments {
        reassignments: vec![Reassignment {
            topic: "t".into(),
            partition,
            target,
        }],
    };
    match m.apply(&cmd, 50).unwrap() {
        CommandOutput::Reassignments(mut o) => o.remove(0).result,
        o => panic!("{o:?}"),
    }
}

/// The leader of t-0 asks for `isr` (with the epochs it last saw).
fn grow_isr(m: &mut ClusterMetadata, epochs: &[i64], isr: Vec<BrokerId>) -> PartitionRecord {
    let p = m.partition("t", 0).unwrap().clone();
    let cmd = Command::AlterPartition(AlterPartitionRequest {
        broker: p.leader,
        broker_epoch: epochs[(p.leader - 1) as usize],
        topic_id: m.topic("t").unwrap().id,
        partition: 0,
        leader_epoch: p.leader_epoch,
        partition_epoch: p.partition_epoch,
        new_isr: isr,
    });
    match m.apply(&cmd, 60).unwrap() {
        CommandOutput::Partition(p) => p,
        o => panic!("{o:?}"),
    }
}

#[test]
fn a_reassignment_adds_then_completes_when_the_target_is_in_sync() {
    let (mut m, e) = three_brokers();
    let e4 = register(&mut m, 4, 4);
    let epochs = [e[0], e[1], e[2], e4];
    topic(&mut m, "t", vec![vec![1, 2, 3]], &[]);
    // Move 1's replica to 4: 4 joins, 1 is removing, 1 still leads.
    let p = reassign(&mut m, 0, Some(vec![4, 2, 3])).unwrap();
    assert_eq!(p.replicas, [4, 2, 3, 1]);
    assert_eq!(
        (p.adding_replicas.clone(), p.removing_replicas.clone()),
        (vec![4], vec![1])
    );
    assert_eq!(
        (p.leader, p.isr.clone(), p.partition_epoch),
        (1, vec![1, 2, 3], 1)
    );
    assert!(p.is_reassigning());
    // 4 catches up: the leader adds it, and the reassignment completes. 1 leaves and
    // gives up leadership to the first target replica in sync.
    let p = grow_isr(&mut m, &epochs, vec![1, 2, 3, 4]);
    assert_eq!(p.replicas, [4, 2, 3]);
    assert!(!p.is_reassigning());
    assert_eq!((p.leader, p.leader_epoch), (4, 1));
    let mut isr = p.isr.clone();
    isr.sort();
    assert_eq!(isr, [2, 3, 4]);
    // Cancelling now: nothing to cancel.
    assert!(matches!(
        reassign(&mut m, 0, None),
        Err(Rejection::NoReassignmentInProgress { .. })
    ));
}

#[test]
fn a_reassignment_within_the_isr_completes_at_once_and_one_can_be_cancelled() {
    let (mut m, e) = three_brokers();
    let e4 = register(&mut m, 4, 4);
    topic(&mut m, "t", vec![vec![1, 2, 3]], &[]);
    // Dropping a replica (all the target in sync): done at once, leader kept.
    let p = reassign(&mut m, 0, Some(vec![2, 1])).unwrap();
    assert_eq!(
        (p.replicas.clone(), p.leader, p.leader_epoch),
        (vec![2, 1], 1, 0)
    );
    assert!(!p.is_reassigning());
    // Moving to 4 and 3 (not a replica now) then cancelling: back to [2, 1], the ISR
    // without the adding replicas, the leader kept.
    let p = reassign(&mut m, 0, Some(vec![4, 3])).unwrap();
    assert_eq!(p.replicas, [4, 3, 2, 1]);
    assert_eq!(p.adding_replicas, [4, 3]);
    let p = reassign(&mut m, 0, None).unwrap();
    assert_eq!((p.replicas.clone(), p.leader), (vec![2, 1], 1));
    assert!(!p.is_reassigning());
    // A target naming an unknown broker, or one twice, is refused and changes nothing.
    let before = m.partition("t", 0).unwrap().clone();
    for bad in [vec![1, 9], vec![2, 2], vec![]] {
        assert!(matches!(
            reassign(&mut m, 0, Some(bad)),
            Err(Rejection::InvalidReplicaAssignment { .. })
        ));
    }
    assert!(matches!(
        reassign(&mut m, 7, Some(vec![1])),
        Err(Rejection::UnknownPartition { .. })
    ));
    assert_eq!(m.partition("t", 0).unwrap(), &before);
    let _ = (e, e4);
}

#[test]
fn a_new_target_replaces_a_reassignment_under_way() {
    let (mut m, e) = three_brokers();
    let e4 = register(&mut m, 4, 4);
    let e5 = register(&mut m, 5, 5);
    let epochs = [e[0], e[1], e[2], e4, e5];
    topic(&mut m, "t", vec![vec![1, 2]], &[]);
    reassign(&mut m, 0, Some(vec![1, 4])).unwrap();
    // Before 4 catches up, the operator asks for [1, 5]: 4 goes, 5 comes.
    let p = reassign(&mut m, 0, Some(vec![1, 5])).unwrap();
    assert_eq!(p.replicas, [1, 5, 4, 2]);
    assert_eq!(
        (p.adding_replicas.clone(), p.removing_replicas.clone()),
        (vec![5], vec![4, 2])
    );
    let p = grow_isr(&mut m, &epochs, vec![1, 2, 5]);
    assert_eq!(
        (p.replicas.clone(), p.isr.clone(), p.leader),
        (vec![1, 5], vec![1, 5], 1)
    );
}

#[test]
fn only_a_fenced_broker_without_replicas_is_unregistered() {
    let (mut m, e) = three_brokers();
    let e4 = register(&mut m, 4, 4);
    topic(&mut m, "t", vec![vec![1, 2, 4]], &[]);
    let unregister =
        |m: &mut ClusterMetadata| m.apply(&Command::UnregisterBroker { broker: 4 }, 70);
    // Running: refused.
    assert!(matches!(
        unregister(&mut m),
        Err(Rejection::InvalidRequest { .. })
    ));
    m.apply(
        &Command::FenceBroker {
            broker: 4,
            epoch: e4,
        },
        71,
    )
    .unwrap();
    // Fenced but holding a replica of t-0: refused.
    assert!(matches!(
        unregister(&mut m),
        Err(Rejection::InvalidRequest { .. })
    ));
    reassign(&mut m, 0, Some(vec![1, 2, 3])).unwrap();
    let p = m.partition("t", 0).unwrap();
    assert!(!p.replicas.contains(&4) || p.removing_replicas.contains(&4));
    // 3 catches up: the move completes and 4 holds nothing.
    grow_isr(&mut m, &[e[0], e[1], e[2], e4], vec![1, 2, 3]);
    unregister(&mut m).unwrap();
    assert!(m.broker(4).is_none());
    assert!(matches!(
        unregister(&mut m),
        Err(Rejection::UnknownBroker { .. })
    ));
}

#[test]
fn alter_partition_checks_epochs_leader_and_isr() {
    let (mut m, e) = three_brokers();
    let t = topic(&mut m, "t", vec![vec![1, 2, 3]], &[]);
    let req = |isr: Vec<BrokerId>, le: i32, pe: i32| {
        Command::AlterPartition(AlterPartitionRequest {
            broker: 1,
            broker_epoch: e[0],
            topic_id: t.id,
            partition: 0,
            leader_epoch: le,
            partition_epoch: pe,
            new_isr: isr,
        })
    };
    let out = m.apply(&req(vec![1, 2], 0, 0), 30).unwrap();
    let CommandOutput::Partition(p) = out else {
        panic!()
    };
    assert_eq!((p.isr.clone(), p.partition_epoch), (vec![1, 2], 1));
    // The same change again with the old epoch: already applied, answered as done.
    assert_eq!(
        m.apply(&req(vec![2, 1], 0, 0), 31).unwrap(),
        CommandOutput::Partition(p.clone())
    );
    // A different change with a stale partition epoch is refused.
    assert!(matches!(
        m.apply(&req(vec![1, 2, 3], 0, 0), 32),
        Err(Rejection::InvalidUpdateVersion {
            current: 1,
            requested: 0,
            ..
        })
    ));
    assert!(matches!(
        m.apply(&req(vec![1, 2, 3], 1, 1), 33),
        Err(Rejection::FencedLeaderEpoch {
            current: 0,
            requested: 1,
            ..
        })
    ));
    assert!(matches!(
        m.apply(&req(vec![2, 3], 0, 1), 34),
        Err(Rejection::InvalidRequest { .. })
    ));
    assert!(matches!(
        m.apply(&req(vec![1, 4], 0, 1), 35),
        Err(Rejection::IneligibleReplica { replica: 4, .. })
    ));
    m.apply(
        &Command::FenceBroker {
            broker: 3,
            epoch: e[2],
        },
        36,
    )
    .unwrap();
    let pe = m.partition("t", 0).unwrap().partition_epoch;
    assert!(matches!(
        m.apply(&req(vec![1, 2, 3], 0, pe), 37),
        Err(Rejection::IneligibleReplica { replica: 3, .. })
    ));
    // From a broker that is not the leader, or with an old broker epoch.
    let mut not_leader = req(vec![1, 2], 0, pe);
    if let Command::AlterPartition(r) = &mut not_leader {
        r.broker = 2;
        r.broker_epoch = e[1];
    }
    assert!(matches!(
        m.apply(&not_leader, 38),
        Err(Rejection::NotLeader { leader: 1, .. })
    ));
    let mut stale = req(vec![1, 2], 0, pe);
    if let Command::AlterPartition(r) = &mut stale {
        r.broker_epoch = 0;
    }
    assert!(matches!(
        m.apply(&stale, 39),
        Err(Rejection::StaleBrokerEpoch { .. })
    ));
    // Refusals change nothing.
    let v = m.version;
    let _ = m.apply(&stale, 40);
    assert_eq!(m.version, v);
}

#[test]
fn reregistration_leaves_isrs_and_reelects() {
    let (mut m, _) = three_brokers();
    topic(&mut m, "t", vec![vec![1, 2, 3]], &[]);
    topic(&mut m, "solo", vec![vec![1]], &[]);
    let epoch = register(&mut m, 1, 50);
    assert_eq!(epoch, 50);
    let p = m.partition("t", 0).unwrap();
    assert_eq!(
        (p.leader, p.isr.clone(), p.leader_epoch),
        (2, vec![2, 3], 1)
    );
    // A single-replica partition keeps its only replica, under a new leader epoch.
    let p = m.partition("solo", 0).unwrap();
    assert_eq!((p.leader, p.isr.clone(), p.leader_epoch), (1, vec![1], 1));
}

#[test]
fn preferred_election_moves_leadership_back() {
    let (mut m, e) = three_brokers();
    topic(&mut m, "t", vec![vec![1, 2, 3]], &[]);
    m.apply(
        &Command::FenceBroker {
            broker: 1,
            epoch: e[0],
        },
        5,
    )
    .unwrap();
    m.apply(
        &Command::UnfenceBroker {
            broker: 1,
            epoch: e[0],
        },
        6,
    )
    .unwrap();
    let which = vec![("t".to_string(), 0)];
    let elect = Command::ElectLeaders {
        election: ElectionType::Preferred,
        partitions: which.clone(),
    };
    let CommandOutput::Elections(o) = m.apply(&elect, 7).unwrap() else {
        panic!()
    };
    assert_eq!(o[0].result, Err(ElectionError::PreferredLeaderNotAvailable));
    let p = m.partition("t", 0).unwrap().clone();
    let id = m.topic("t").unwrap().id;
    m.apply(
        &Command::AlterPartition(AlterPartitionRequest {
            broker: 2,
            broker_epoch: e[1],
            topic_id: id,
            partition: 0,
            leader_epoch: p.leader_epoch,
            partition_epoch: p.partition_epoch,
            new_isr: vec![2, 3, 1],
        }),
        8,
    )
    .unwrap();
    let CommandOutput::Elections(o) = m.apply(&elect, 9).unwrap() else {
        panic!()
    };
    let p = o[0].result.clone().unwrap();
    assert_eq!((p.leader, p.leader_epoch), (1, 2));
    let CommandOutput::Elections(o) = m.apply(&elect, 10).unwrap() else {
        panic!()
    };
    assert_eq!(o[0].result, Err(ElectionError::NotNeeded));
}

#[test]
fn topics_are_created_once() {
    let (mut m, _) = three_brokers();
    let t = NewTopic {
        id: TopicId::random(),
        name: "t".into(),
        configs: BTreeMap::new(),
        assignment: vec![vec![1, 2]],
        storage_cluster_id: None,
        initial_leader_epoch: 0,
    };
    let first = m.apply(&Command::CreateTopic(t.clone()), 1).unwrap();
    assert_eq!(m.apply(&Command::CreateTopic(t.clone()), 2).unwrap(), first);
    let other = NewTopic {
        id: TopicId::random(),
        ..t.clone()
    };
    assert!(matches!(
        m.apply(&Command::CreateTopic(other), 3),
        Err(Rejection::TopicAlreadyExists { .. })
    ));
    let same_id = NewTopic {
        name: "u".into(),
        ..t.clone()
    };
    assert!(matches!(
        m.apply(&Command::CreateTopic(same_id), 4),
        Err(Rejection::TopicIdInUse { .. })
    ));
    for (bad, want) in [
        (vec![vec![1, 1]], "twice"),
        (vec![vec![9]], "unregistered"),
        (vec![vec![1], vec![1, 2]], "replicas"),
        (vec![], "no partitions"),
    ] {
        let cmd = Command::CreateTopic(NewTopic {
            id: TopicId::random(),
            name: "v".into(),
            configs: BTreeMap::new(),
            assignment: bad,
            storage_cluster_id: None,
            initial_leader_epoch: 0,
        });
        match m.apply(&cmd, 5) {
            Err(Rejection::InvalidReplicaAssignment { reason }) => {
                assert!(reason.contains(want), "{reason}")
            }
            o => panic!("{o:?}"),
        }
    }
    let bad_config = Command::CreateTopic(NewTopic {
        id: TopicId::random(),
        name: "w".into(),
        configs: BTreeMap::from([("nope".into(), "1".into())]),
        assignment: vec![vec![1]],
        storage_cluster_id: None,
        initial_leader_epoch: 0,
    });
    assert!(matches!(
        m.apply(&bad_config, 6),
        Err(Rejection::InvalidConfig { .. })
    ));
    assert_eq!(m.topics.len(), 1);
}

/// The rules themselves are strata-proto's (tested there); a broken one is a rejection
/// that names the topic and the rule, answered with INVALID_TOPIC_EXCEPTION.
#[test]
fn topic_names_follow_kafka_rules() {
    validate_topic_name(&"x".repeat(249)).unwrap();
    let e = validate_topic_name("a/b").unwrap_err();
    assert_eq!(
        e,
        Rejection::InvalidTopicName {
            name: "a/b".into(),
            reason: "only ASCII letters, digits, '.', '_' and '-' are allowed".into(),
        }
    );
    assert_eq!(
        e.error_code(),
        strata_proto::ErrorCode::InvalidTopicException
    );
}

#[test]
fn producer_ids_are_never_reused() {
    let mut m = ClusterMetadata::default();
    let a = m
        .apply(&Command::AllocateProducerIds { count: 10 }, 1)
        .unwrap();
    let b = m
        .apply(&Command::AllocateProducerIds { count: 5 }, 2)
        .unwrap();
    assert_eq!(
        (a, b),
        (
            CommandOutput::ProducerIds {
                first: 1000,
                count: 10
            },
            CommandOutput::ProducerIds {
                first: 1010,
                count: 5
            }
        )
    );
    assert!(
        m.apply(&Command::AllocateProducerIds { count: 0 }, 3)
            .is_err()
    );
}

/// Two clusters hand out producer ids from different points (a topic recovered from
/// the bucket into a new cluster keeps its producers' state), each the same on every
/// voter, far apart.
#[test]
fn a_new_cluster_starts_its_producer_ids_at_a_point_of_its_own() {
    let first_id = |cluster: &str| {
        let mut m = ClusterMetadata::default();
        m.apply(
            &Command::InitCluster {
                cluster_id: cluster.into(),
            },
            1,
        )
        .unwrap();
        match m
            .apply(&Command::AllocateProducerIds { count: 1 }, 2)
            .unwrap()
        {
            CommandOutput::ProducerIds { first, .. } => first,
            other => panic!("{other:?}"),
        }
    };
    let (a, b) = (first_id("cluster-a"), first_id("cluster-b"));
    assert_eq!(a, first_id("cluster-a"));
    assert!(
        a >= 1000 && b >= 1000 && (a - b).abs() >= 1 << 16,
        "{a} {b}"
    );
    assert!(a < 1 << 57 && b < 1 << 57);
}
