//! Controllers over real TCP on 127.0.0.1 (ports chosen by the kernel) with temp dirs.
//!
//! Raft's timers run on tokio's real clock with short timeouts; broker liveness runs on a
//! ManualClock the tests move, so no test sleeps to make a broker miss heartbeats.
//! Waiting is event-driven: the metadata long poll returns when the state changes.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use strata_controller::{
    AlterPartitionRequest, BrokerRegistration, ClusterMetadata, Controller, ControllerClient,
    ControllerConfig, ControllerError, ElectionType, ManualClock, MetadataUpdate, NO_LEADER,
    NewTopicRequest, NodeId, RaftTuning, Rejection, StartOptions,
};
use strata_proto::{ErrorCode, TopicId};
use tempfile::TempDir;

const WAIT: Duration = Duration::from_secs(20);

fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_test_writer()
        .try_init();
}

fn config(
    id: NodeId,
    addr: SocketAddr,
    voters: &[(NodeId, String)],
    dir: &Path,
) -> ControllerConfig {
    ControllerConfig {
        node_id: id,
        listen_addr: addr,
        voters: voters.to_vec(),
        data_dir: dir.join(format!("voter-{id}")),
        session_timeout: Duration::from_secs(9),
        tick: Duration::from_millis(20),
        rebalance_delay: Some(Duration::from_secs(5)),
        request_timeout: Duration::from_secs(5),
        raft: RaftTuning {
            heartbeat_interval: Duration::from_millis(50),
            election_timeout_min: Duration::from_millis(300),
            election_timeout_max: Duration::from_millis(600),
            // Small, so restarted voters catch up through snapshots too.
            snapshot_after_entries: 8,
            keep_after_snapshot: 2,
            segment_bytes: 4096,
        },
        ..ControllerConfig::default()
    }
}

/// A quorum of `n` voters on kernel-chosen ports.
struct Quorum {
    dir: TempDir,
    voters: Vec<(NodeId, String)>,
    running: BTreeMap<NodeId, Controller>,
    clock: Arc<ManualClock>,
}

impl Quorum {
    async fn start(n: u64) -> Quorum {
        init_tracing();
        let dir = tempfile::tempdir().unwrap();
        let listeners: Vec<std::net::TcpListener> = (0..n)
            .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
            .collect();
        let voters: Vec<(NodeId, String)> = listeners
            .iter()
            .enumerate()
            .map(|(i, l)| (i as NodeId + 1, l.local_addr().unwrap().to_string()))
            .collect();
        let mut q = Quorum {
            dir,
            voters,
            running: BTreeMap::new(),
            clock: Arc::new(ManualClock::new()),
        };
        for (i, l) in listeners.into_iter().enumerate() {
            q.start_voter(i as NodeId + 1, Some(l)).await;
        }
        q
    }

    fn addr(&self, id: NodeId) -> SocketAddr {
        self.voters[(id - 1) as usize].1.parse().unwrap()
    }

    async fn start_voter(&mut self, id: NodeId, listener: Option<std::net::TcpListener>) {
        let c = config(id, self.addr(id), &self.voters, self.dir.path());
        let ctl = Controller::start_with(
            c,
            StartOptions {
                clock: self.clock.clone(),
                listener,
            },
        )
        .await
        .unwrap();
        self.running.insert(id, ctl);
    }

    fn client(&self) -> ControllerClient {
        ControllerClient::new(self.voters.iter().map(|(_, a)| a.clone()))
    }

    /// The leader, once one of the running voters is it.
    async fn leader(&self) -> NodeId {
        let started = Instant::now();
        loop {
            for (id, c) in &self.running {
                if c.is_leader() {
                    return *id;
                }
            }
            assert!(started.elapsed() < WAIT, "no leader");
            let any = self.running.values().next().unwrap();
            let _ = any.wait_for_leader(Duration::from_millis(100)).await;
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    async fn stop(&mut self, id: NodeId) {
        let c = self.running.remove(&id).unwrap();
        c.shutdown().await.unwrap();
    }

    async fn stop_all(&mut self) {
        let ids: Vec<NodeId> = self.running.keys().copied().collect();
        for id in ids {
            self.stop(id).await;
        }
    }
}

/// The metadata once `pred` holds, by long polling.
async fn wait_for(
    client: &ControllerClient,
    what: &str,
    pred: impl Fn(&ClusterMetadata) -> bool,
) -> ClusterMetadata {
    let started = Instant::now();
    let mut m = client.metadata(0, WAIT).await.unwrap().unwrap();
    loop {
        if pred(&m) {
            return m;
        }
        let left = WAIT.checked_sub(started.elapsed()).unwrap_or_else(|| {
            panic!("timed out waiting for {what}; metadata: {m:#?}");
        });
        if let Some(next) = client.metadata(m.version, left).await.unwrap() {
            m = next;
        }
    }
}

async fn register(client: &ControllerClient, id: i32) -> i64 {
    client
        .register_broker(BrokerRegistration {
            broker_id: id,
            host: "127.0.0.1".into(),
            port: 9000 + id as u16,
            rack: None,
            listeners: vec![],
        })
        .await
        .unwrap()
        .epoch
}

fn code(e: &ControllerError) -> ErrorCode {
    e.error_code()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_voter_starts_fast_and_serves() {
    init_tracing();
    let dir = tempfile::tempdir().unwrap();
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let started = Instant::now();
    let c = Controller::start_with(
        ControllerConfig::single_node(1, addr, dir.path().join("c")),
        StartOptions {
            listener: Some(l),
            ..StartOptions::default()
        },
    )
    .await
    .unwrap();
    let client = c.client();
    let epoch = register(&client, 1).await;
    let ready = started.elapsed();
    eprintln!("single voter: first registration answered {ready:?} after start");
    assert!(ready < Duration::from_secs(1), "took {ready:?}");
    let t = client
        .create_topic("orders", 3, -1, BTreeMap::new())
        .await
        .unwrap();
    assert_eq!(t.partitions.len(), 3);
    assert!(
        t.partitions
            .iter()
            .all(|p| p.replicas == vec![1] && p.leader == 1)
    );
    let first = client.allocate_producer_ids(100).await.unwrap();
    let m = client.metadata(0, Duration::ZERO).await.unwrap().unwrap();
    assert_eq!(m.controller_leader, Some(1));
    assert_eq!(m.cluster_id.len(), 22);
    assert_eq!(m.brokers[&1].epoch, epoch);
    let cluster_id = m.cluster_id.clone();
    c.shutdown().await.unwrap();

    // Restart: also fast (the single voter restores its leadership at once), same state.
    let started = Instant::now();
    let c = Controller::start(ControllerConfig::single_node(1, addr, dir.path().join("c")))
        .await
        .unwrap();
    let client = c.client();
    let again = client.allocate_producer_ids(1).await.unwrap();
    let ready = started.elapsed();
    eprintln!("single voter: first call after a restart answered {ready:?} after start");
    assert!(ready < Duration::from_secs(1), "restart took {ready:?}");
    assert!(again >= first + 100);
    let m = client.metadata(0, Duration::ZERO).await.unwrap().unwrap();
    assert_eq!(m.cluster_id, cluster_id);
    assert_eq!(m.topics["orders"].id, t.id);
    c.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_voters_replicate_and_survive_the_leaders_shutdown() {
    let mut q = Quorum::start(3).await;
    let client = q.client();
    for b in 1..=3 {
        register(&client, b).await;
    }
    let mut created = BTreeMap::new();
    for i in 0..5 {
        let t = client
            .create_topic(&format!("before-{i}"), 2, 3, BTreeMap::new())
            .await
            .unwrap();
        created.insert(t.name.clone(), t.id);
    }
    let old = q.leader().await;
    q.stop(old).await;

    // The client follows the new leader; nothing committed is lost.
    for i in 0..10 {
        let t = client
            .create_topic(&format!("after-{i}"), 1, 3, BTreeMap::new())
            .await
            .unwrap();
        created.insert(t.name.clone(), t.id);
    }
    let new = q.leader().await;
    assert_ne!(new, old);
    let m = client.metadata(0, Duration::ZERO).await.unwrap().unwrap();
    assert_eq!(m.controller_leader, Some(new));
    let have: BTreeMap<String, TopicId> =
        m.topics.values().map(|t| (t.name.clone(), t.id)).collect();
    assert_eq!(have, created);

    // The old leader comes back and catches up (its log was compacted away meanwhile,
    // so through a snapshot).
    q.start_voter(old, None).await;
    let back = q.running[&old]
        .wait_for_version(m.version, WAIT)
        .await
        .unwrap();
    assert_eq!(back.topics, m.topics);
    assert!(q.running[&old].raft_metrics().snapshot.is_some());
    q.stop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarting_every_voter_keeps_the_state() {
    let mut q = Quorum::start(3).await;
    let client = q.client();
    let e1 = register(&client, 1).await;
    register(&client, 2).await;
    let t = client
        .create_topic(
            "kept",
            4,
            2,
            BTreeMap::from([("retention.ms".into(), "1000".into())]),
        )
        .await
        .unwrap();
    let p0 = t.partitions[0].clone();
    let altered = client
        .alter_partition(AlterPartitionRequest {
            broker: p0.leader,
            broker_epoch: client
                .metadata(0, Duration::ZERO)
                .await
                .unwrap()
                .unwrap()
                .brokers[&p0.leader]
                .epoch,
            topic_id: t.id,
            partition: 0,
            leader_epoch: p0.leader_epoch,
            partition_epoch: p0.partition_epoch,
            new_isr: vec![p0.leader],
        })
        .await
        .unwrap();
    let pid = client.allocate_producer_ids(10).await.unwrap();
    let before = client.metadata(0, Duration::ZERO).await.unwrap().unwrap();
    q.stop_all().await;

    for id in 1..=3 {
        q.start_voter(id, None).await;
    }
    let client = q.client();
    let after = wait_for(&client, "the state replayed", |m| {
        m.version >= before.version
    })
    .await;
    assert_eq!(after.cluster_id, before.cluster_id);
    assert_eq!(after.topics, before.topics);
    assert_eq!(after.brokers, before.brokers);
    assert_eq!(after.topics["kept"].partitions[0], altered);
    assert_eq!(after.brokers[&1].epoch, e1);
    assert!(client.allocate_producer_ids(1).await.unwrap() >= pid + 10);
    q.stop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn creating_topics_while_the_leader_is_killed_creates_each_at_most_once() {
    let mut q = Quorum::start(3).await;
    let client = q.client();
    for b in 1..=3 {
        register(&client, b).await;
    }
    let leader = q.leader().await;
    let before = client.metadata(0, Duration::ZERO).await.unwrap().unwrap();
    let mut calls = Vec::new();
    for task in 0..8 {
        let client = client.clone();
        calls.push(tokio::spawn(async move {
            let mut out = Vec::new();
            for i in 0..4 {
                let name = format!("racing-{task}-{i}");
                let r = client.create_topic(&name, 3, 3, BTreeMap::new()).await;
                out.push((name, r));
            }
            out
        }));
    }
    // Kill the leader as soon as the first creation is applied, while the rest are in
    // flight.
    client
        .metadata(before.version, WAIT)
        .await
        .unwrap()
        .expect("a creation");
    q.stop(leader).await;
    let mut results = Vec::new();
    for c in calls {
        results.extend(c.await.unwrap());
    }
    let m = wait_for(&client, "a new leader", |m| {
        m.controller_leader.is_some_and(|l| l != leader)
    })
    .await;
    for (name, r) in &results {
        let found: Vec<_> = m.topics.values().filter(|t| &t.name == name).collect();
        match r {
            // Acknowledged: there, exactly once, with the acknowledged id.
            Ok(t) => {
                assert_eq!(found.len(), 1);
                assert_eq!(found[0].id, t.id);
            }
            // Not acknowledged: there at most once.
            Err(e) => {
                assert!(e.is_retriable(), "{e}");
                assert!(found.len() <= 1);
            }
        }
    }
    let acknowledged = results.iter().filter(|(_, r)| r.is_ok()).count();
    eprintln!(
        "{acknowledged} of {} creations acknowledged across the leader kill",
        results.len()
    );
    // Topic ids are unique.
    let ids: BTreeSet<TopicId> = m.topics.values().map(|t| t.id).collect();
    assert_eq!(ids.len(), m.topics.len());

    // A create repeated with the same topic id (a client retrying after a lost answer)
    // gets the topic it created, not a second one nor an error.
    let req = NewTopicRequest {
        id: TopicId::random(),
        name: "restored".into(),
        partitions: 2,
        replication_factor: 2,
        configs: BTreeMap::new(),
        storage_cluster_id: Some("old-cluster".into()),
        initial_leader_epoch: 0,
        assignment: None,
    };
    let a = client.restore_topic(req.clone()).await.unwrap();
    let b = client.restore_topic(req.clone()).await.unwrap();
    assert_eq!(a, b);
    assert_eq!(a.storage_cluster_id.as_deref(), Some("old-cluster"));
    let other = client
        .restore_topic(NewTopicRequest {
            id: TopicId::random(),
            ..req
        })
        .await
        .unwrap_err();
    assert_eq!(code(&other), ErrorCode::TopicAlreadyExists);
    q.stop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missed_heartbeats_fence_a_broker_move_its_leaderships_and_shrink_isrs() {
    let q = Quorum::start(1).await;
    let ctl = &q.running[&1];
    let client = q.client();
    let mut epochs = BTreeMap::new();
    for b in 1..=3 {
        epochs.insert(b, register(&client, b).await);
    }
    let t = client
        .create_topic("t", 6, 3, BTreeMap::new())
        .await
        .unwrap();
    let led_by_3: Vec<i32> = t
        .partitions
        .iter()
        .filter(|p| p.leader == 3)
        .map(|p| p.partition)
        .collect();
    assert_eq!(led_by_3.len(), 2);

    q.clock.advance(Duration::from_secs(5));
    for b in [1, 2] {
        let h = client.heartbeat(b, epochs[&b]).await.unwrap();
        assert!(!h.fenced);
    }
    q.clock.advance(Duration::from_secs(4));
    ctl.run_duties().await.unwrap();
    let m = wait_for(&client, "broker 3 fenced", |m| m.brokers[&3].fenced).await;
    assert!(!m.brokers[&1].fenced && !m.brokers[&2].fenced);
    for p in &m.topics["t"].partitions {
        let before = &t.partitions[p.partition as usize];
        assert_ne!(p.leader, 3);
        assert!(!p.isr.contains(&3), "{p:?}");
        assert_eq!(p.isr.len(), 2);
        if led_by_3.contains(&p.partition) {
            assert_eq!(p.leader_epoch, before.leader_epoch + 1);
        } else {
            assert_eq!(p.leader, before.leader);
            assert_eq!(p.leader_epoch, before.leader_epoch);
        }
        assert_eq!(p.partition_epoch, before.partition_epoch + 1);
    }
    // The fenced broker's heartbeat unfences it; a stale epoch is refused.
    let stale = client.heartbeat(3, epochs[&3] - 1).await.unwrap_err();
    assert_eq!(code(&stale), ErrorCode::StaleBrokerEpoch);
    assert!(!stale.is_retriable());
    let h = client.heartbeat(3, epochs[&3]).await.unwrap();
    assert!(!h.fenced);
    let m = client.metadata(0, Duration::ZERO).await.unwrap().unwrap();
    assert!(!m.brokers[&3].fenced);
    assert!(h.metadata_version <= m.version);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alter_partition_with_stale_epochs_is_refused() {
    let q = Quorum::start(1).await;
    let client = q.client();
    let mut epochs = BTreeMap::new();
    for b in 1..=3 {
        epochs.insert(b, register(&client, b).await);
    }
    let t = client
        .create_topic("t", 1, 3, BTreeMap::new())
        .await
        .unwrap();
    let p = t.partitions[0].clone();
    let leader = p.leader;
    let follower = p.replicas.iter().copied().find(|r| *r != leader).unwrap();
    let req = |isr: Vec<i32>, leader_epoch, partition_epoch| AlterPartitionRequest {
        broker: leader,
        broker_epoch: epochs[&leader],
        topic_id: t.id,
        partition: 0,
        leader_epoch,
        partition_epoch,
        new_isr: isr,
    };
    let shrunk: Vec<i32> = p.isr.iter().copied().filter(|r| *r != follower).collect();
    let p1 = client
        .alter_partition(req(shrunk.clone(), p.leader_epoch, p.partition_epoch))
        .await
        .unwrap();
    assert_eq!(p1.partition_epoch, p.partition_epoch + 1);
    assert_eq!(p1.isr, shrunk);

    let stale_version = client
        .alter_partition(req(p.isr.clone(), p.leader_epoch, p.partition_epoch))
        .await
        .unwrap_err();
    assert_eq!(code(&stale_version), ErrorCode::InvalidUpdateVersion);
    let stale_leader = client
        .alter_partition(req(p.isr.clone(), p.leader_epoch - 1, p1.partition_epoch))
        .await
        .unwrap_err();
    assert_eq!(code(&stale_leader), ErrorCode::FencedLeaderEpoch);
    let not_leader = client
        .alter_partition(AlterPartitionRequest {
            broker: follower,
            broker_epoch: epochs[&follower],
            ..req(p.isr.clone(), p1.leader_epoch, p1.partition_epoch)
        })
        .await
        .unwrap_err();
    assert_eq!(code(&not_leader), ErrorCode::NotLeaderOrFollower);
    let without_leader = client
        .alter_partition(req(vec![follower], p1.leader_epoch, p1.partition_epoch))
        .await
        .unwrap_err();
    assert_eq!(code(&without_leader), ErrorCode::InvalidRequest);
    assert!(matches!(
        without_leader.rejection(),
        Some(Rejection::InvalidRequest { .. })
    ));
    // Nothing changed; the current epochs work.
    let p2 = client
        .alter_partition(req(p.isr.clone(), p1.leader_epoch, p1.partition_epoch))
        .await
        .unwrap();
    assert_eq!(p2.isr, p.isr);
    assert_eq!(p2.partition_epoch, p1.partition_epoch + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unclean_election_happens_only_where_enabled() {
    let q = Quorum::start(1).await;
    let ctl = &q.running[&1];
    let client = q.client();
    let mut epochs = BTreeMap::new();
    for b in 1..=2 {
        epochs.insert(b, register(&client, b).await);
    }
    let mut on_1 = BTreeMap::new();
    for (name, configs) in [
        ("clean", BTreeMap::new()),
        (
            "dirty",
            BTreeMap::from([("unclean.leader.election.enable".into(), "true".into())]),
        ),
    ] {
        let t = client.create_topic(name, 2, 2, configs).await.unwrap();
        // Broker 1 leads one partition of each; it drops its follower from the ISR.
        let p = t.partitions.iter().find(|p| p.leader == 1).unwrap();
        client
            .alter_partition(AlterPartitionRequest {
                broker: 1,
                broker_epoch: epochs[&1],
                topic_id: t.id,
                partition: p.partition,
                leader_epoch: p.leader_epoch,
                partition_epoch: p.partition_epoch,
                new_isr: vec![1],
            })
            .await
            .unwrap();
        on_1.insert(name, p.partition);
    }
    // Broker 1 dies: only broker 2 keeps heartbeating.
    q.clock.advance(Duration::from_secs(5));
    client.heartbeat(2, epochs[&2]).await.unwrap();
    q.clock.advance(Duration::from_secs(5));
    ctl.run_duties().await.unwrap();
    let m = wait_for(&client, "broker 1 fenced", |m| m.brokers[&1].fenced).await;

    let clean = &m.topics["clean"].partitions[on_1["clean"] as usize];
    assert_eq!(
        clean.leader, NO_LEADER,
        "an out-of-sync replica is not elected"
    );
    assert_eq!(clean.isr, vec![1], "the last ISR member stays in the ISR");
    assert_eq!(
        m.offline_partitions(),
        vec![("clean".to_string(), on_1["clean"])]
    );
    let dirty = &m.topics["dirty"].partitions[on_1["dirty"] as usize];
    assert_eq!(dirty.leader, 2, "unclean election is enabled on this topic");
    assert_eq!(dirty.isr, vec![2]);

    // When broker 1 returns, the clean partition gets its in-sync leader back.
    client.heartbeat(1, epochs[&1]).await.unwrap();
    let m = client.metadata(0, Duration::ZERO).await.unwrap().unwrap();
    let clean_back = &m.topics["clean"].partitions[on_1["clean"] as usize];
    assert_eq!(clean_back.leader, 1);
    assert_eq!(clean_back.leader_epoch, clean.leader_epoch + 1);
    assert!(m.offline_partitions().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preferred_leaders_return_after_the_rebalance_delay() {
    let q = Quorum::start(1).await;
    let ctl = &q.running[&1];
    let client = q.client();
    let mut epochs = BTreeMap::new();
    for b in 1..=3 {
        epochs.insert(b, register(&client, b).await);
    }
    let t = client
        .create_topic("t", 3, 3, BTreeMap::new())
        .await
        .unwrap();
    let preferred_1 = t
        .partitions
        .iter()
        .find(|p| p.replicas[0] == 1)
        .unwrap()
        .partition;
    // Broker 1 misses heartbeats and loses its leadership.
    q.clock.advance(Duration::from_secs(5));
    for b in [2, 3] {
        client.heartbeat(b, epochs[&b]).await.unwrap();
    }
    q.clock.advance(Duration::from_secs(5));
    ctl.run_duties().await.unwrap();
    let m = wait_for(&client, "broker 1 fenced", |m| m.brokers[&1].fenced).await;
    let p = m.topics["t"].partitions[preferred_1 as usize].clone();
    assert_ne!(p.leader, 1);
    // It comes back, and its leader adds it to the ISR once it has caught up.
    client.heartbeat(1, epochs[&1]).await.unwrap();
    let mut isr = p.isr.clone();
    isr.push(1);
    client
        .alter_partition(AlterPartitionRequest {
            broker: p.leader,
            broker_epoch: epochs[&p.leader],
            topic_id: t.id,
            partition: preferred_1,
            leader_epoch: p.leader_epoch,
            partition_epoch: p.partition_epoch,
            new_isr: isr,
        })
        .await
        .unwrap();
    for b in 1..=3 {
        client.heartbeat(b, epochs[&b]).await.unwrap();
    }
    ctl.run_duties().await.unwrap();
    let m = client.metadata(0, Duration::ZERO).await.unwrap().unwrap();
    assert_ne!(
        m.topics["t"].partitions[preferred_1 as usize].leader, 1,
        "not before the delay"
    );
    q.clock.advance(Duration::from_secs(5));
    for b in 1..=3 {
        client.heartbeat(b, epochs[&b]).await.unwrap();
    }
    ctl.run_duties().await.unwrap();
    let m = wait_for(&client, "leadership back on broker 1", |m| {
        m.topics["t"].partitions[preferred_1 as usize].leader == 1
    })
    .await;
    let back = &m.topics["t"].partitions[preferred_1 as usize];
    assert_eq!(back.leader_epoch, p.leader_epoch + 1);
    // Every partition is led by its preferred replica again: nothing left to elect.
    assert!(
        m.topics["t"]
            .partitions
            .iter()
            .all(|p| p.leader == p.replicas[0])
    );
    let outcomes = client
        .elect_leaders(ElectionType::Preferred, None)
        .await
        .unwrap();
    assert_eq!(outcomes.len(), 3);
    assert!(outcomes.iter().all(|o| o.result.is_err()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn assignments_spread_replicas_and_balance_leaders() {
    let q = Quorum::start(1).await;
    let client = q.client();
    for b in 1..=3 {
        register(&client, b).await;
    }
    let t = client
        .create_topic("spread", 6, 2, BTreeMap::new())
        .await
        .unwrap();
    let mut leaders = BTreeMap::<i32, usize>::new();
    let mut replicas = BTreeMap::<i32, usize>::new();
    for p in &t.partitions {
        assert_eq!(p.leader, p.replicas[0]);
        assert_eq!(p.isr, p.replicas);
        *leaders.entry(p.leader).or_default() += 1;
        for r in &p.replicas {
            *replicas.entry(*r).or_default() += 1;
        }
    }
    assert_eq!(leaders.values().copied().collect::<Vec<_>>(), vec![2, 2, 2]);
    assert_eq!(
        replicas.values().copied().collect::<Vec<_>>(),
        vec![4, 4, 4]
    );
    // Growing the topic keeps spreading.
    let grown = client.create_partitions("spread", 9).await.unwrap();
    for p in &grown.partitions[6..] {
        *leaders.entry(p.leader).or_default() += 1;
    }
    assert_eq!(leaders.values().copied().collect::<Vec<_>>(), vec![3, 3, 3]);

    let e = client
        .create_topic("too-wide", 1, 4, BTreeMap::new())
        .await
        .unwrap_err();
    assert_eq!(code(&e), ErrorCode::InvalidReplicationFactor);
    let e = client
        .create_topic("bad config", 1, 1, BTreeMap::new())
        .await
        .unwrap_err();
    assert_eq!(code(&e), ErrorCode::InvalidTopicException);
    let e = client
        .create_topic(
            "bad-config",
            1,
            1,
            BTreeMap::from([("retention.ms".into(), "soon".into())]),
        )
        .await
        .unwrap_err();
    assert_eq!(code(&e), ErrorCode::InvalidConfig);
    let e = client.create_partitions("spread", 3).await.unwrap_err();
    assert_eq!(code(&e), ErrorCode::InvalidPartitions);
    let e = client.delete_topic("nope").await.unwrap_err();
    assert_eq!(code(&e), ErrorCode::UnknownTopicOrPartition);
    client.delete_topic("spread").await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_long_poll_returns_on_change_and_times_out_otherwise() {
    let q = Quorum::start(1).await;
    let client = q.client();
    register(&client, 1).await;
    let m = client.metadata(0, Duration::ZERO).await.unwrap().unwrap();

    let started = Instant::now();
    let none = client
        .metadata(m.version, Duration::from_millis(300))
        .await
        .unwrap();
    assert!(none.is_none());
    assert!(started.elapsed() >= Duration::from_millis(300));

    let poller = {
        let client = client.clone();
        tokio::spawn(async move { client.metadata(m.version, Duration::from_secs(30)).await })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    let started = Instant::now();
    client
        .set_configs("nope", BTreeMap::new())
        .await
        .unwrap_err();
    assert!(!poller.is_finished(), "a refused command changes nothing");
    client
        .create_topic("news", 1, 1, BTreeMap::new())
        .await
        .unwrap();
    let changed = poller.await.unwrap().unwrap().expect("changed");
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(changed.version > m.version);
    assert!(changed.topics.contains_key("news"));
}

#[tokio::test(start_paused = true)]
async fn a_client_gives_up_at_its_deadline_or_when_cancelled() {
    // Nothing listens here.
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let client = ControllerClient::new([addr.to_string()]).with_deadline(Duration::from_secs(5));
    let started = tokio::time::Instant::now();
    let e = client.allocate_producer_ids(1).await.unwrap_err();
    assert!(matches!(e, ControllerError::TimedOut { .. }), "{e}");
    assert!(e.is_retriable());
    assert_eq!(code(&e), ErrorCode::RequestTimedOut);
    assert!(started.elapsed() >= Duration::from_secs(5));

    let token = tokio_util::sync::CancellationToken::new();
    let cancellable = client
        .with_deadline(Duration::from_secs(3600))
        .with_cancellation(token.clone());
    let call = tokio::spawn(async move { cancellable.allocate_producer_ids(1).await });
    tokio::time::sleep(Duration::from_secs(2)).await;
    token.cancel();
    let e = call.await.unwrap().unwrap_err();
    assert!(matches!(e, ControllerError::Cancelled), "{e}");
    assert!(!e.is_retriable());
}

/// Brings `copy` up to the controller's version as a broker does: a delta applied, or the
/// whole metadata. Returns whether a delta did it.
async fn follow(client: &ControllerClient, copy: &mut ClusterMetadata) -> bool {
    match client
        .metadata_update(copy.version, Duration::from_secs(5))
        .await
        .unwrap()
    {
        Some(MetadataUpdate::Delta(d)) => {
            assert_eq!(d.from_version, copy.version);
            copy.apply_delta(&d).unwrap();
            true
        }
        Some(MetadataUpdate::Full(m)) => {
            *copy = *m;
            false
        }
        None => panic!("no change after version {}", copy.version),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_kept_by_deltas_equals_the_whole_metadata_through_every_kind_of_change() {
    let mut q = Quorum::start(3).await;
    let client = q.client();
    let mut epochs = BTreeMap::new();
    for b in 1..=3 {
        epochs.insert(b, register(&client, b).await);
    }
    // Version 0 always gets the whole metadata.
    let mut copy = ClusterMetadata::default();
    assert!(!follow(&client, &mut copy).await);
    let mut deltas = 0;
    let check = |copy: &ClusterMetadata, whole: &ClusterMetadata| {
        assert_eq!(copy.version, whole.version);
        assert_eq!(
            copy, whole,
            "a copy kept by deltas differs from the whole metadata"
        );
    };

    let t = client
        .create_topic("orders", 6, 3, BTreeMap::new())
        .await
        .unwrap();
    deltas += follow(&client, &mut copy).await as usize;
    // Several changes in one delta.
    client
        .create_topic("audit", 2, 2, BTreeMap::new())
        .await
        .unwrap();
    client
        .set_configs(
            "orders",
            BTreeMap::from([("retention.ms".into(), "60000".into())]),
        )
        .await
        .unwrap();
    client.create_partitions("audit", 4).await.unwrap();
    client.allocate_producer_ids(100).await.unwrap();
    deltas += follow(&client, &mut copy).await as usize;
    check(
        &copy,
        &client.metadata(0, Duration::ZERO).await.unwrap().unwrap(),
    );

    // An ISR shrink, then a broker fenced by its missed heartbeats (ISRs and leaders
    // move), then unfenced.
    let p0 = t.partitions[0].clone();
    client
        .alter_partition(AlterPartitionRequest {
            broker: p0.leader,
            broker_epoch: epochs[&p0.leader],
            topic_id: t.id,
            partition: 0,
            leader_epoch: p0.leader_epoch,
            partition_epoch: p0.partition_epoch,
            new_isr: vec![p0.leader],
        })
        .await
        .unwrap();
    deltas += follow(&client, &mut copy).await as usize;
    let leader = q.leader().await;
    q.clock.advance(Duration::from_secs(5));
    for b in [1, 2] {
        client.heartbeat(b, epochs[&b]).await.unwrap();
    }
    q.clock.advance(Duration::from_secs(5));
    q.running[&leader].run_duties().await.unwrap();
    while !copy.brokers[&3].fenced {
        deltas += follow(&client, &mut copy).await as usize;
    }
    check(
        &copy,
        &client.metadata(0, Duration::ZERO).await.unwrap().unwrap(),
    );
    client.heartbeat(3, epochs[&3]).await.unwrap();
    client
        .elect_leaders(ElectionType::Preferred, None)
        .await
        .unwrap();
    client.delete_topic("audit").await.unwrap();
    while copy.topics.contains_key("audit") || copy.brokers[&3].fenced {
        deltas += follow(&client, &mut copy).await as usize;
    }
    let whole = client.metadata(0, Duration::ZERO).await.unwrap().unwrap();
    check(&copy, &whole);
    // The topic index follows deletions and creations.
    assert!(copy.topic_by_id(t.id).is_some());
    assert!(whole.topic_by_id(t.id).is_some());

    // A new controller leader serves deltas from the same log.
    q.stop(leader).await;
    let recreated = client
        .create_topic("audit", 1, 2, BTreeMap::new())
        .await
        .unwrap();
    deltas += follow(&client, &mut copy).await as usize;
    let whole = client.metadata(0, Duration::ZERO).await.unwrap().unwrap();
    check(&copy, &whole);
    assert_eq!(copy.topic_by_id(recreated.id).unwrap().name, "audit");
    assert!(deltas >= 6, "only {deltas} of the updates were deltas");
    q.stop_all().await;
}
