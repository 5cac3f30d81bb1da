//! Consumer groups against the real `strata serve` with rdkafka's high-level consumer:
//! partitions split and move between members, committed offsets survive a broker
//! restart, groups are independent, and bad group requests get Kafka's error codes.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use common::Broker;
use common::kafka::{client_config, create_topic, flush, producer, send};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};

const TOPIC: &str = "events";
const PARTITIONS: i32 = 6;

fn consumer(bootstrap: &str, group: &str, extra: &[(&str, &str)]) -> BaseConsumer {
    let mut settings = vec![
        ("group.id", group),
        ("enable.auto.commit", "false"),
        ("auto.offset.reset", "earliest"),
        ("session.timeout.ms", "6000"),
        ("heartbeat.interval.ms", "500"),
    ];
    settings.extend_from_slice(extra);
    let c: BaseConsumer = client_config(bootstrap, &settings)
        .create()
        .expect("consumer");
    c.subscribe(&[TOPIC]).expect("subscribe");
    c
}

/// Produces `n` records "v{i}" keyed round-robin, starting at `from`.
fn produce(bootstrap: &str, from: usize, n: usize) {
    // Idempotent: a retry after a leader change must not append a record twice (the
    // tests count records by value).
    let (p, d) = producer(
        bootstrap,
        &[
            ("acks", "all"),
            ("linger.ms", "1"),
            ("enable.idempotence", "true"),
        ],
    );
    for i in from..from + n {
        let key = format!("k{}", i % 60);
        send(&p, TOPIC, Some(key.as_bytes()), format!("v{i}").as_bytes());
    }
    flush(&p);
    assert!(d.errors.lock().unwrap().is_empty());
}

fn assigned(c: &BaseConsumer) -> BTreeSet<i32> {
    c.assignment()
        .unwrap()
        .elements()
        .iter()
        .map(|e| e.partition())
        .collect()
}

/// Polls one record from consumer number `i` into `got` as (i, partition, offset,
/// value); false when none came within `wait`.
fn poll_one(
    c: &BaseConsumer,
    i: usize,
    got: &mut Vec<(usize, i32, i64, String)>,
    wait: Duration,
) -> bool {
    let Some(m) = c.poll(wait) else {
        return false;
    };
    let m = m.expect("consume");
    let v = String::from_utf8(m.payload().unwrap().to_vec()).unwrap();
    got.push((i, m.partition(), m.offset(), v));
    true
}

/// Polls both consumers until `check` holds on their assignments, collecting records.
fn poll_until(
    cs: &[&BaseConsumer],
    got: &mut Vec<(usize, i32, i64, String)>,
    what: &str,
    check: impl Fn(&[BTreeSet<i32>], usize) -> bool,
) {
    let t0 = Instant::now();
    loop {
        for (i, c) in cs.iter().enumerate() {
            while poll_one(c, i, got, Duration::from_millis(50)) {}
        }
        let a: Vec<_> = cs.iter().map(|c| assigned(c)).collect();
        if check(&a, got.len()) {
            return;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "timed out waiting for {what}: {a:?}"
        );
    }
}

fn commit(c: &BaseConsumer) {
    c.commit_consumer_state(CommitMode::Sync).expect("commit");
}

#[test]
fn two_members_split_the_partitions_and_one_takes_over_when_the_other_leaves() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), &[]);
    let b = broker.kafka.clone();
    create_topic(&b, TOPIC, PARTITIONS, &[]);
    produce(&b, 0, 600);

    let a = consumer(&b, "g1", &[]);
    let c = consumer(&b, "g1", &[]);
    let mut got = Vec::new();
    poll_until(&[&a, &c], &mut got, "both members assigned", |s, _| {
        !s[0].is_empty()
            && !s[1].is_empty()
            && s[0].is_disjoint(&s[1])
            && s[0].len() + s[1].len() == PARTITIONS as usize
    });
    // Read everything there is, commit, then the second member leaves.
    poll_until(&[&a, &c], &mut got, "all 600 records", |_, n| n >= 600);
    commit(&a);
    commit(&c);
    let before_leave = got.len();
    drop(c);
    produce(&b, 600, 300);
    poll_until(
        &[&a],
        &mut got,
        "the remaining member owning all six",
        |s, _| s[0].len() == PARTITIONS as usize,
    );
    let unique = |got: &[(usize, i32, i64, String)]| {
        got.iter()
            .map(|g| g.3.clone())
            .collect::<BTreeSet<_>>()
            .len()
    };
    let t0 = Instant::now();
    while unique(&got) < 900 && t0.elapsed() < Duration::from_secs(30) {
        poll_one(&a, 0, &mut got, Duration::from_millis(100));
    }
    // No record skipped; none of those committed before the leave delivered again
    // (records read after the last commit may come again after a rebalance: Kafka's
    // at-least-once).
    let committed: BTreeSet<&String> = got[..before_leave].iter().map(|g| &g.3).collect();
    let mut seen = BTreeMap::<&String, usize>::new();
    for g in &got {
        *seen.entry(&g.3).or_default() += 1;
    }
    let missing: Vec<usize> = (0..900)
        .filter(|i| !seen.contains_key(&format!("v{i}")))
        .collect();
    assert!(
        missing.is_empty(),
        "missing {} records, first {:?}",
        missing.len(),
        &missing[..missing.len().min(5)]
    );
    let again: Vec<_> = committed.iter().filter(|v| seen[*v] > 1).collect();
    assert!(
        again.is_empty(),
        "committed records delivered twice: {again:?}"
    );
    assert!(before_leave >= 600);
}

#[test]
fn committed_offsets_survive_a_restart_and_groups_are_independent() {
    let dir = tempfile::tempdir().unwrap();
    let mut broker = Broker::start(dir.path(), &[]);
    let b = broker.kafka.clone();
    create_topic(&b, TOPIC, PARTITIONS, &[]);
    produce(&b, 0, 600);

    // Group "ledger" reads everything and commits; group "fraud" reads and commits an
    // explicit position per partition (10 records in).
    let ledger = consumer(&b, "ledger", &[]);
    let mut got = Vec::new();
    poll_until(&[&ledger], &mut got, "ledger reads all", |_, n| n >= 600);
    commit(&ledger);
    drop(ledger);

    let fraud: BaseConsumer = client_config(
        &b,
        &[("group.id", "fraud"), ("enable.auto.commit", "false")],
    )
    .create()
    .unwrap();
    let mut tpl = TopicPartitionList::new();
    for p in 0..PARTITIONS {
        tpl.add_partition_offset(TOPIC, p, Offset::Offset(10))
            .unwrap();
    }
    // A commit from a consumer that uses assign() (generation -1, no member id).
    fraud
        .commit(&tpl, CommitMode::Sync)
        .expect("standalone commit");
    drop(fraud);

    broker.stop();
    // A record that does not decode in every offsets partition, after the commits: the
    // coordinator skips and counts it, and still loads every group.
    let mut damaged = 0;
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if !name.starts_with("__consumer_offsets-") {
            continue;
        }
        let (log, _) = strata_log::Log::open(
            &path,
            strata_log::LogConfig::default(),
            std::sync::Arc::new(strata_log::SystemClock),
        )
        .unwrap();
        let garbage = strata_proto::batch::build::NewRecord {
            key: Some(bytes::Bytes::from_static(b"\x00\x01\x7f\xffnot a key")),
            ..strata_proto::batch::build::NewRecord::value(&b"\x00\x03garbage"[..], 1)
        };
        let mut b =
            strata_proto::batch::build::batch(&[garbage], strata_proto::Compression::None, None)
                .to_vec();
        log.append(&mut b, 0).unwrap();
        log.close().unwrap();
        damaged += 1;
    }
    assert!(damaged > 0, "the offsets topic has partitions on disk");
    broker.restart();
    let b = broker.kafka.clone();
    produce(&b, 600, 60);

    // Each group resumes exactly from its committed offsets.
    let committed = |group: &str| -> HashMap<i32, i64> {
        let c: BaseConsumer = client_config(&b, &[("group.id", group)]).create().unwrap();
        let mut tpl = TopicPartitionList::new();
        for p in 0..PARTITIONS {
            tpl.add_partition(TOPIC, p);
        }
        c.committed_offsets(tpl, Duration::from_secs(20))
            .expect("offset fetch")
            .elements()
            .iter()
            .map(|e| (e.partition(), e.offset().to_raw().unwrap()))
            .collect()
    };
    let fraud = committed("fraud");
    assert!(fraud.values().all(|&o| o == 10), "{fraud:?}");
    let ledger_offsets = committed("ledger");
    assert_eq!(
        ledger_offsets.values().sum::<i64>(),
        600,
        "{ledger_offsets:?}"
    );

    let ledger = consumer(&b, "ledger", &[]);
    let mut after = Vec::new();
    poll_until(
        &[&ledger],
        &mut after,
        "ledger reads the 60 new records",
        |_, n| n >= 60,
    );
    std::thread::sleep(Duration::from_millis(500));
    while poll_one(&ledger, 0, &mut after, Duration::from_millis(200)) {}
    let mut values: Vec<usize> = after.iter().map(|g| g.3[1..].parse().unwrap()).collect();
    values.sort();
    assert_eq!(
        values,
        (600..660).collect::<Vec<_>>(),
        "exactly the records after the commit"
    );
    // "fraud" has its own position: an unknown group's committed offsets are none.
    assert!(committed("nobody").values().all(|&o| o < 0));
    let skipped = metric_line(&broker, "strata_group_load_skipped_total{what=\"record\"}");
    assert!(
        skipped.is_some_and(|n| n >= 1.0),
        "the undecodable records were counted: {skipped:?}"
    );
}

/// Counts the rebalances a consumer goes through.
#[derive(Default, Clone)]
struct Rebalances(std::sync::Arc<std::sync::atomic::AtomicUsize>);

impl rdkafka::ClientContext for Rebalances {}

impl rdkafka::consumer::ConsumerContext for Rebalances {
    fn post_rebalance(
        &self,
        _: &rdkafka::consumer::BaseConsumer<Self>,
        r: &rdkafka::consumer::Rebalance<'_>,
    ) {
        if matches!(r, rdkafka::consumer::Rebalance::Assign(_)) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }
}

fn static_member(bootstrap: &str, instance: &str, ctx: Rebalances) -> BaseConsumer<Rebalances> {
    let c: BaseConsumer<Rebalances> = client_config(
        bootstrap,
        &[
            ("group.id", "static"),
            ("group.instance.id", instance),
            ("enable.auto.commit", "false"),
            ("auto.offset.reset", "earliest"),
            ("session.timeout.ms", "10000"),
            ("heartbeat.interval.ms", "500"),
        ],
    )
    .create_with_context(ctx)
    .expect("consumer");
    c.subscribe(&[TOPIC]).expect("subscribe");
    c
}

fn assigned_ctx(c: &BaseConsumer<Rebalances>) -> BTreeSet<i32> {
    c.assignment()
        .unwrap()
        .elements()
        .iter()
        .map(|e| e.partition())
        .collect()
}

#[test]
fn a_static_member_restarting_within_its_session_keeps_its_partitions_without_a_rebalance() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), &[]);
    let b = broker.kafka.clone();
    create_topic(&b, TOPIC, PARTITIONS, &[]);
    produce(&b, 0, 60);

    let (ra, rb) = (Rebalances::default(), Rebalances::default());
    let a = static_member(&b, "a", ra.clone());
    let c = static_member(&b, "b", rb.clone());
    let t0 = Instant::now();
    let (pa, pb) = loop {
        let _ = a.poll(Duration::from_millis(50));
        let _ = c.poll(Duration::from_millis(50));
        let (pa, pb) = (assigned_ctx(&a), assigned_ctx(&c));
        if !pa.is_empty() && !pb.is_empty() && pa.len() + pb.len() == PARTITIONS as usize {
            break (pa, pb);
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "assignment: {pa:?} {pb:?}"
        );
    };
    // Let the group settle, then note B's rebalances.
    for _ in 0..20 {
        let _ = a.poll(Duration::from_millis(50));
        let _ = c.poll(Duration::from_millis(50));
    }
    let before = rb.0.load(std::sync::atomic::Ordering::SeqCst);

    // "a" restarts: a new process with the same group.instance.id, within the session.
    drop(a);
    let a2 = static_member(&b, "a", Rebalances::default());
    let t0 = Instant::now();
    while assigned_ctx(&a2).is_empty() {
        let _ = a2.poll(Duration::from_millis(50));
        let _ = c.poll(Duration::from_millis(50));
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the restarted member got nothing"
        );
    }
    for _ in 0..40 {
        let _ = a2.poll(Duration::from_millis(50));
        let _ = c.poll(Duration::from_millis(50));
    }
    assert_eq!(
        assigned_ctx(&a2),
        pa,
        "the restarted member keeps its partitions"
    );
    assert_eq!(
        assigned_ctx(&c),
        pb,
        "the other member keeps its partitions"
    );
    assert_eq!(
        rb.0.load(std::sync::atomic::Ordering::SeqCst),
        before,
        "the other member went through no rebalance"
    );
}

mod wire_requests {
    use super::*;
    use common::wire::{connect, frame, read_frame, response};
    use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
    use kafka_protocol::messages::offset_commit_request::{
        OffsetCommitRequestPartition, OffsetCommitRequestTopic,
    };
    use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
    use kafka_protocol::messages::*;
    use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, StrBytes};
    use std::io::Write;
    use strata_proto::ErrorCode;

    fn call<Req: Encodable + HeaderVersion, Resp: Decodable + HeaderVersion>(
        s: &mut std::net::TcpStream,
        api: ApiKey,
        version: i16,
        req: &Req,
    ) -> Resp {
        s.write_all(&frame(api, version, 1, req)).unwrap();
        let b = read_frame(s).expect("an answer");
        response::<Resp>(b, api.response_header_version(version), version).1
    }

    /// Retries while the coordinator is loading or being created.
    fn retrying<T>(mut f: impl FnMut() -> (i16, T)) -> (i16, T) {
        let t0 = Instant::now();
        loop {
            let (code, r) = f();
            let busy = [
                ErrorCode::CoordinatorLoadInProgress,
                ErrorCode::CoordinatorNotAvailable,
                ErrorCode::NotCoordinator,
            ]
            .iter()
            .any(|c| c.code() == code);
            if !busy || t0.elapsed() > Duration::from_secs(30) {
                return (code, r);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn join(group: &str, member: &str, protocols: Vec<(&str, &[u8])>) -> JoinGroupRequest {
        let mut j = JoinGroupRequest::default();
        j.group_id = GroupId(StrBytes::from_string(group.into()));
        j.session_timeout_ms = 10_000;
        j.rebalance_timeout_ms = 10_000;
        j.member_id = StrBytes::from_string(member.into());
        j.protocol_type = StrBytes::from_static_str("consumer");
        j.protocols = protocols
            .into_iter()
            .map(|(n, m)| {
                let mut p = JoinGroupRequestProtocol::default();
                p.name = StrBytes::from_string(n.into());
                p.metadata = bytes::Bytes::copy_from_slice(m);
                p
            })
            .collect();
        j
    }

    fn commit(group: &str, generation: i32, member: &str) -> OffsetCommitRequest {
        let mut c = OffsetCommitRequest::default();
        c.group_id = GroupId(StrBytes::from_string(group.into()));
        c.generation_id_or_member_epoch = generation;
        c.member_id = StrBytes::from_string(member.into());
        let mut t = OffsetCommitRequestTopic::default();
        t.name = TopicName(StrBytes::from_static_str(TOPIC));
        let mut p = OffsetCommitRequestPartition::default();
        p.partition_index = 0;
        p.committed_offset = 5;
        p.committed_leader_epoch = -1;
        t.partitions = vec![p];
        c.topics = vec![t];
        c
    }

    fn commit_code(r: &OffsetCommitResponse) -> i16 {
        r.topics[0].partitions[0].error_code
    }

    #[test]
    fn bad_group_requests_get_kafkas_error_codes() {
        let dir = tempfile::tempdir().unwrap();
        let broker = Broker::start(dir.path(), &[]);
        let b = broker.kafka.clone();
        create_topic(&b, TOPIC, PARTITIONS, &[]);
        let mut s = connect(&b);

        // KIP-394: the first join gets MEMBER_ID_REQUIRED and an id to rejoin with.
        let (code, first) = retrying(|| {
            let r: JoinGroupResponse = call(
                &mut s,
                ApiKey::JoinGroup,
                5,
                &join("g", "", vec![("range", b"m")]),
            );
            (r.error_code, r)
        });
        assert_eq!(code, ErrorCode::MemberIdRequired.code());
        let member = first.member_id.to_string();
        assert!(!member.is_empty());
        let r: JoinGroupResponse = call(
            &mut s,
            ApiKey::JoinGroup,
            5,
            &join("g", &member, vec![("range", b"m")]),
        );
        assert_eq!(r.error_code, 0);
        assert_eq!(r.leader.as_str(), member, "the only member leads");
        let generation = r.generation_id;
        let mut sync = SyncGroupRequest::default();
        sync.group_id = GroupId(StrBytes::from_static_str("g"));
        sync.generation_id = generation;
        sync.member_id = StrBytes::from_string(member.clone());
        let mut a = SyncGroupRequestAssignment::default();
        a.member_id = StrBytes::from_string(member.clone());
        a.assignment = bytes::Bytes::from_static(b"assignment");
        sync.assignments = vec![a];
        let r: SyncGroupResponse = call(&mut s, ApiKey::SyncGroup, 3, &sync);
        assert_eq!(r.error_code, 0);
        assert_eq!(
            &r.assignment[..],
            b"assignment",
            "the leader's assignment is relayed"
        );

        // Commits from a member the group does not know, or for another generation.
        let r: OffsetCommitResponse = call(
            &mut s,
            ApiKey::OffsetCommit,
            8,
            &commit("g", generation, "nobody"),
        );
        assert_eq!(commit_code(&r), ErrorCode::UnknownMemberId.code());
        let r: OffsetCommitResponse = call(
            &mut s,
            ApiKey::OffsetCommit,
            8,
            &commit("g", generation + 7, &member),
        );
        assert_eq!(commit_code(&r), ErrorCode::IllegalGeneration.code());
        // A standalone commit (generation -1) while the group has members.
        let r: OffsetCommitResponse = call(&mut s, ApiKey::OffsetCommit, 8, &commit("g", -1, ""));
        assert_eq!(commit_code(&r), ErrorCode::UnknownMemberId.code());
        let r: OffsetCommitResponse = call(
            &mut s,
            ApiKey::OffsetCommit,
            8,
            &commit("g", generation, &member),
        );
        assert_eq!(commit_code(&r), 0);

        let mut hb = HeartbeatRequest::default();
        hb.group_id = GroupId(StrBytes::from_static_str("g"));
        hb.generation_id = generation + 1;
        hb.member_id = StrBytes::from_string(member.clone());
        let r: HeartbeatResponse = call(&mut s, ApiKey::Heartbeat, 3, &hb);
        assert_eq!(r.error_code, ErrorCode::IllegalGeneration.code());

        // Malformed group protocols: none at all, or another protocol type than the group's.
        let r: JoinGroupResponse = call(&mut s, ApiKey::JoinGroup, 5, &join("h", "", vec![]));
        assert_eq!(r.error_code, ErrorCode::InconsistentGroupProtocol.code());
        let mut other = join("g", &member, vec![("range", b"m")]);
        other.protocol_type = StrBytes::from_static_str("connect");
        let r: JoinGroupResponse = call(&mut s, ApiKey::JoinGroup, 5, &other);
        assert_eq!(r.error_code, ErrorCode::InconsistentGroupProtocol.code());
        // A session timeout out of range.
        let mut short = join("k", "", vec![("range", b"m")]);
        short.session_timeout_ms = 10;
        let r: JoinGroupResponse = call(&mut s, ApiKey::JoinGroup, 5, &short);
        assert_eq!(r.error_code, ErrorCode::InvalidSessionTimeout.code());

        // The committed offset is there; the admin APIs see the group.
        let mut f = OffsetFetchRequest::default();
        f.group_id = GroupId(StrBytes::from_static_str("g"));
        let mut t =
            kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic::default();
        t.name = TopicName(StrBytes::from_static_str(TOPIC));
        t.partition_indexes = vec![0, 1];
        f.topics = Some(vec![t]);
        let r: OffsetFetchResponse = call(&mut s, ApiKey::OffsetFetch, 7, &f);
        let offsets: Vec<i64> = r.topics[0]
            .partitions
            .iter()
            .map(|p| p.committed_offset)
            .collect();
        assert_eq!(offsets, vec![5, -1]);
        let r: ListGroupsResponse =
            call(&mut s, ApiKey::ListGroups, 4, &ListGroupsRequest::default());
        assert!(
            r.groups
                .iter()
                .any(|g| g.group_id.as_str() == "g" && g.group_state.as_str() == "Stable")
        );
        let mut d = DescribeGroupsRequest::default();
        d.groups = vec![
            GroupId(StrBytes::from_static_str("g")),
            GroupId(StrBytes::from_static_str("none")),
        ];
        let r: DescribeGroupsResponse = call(&mut s, ApiKey::DescribeGroups, 5, &d);
        assert_eq!(r.groups[0].members.len(), 1);
        assert_eq!(&r.groups[0].members[0].member_assignment[..], b"assignment");
        assert_eq!(r.groups[1].group_state.as_str(), "Dead");
        // A group with members cannot be deleted.
        let mut del = DeleteGroupsRequest::default();
        del.groups_names = vec![GroupId(StrBytes::from_static_str("g"))];
        let r: DeleteGroupsResponse = call(&mut s, ApiKey::DeleteGroups, 2, &del);
        assert_eq!(r.results[0].error_code, ErrorCode::NonEmptyGroup.code());
    }

    /// A standalone commit (no members) of `offsets` as (topic, partition, offset).
    fn commit_offsets(group: &str, offsets: &[(&str, i32, i64)]) -> OffsetCommitRequest {
        let mut c = OffsetCommitRequest::default();
        c.group_id = GroupId(StrBytes::from_string(group.into()));
        c.generation_id_or_member_epoch = -1;
        let mut topics: BTreeMap<&str, Vec<OffsetCommitRequestPartition>> = BTreeMap::new();
        for &(t, partition, offset) in offsets {
            let mut p = OffsetCommitRequestPartition::default();
            p.partition_index = partition;
            p.committed_offset = offset;
            p.committed_leader_epoch = -1;
            topics.entry(t).or_default().push(p);
        }
        c.topics = topics
            .into_iter()
            .map(|(name, partitions)| {
                let mut t = OffsetCommitRequestTopic::default();
                t.name = TopicName(StrBytes::from_string(name.into()));
                t.partitions = partitions;
                t
            })
            .collect();
        c
    }

    type Offsets = BTreeMap<(String, i32), i64>;

    /// OffsetFetch with topics = null at `version` (v1-7: one group; v8+: each of
    /// `groups`): the top-level (or each group's) error code and committed offsets.
    fn fetch_all(
        s: &mut std::net::TcpStream,
        version: i16,
        groups: &[&str],
    ) -> Vec<(i16, Offsets)> {
        let mut f = OffsetFetchRequest::default();
        if version >= 8 {
            f.groups = groups
                .iter()
                .map(|g| {
                    let mut rg = offset_fetch_request::OffsetFetchRequestGroup::default();
                    rg.group_id = GroupId(StrBytes::from_string(g.to_string()));
                    rg.topics = None;
                    rg
                })
                .collect();
            let r: OffsetFetchResponse = call(s, ApiKey::OffsetFetch, version, &f);
            assert_eq!(r.groups.len(), groups.len());
            r.groups
                .iter()
                .zip(groups)
                .map(|(g, name)| {
                    assert_eq!(g.group_id.as_str(), *name);
                    let offsets = g
                        .topics
                        .iter()
                        .flat_map(|t| {
                            t.partitions.iter().map(|p| {
                                assert_eq!(p.error_code, 0);
                                (
                                    (t.name.as_str().to_string(), p.partition_index),
                                    p.committed_offset,
                                )
                            })
                        })
                        .collect();
                    (g.error_code, offsets)
                })
                .collect()
        } else {
            assert_eq!(groups.len(), 1);
            f.group_id = GroupId(StrBytes::from_string(groups[0].to_string()));
            f.topics = None;
            let r: OffsetFetchResponse = call(s, ApiKey::OffsetFetch, version, &f);
            let offsets = r
                .topics
                .iter()
                .flat_map(|t| {
                    t.partitions.iter().map(|p| {
                        assert_eq!(p.error_code, 0);
                        (
                            (t.name.as_str().to_string(), p.partition_index),
                            p.committed_offset,
                        )
                    })
                })
                .collect();
            vec![(r.error_code, offsets)]
        }
    }

    /// OffsetFetch with topics = null (Kafka's admin listConsumerGroupOffsets, which
    /// kafka-consumer-groups.sh describes a group with) answers every committed offset of
    /// the group, and only of that group, at v7 (one group) and v8 (a list of groups), also
    /// after a restart (the offsets replayed from __consumer_offsets).
    #[test]
    fn offset_fetch_with_null_topics_answers_every_committed_offset() {
        let dir = tempfile::tempdir().unwrap();
        let mut broker = Broker::start(dir.path(), &[]);
        let b = broker.kafka.clone();
        create_topic(&b, "alpha", 3, &[]);
        create_topic(&b, "beta", 1, &[]);
        create_topic(&b, "gamma", 2, &[]);
        let mut s = connect(&b);
        let committed = [("alpha", 0, 5), ("alpha", 2, 9), ("beta", 0, 1)];
        let (code, _) = retrying(|| {
            let r: OffsetCommitResponse = call(
                &mut s,
                ApiKey::OffsetCommit,
                8,
                &commit_offsets("all", &committed),
            );
            let codes: BTreeSet<i16> = r
                .topics
                .iter()
                .flat_map(|t| t.partitions.iter().map(|p| p.error_code))
                .collect();
            assert_eq!(codes.len(), 1, "{r:?}");
            (*codes.first().unwrap(), r)
        });
        assert_eq!(code, 0);
        let r: OffsetCommitResponse = call(
            &mut s,
            ApiKey::OffsetCommit,
            8,
            &commit_offsets("other", &[("gamma", 1, 3)]),
        );
        assert_eq!(r.topics[0].partitions[0].error_code, 0);
        let want: Offsets = committed
            .iter()
            .map(|&(t, p, o)| ((t.to_string(), p), o))
            .collect();
        let other: Offsets = [(("gamma".to_string(), 1), 3)].into_iter().collect();

        for round in ["before a restart", "after a restart"] {
            let (code, got) = retrying(|| fetch_all(&mut s, 7, &["all"]).remove(0));
            assert_eq!((code, &got), (0, &want), "v7 {round}");
            let (code, _) = retrying(|| {
                let r = fetch_all(&mut s, 8, &["all", "other", "nobody"]);
                (r.iter().map(|g| g.0).find(|&c| c != 0).unwrap_or(0), r)
            });
            assert_eq!(code, 0, "v8 {round}");
            let r = fetch_all(&mut s, 8, &["all", "other", "nobody"]);
            assert_eq!(r[0], (0, want.clone()), "v8 {round}");
            assert_eq!(r[1], (0, other.clone()), "v8 {round}");
            assert_eq!(
                r[2],
                (0, Offsets::new()),
                "v8 {round}: an unknown group has none"
            );
            // v2 (the first with null topics) and v5 answer the same.
            for v in [2, 5] {
                assert_eq!(
                    fetch_all(&mut s, v, &["all"]),
                    vec![(0, want.clone())],
                    "v{v} {round}"
                );
            }
            if round == "before a restart" {
                drop(s);
                broker.stop();
                broker.restart();
                s = connect(&broker.kafka);
            }
        }
    }
}

/// A counter or gauge from the broker's Prometheus endpoint whose line starts with
/// `prefix` (name and labels); `None` if absent.
fn metric_line(b: &Broker, prefix: &str) -> Option<f64> {
    b.http_get("/metrics")
        .lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

#[test]
fn lag_is_exported_and_a_position_that_aged_out_is_reported_and_reset() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(
        dir.path(),
        &[
            "--retention-check-interval",
            "1s",
            "--min-segment-bytes",
            "1",
        ],
    );
    let b = broker.kafka.clone();
    // Tiny segments and a one-minute retention: records stamped an hour ago go as
    // soon as retention runs (all but the active segment).
    create_topic(
        &b,
        "old",
        1,
        &[("segment.bytes", "200"), ("retention.ms", "60000")],
    );
    create_topic(&b, TOPIC, 1, &[]);
    let (p, _) = producer(&b, &[("acks", "all"), ("linger.ms", "0")]);
    let hour_ago = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
        - 3_600_000;
    for i in 0..40 {
        let v = format!("old-{i}");
        p.send(
            rdkafka::producer::BaseRecord::<(), str>::to("old")
                .payload(&v)
                .timestamp(hour_ago + i),
        )
        .map_err(|(e, _)| e)
        .unwrap();
        // One batch each, so the tiny segments roll between them.
        flush(&p);
    }
    for i in 0..30 {
        send(&p, TOPIC, None, format!("live-{i}").as_bytes());
    }
    flush(&p);

    // The group committed offset 0 of "old" and 10 of TOPIC (standalone commits).
    let g: BaseConsumer =
        client_config(&b, &[("group.id", "slow"), ("enable.auto.commit", "false")])
            .create()
            .unwrap();
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset("old", 0, Offset::Offset(0))
        .unwrap();
    tpl.add_partition_offset(TOPIC, 0, Offset::Offset(10))
        .unwrap();
    g.commit(&tpl, CommitMode::Sync).unwrap();
    drop(g);

    // Lag of 20 on TOPIC; "old" is out of retention once its first segments go.
    let t0 = Instant::now();
    loop {
        let lag = metric_line(
            &broker,
            "strata_group_lag_records{group=\"slow\",topic=\"events\",partition=\"0\"}",
        );
        let gone = metric_line(&broker, "strata_group_out_of_retention_partitions");
        if lag == Some(20.0) && gone == Some(1.0) {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "lag {lag:?}, out of retention {gone:?}"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    let bytes = metric_line(
        &broker,
        "strata_group_lag_bytes{group=\"slow\",topic=\"events\",partition=\"0\"}",
    )
    .unwrap();
    assert!(
        (20.0 * 7.0..20.0 * 200.0).contains(&bytes),
        "20 records of 7 bytes plus framing: {bytes}"
    );
    let headroom = metric_line(
        &broker,
        "strata_group_retention_headroom_seconds{group=\"slow\",topic=\"events\",partition=\"0\"}",
    )
    .unwrap();
    assert!(
        headroom > 600_000.0 && headroom <= 604_800.0,
        "a stopped group on a 7-day topic has about 7 days left: {headroom}"
    );

    // Resuming, the group's consumer is told OFFSET_OUT_OF_RANGE for "old" and its
    // auto.offset.reset (earliest) applies: it reads from the new log start.
    let c: BaseConsumer = client_config(
        &b,
        &[
            ("group.id", "slow"),
            ("enable.auto.commit", "false"),
            ("auto.offset.reset", "earliest"),
        ],
    )
    .create()
    .unwrap();
    c.subscribe(&["old"]).unwrap();
    let t0 = Instant::now();
    let first = loop {
        if let Some(m) = c.poll(Duration::from_millis(200)) {
            break m.expect("a record, not an error").offset();
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "no record after the reset"
        );
    };
    assert!(
        first > 0,
        "resumed at the log start ({first}), past the deleted records"
    );

    // Once the group is deleted (DeleteGroups, as kafka-consumer-groups.sh --delete), its
    // lag series leave /metrics: a broker that sees many short-lived groups does not
    // export them forever.
    drop(c);
    let admin: rdkafka::admin::AdminClient<rdkafka::client::DefaultClientContext> =
        client_config(&b, &[]).create().unwrap();
    let t0 = Instant::now();
    loop {
        // The consumer's LeaveGroup may land a moment later: NON_EMPTY_GROUP until then.
        let r = futures::executor::block_on(
            admin.delete_groups(&["slow"], &rdkafka::admin::AdminOptions::new()),
        )
        .unwrap();
        match &r[0] {
            Ok(_) => break,
            Err(e) => assert!(
                t0.elapsed() < Duration::from_secs(30),
                "cannot delete the group: {e:?}"
            ),
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    let t0 = Instant::now();
    while broker.http_get("/metrics").contains("group=\"slow\"") {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the deleted group's lag series are still exported"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// Kills (-9) the broker coordinating `group`, the leader of its `__consumer_offsets`
/// partition; returns the bootstrap list of the brokers left.
fn kill_coordinator(c: &mut common::cluster::Cluster, group: &str) -> String {
    let offsets =
        common::cluster::metadata(&c.bootstrap(), "__consumer_offsets").expect("offsets topic");
    let index = strata_group::partition_for(group, offsets.len() as i32);
    let coordinator = offsets[index as usize].0;
    eprintln!("kill -9 broker {coordinator}, the coordinator of group {group}");
    c.broker(coordinator).kill9();
    c.nodes
        .iter()
        .filter(|n| n.id != coordinator)
        .map(|n| n.kafka.clone())
        .collect::<Vec<_>>()
        .join(",")
}

#[test]
fn committed_offsets_survive_the_loss_of_the_coordinator_broker() {
    use common::cluster::Cluster;
    let mut c = Cluster::start(3, 3, &[]);
    let b = c.bootstrap();
    common::kafka::create_topic_rf(&b, TOPIC, PARTITIONS, 3, &[("min.insync.replicas", "2")]);
    produce(&b, 0, 300);
    let g = consumer(&b, "survivor", &[]);
    let mut got = Vec::new();
    poll_until(&[&g], &mut got, "all 300 records", |_, n| n >= 300);
    commit(&g);
    drop(g);

    let b2 = kill_coordinator(&mut c, "survivor");
    // The group resumes on the new coordinator exactly after its commit.
    produce(&b2, 300, 30);
    let g = consumer(&b2, "survivor", &[]);
    let mut after = Vec::new();
    poll_until(&[&g], &mut after, "the 30 new records", |_, n| n >= 30);
    for _ in 0..5 {
        poll_one(&g, 0, &mut after, Duration::from_millis(200));
    }
    // A rebalance on the new coordinator (the group rejoins) may deliver a record twice
    // at the same offset: at least once, as Kafka's. Each offset counts once.
    let distinct: BTreeMap<(i32, i64), &str> =
        after.iter().map(|x| ((x.1, x.2), x.3.as_str())).collect();
    let mut values: Vec<usize> = distinct.values().map(|v| v[1..].parse().unwrap()).collect();
    values.sort();
    assert_eq!(
        values,
        (300..330).collect::<Vec<_>>(),
        "resumed exactly after the commit"
    );
}

#[test]
fn the_offsets_log_is_compacted_and_reloads_the_latest_commits() {
    let dir = tempfile::tempdir().unwrap();
    let mut broker = Broker::start(
        dir.path(),
        &[
            "--offsets-topic-segment-bytes",
            "1MiB",
            "--log-cleaner-backoff",
            "200ms",
            "--log-cleaner-io-max-bytes-per-second",
            "0",
        ],
    );
    let b = broker.kafka.clone();
    create_topic(&b, TOPIC, PARTITIONS, &[]);
    let c: BaseConsumer =
        client_config(&b, &[("group.id", "ckpt"), ("enable.auto.commit", "false")])
            .create()
            .unwrap();
    // 5000 commits of 6 partitions each: far more records than live offsets (6), over
    // more than one 1 MiB segment.
    for i in 1..=5_000i64 {
        let mut tpl = TopicPartitionList::new();
        for p in 0..PARTITIONS {
            tpl.add_partition_offset(TOPIC, p, Offset::Offset(i * 10 + i64::from(p)))
                .unwrap();
        }
        c.commit(&tpl, CommitMode::Sync).expect("commit");
    }
    drop(c);
    // The cleaner compacts the offsets partition's sealed segments down to the latest
    // commit of each partition.
    let index = strata_group::partition_for("ckpt", 16).to_string();
    let series = |name: &str| {
        let want = format!("partition=\"{index}\"");
        broker.http_get("/metrics").lines().find_map(|l| {
            let rest = l.strip_prefix(name)?.strip_prefix('{')?;
            (rest.contains("topic=\"__consumer_offsets\"") && rest.contains(&want))
                .then(|| l.rsplit(' ').next()?.parse::<f64>().ok())?
        })
    };
    let t0 = Instant::now();
    loop {
        if series("strata_log_cleaner_reclaimed_bytes_total").is_some_and(|r| r > 900_000.0) {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "the offsets partition was not compacted: {:?} bytes reclaimed",
            series("strata_log_cleaner_reclaimed_bytes_total")
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    assert!(series("strata_log_cleaner_cleaned_offset").is_some_and(|o| o > 0.0));

    // A restart reloads the compacted log: the latest commit of every partition.
    broker.stop();
    broker.restart();
    let committed = committed_of(&broker.kafka, "ckpt");
    assert_eq!(
        committed,
        (0..PARTITIONS)
            .map(|p| 50_000 + i64::from(p))
            .collect::<Vec<_>>()
    );
}

/// The committed offsets of `group` on every partition of TOPIC (negative: none).
fn committed_of(bootstrap: &str, group: &str) -> Vec<i64> {
    let c: BaseConsumer = client_config(bootstrap, &[("group.id", group)])
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    for p in 0..PARTITIONS {
        tpl.add_partition(TOPIC, p);
    }
    c.committed_offsets(tpl, Duration::from_secs(20))
        .expect("offset fetch")
        .elements()
        .iter()
        .map(|e| e.offset().to_raw().unwrap_or(-1))
        .collect()
}

/// KIP-211: an empty group's offsets, and standalone commits, expire after
/// --offsets-retention; a group with a member keeps its commit however old, through a
/// coordinator reload too.
#[test]
fn offsets_expire_only_for_groups_empty_longer_than_the_retention() {
    let dir = tempfile::tempdir().unwrap();
    let mut broker = Broker::start(
        dir.path(),
        &[
            "--offsets-retention",
            "3s",
            "--offsets-retention-check-interval",
            "300ms",
        ],
    );
    let b = broker.kafka.clone();
    create_topic(&b, TOPIC, PARTITIONS, &[]);
    produce(&b, 0, 60);
    // "active" and "gone" each read everything and commit; "gone" then leaves.
    let active = consumer(&b, "active", &[]);
    let gone = consumer(&b, "gone", &[]);
    let mut got = Vec::new();
    poll_until(
        &[&active, &gone],
        &mut got,
        "both groups read everything",
        |_, n| n >= 120,
    );
    commit(&active);
    commit(&gone);
    drop(gone);
    // A standalone commit (assign(), generation -1).
    let solo: BaseConsumer = client_config(&b, &[("group.id", "solo")]).create().unwrap();
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(TOPIC, 0, Offset::Offset(3))
        .unwrap();
    solo.commit(&tpl, CommitMode::Sync)
        .expect("standalone commit");
    drop(solo);
    let live = committed_of(&b, "active");
    assert_eq!(live.iter().sum::<i64>(), 60, "{live:?}");

    // "active" keeps polling (its member heartbeats) while the others expire.
    let t0 = Instant::now();
    loop {
        while poll_one(&active, 0, &mut got, Duration::from_millis(50)) {}
        let gone_left = committed_of(&b, "gone");
        let solo_left = committed_of(&b, "solo");
        if gone_left.iter().all(|&o| o < 0) && solo_left.iter().all(|&o| o < 0) {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "offsets did not expire: gone {gone_left:?}, solo {solo_left:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // The active group's commit is as old as the expired ones, and stays.
    assert_eq!(committed_of(&b, "active"), live);

    // A coordinator reload (restart) replays the tombstones and the live commit.
    broker.stop();
    broker.restart();
    let b = broker.kafka.clone();
    assert_eq!(committed_of(&b, "active"), live);
    assert!(committed_of(&b, "gone").iter().all(|&o| o < 0));
    drop(active);
}

/// The broker coordinating a group dies (kill -9): the members carry on with the same
/// generation and assignment on the new coordinator, without a rebalance, and read what
/// is produced after, because the coordinator writes each Stable generation's
/// membership to `__consumer_offsets` as Kafka's does.
#[test]
fn members_carry_on_without_a_rebalance_when_the_coordinator_broker_dies() {
    use common::cluster::Cluster;
    let mut c = Cluster::start(3, 3, &[]);
    let b = c.bootstrap();
    common::kafka::create_topic_rf(&b, TOPIC, PARTITIONS, 3, &[("min.insync.replicas", "2")]);
    produce(&b, 0, 100);
    let rebalances = Rebalances::default();
    let g: BaseConsumer<Rebalances> = client_config(
        &b,
        &[
            ("group.id", "carry-on"),
            ("enable.auto.commit", "false"),
            ("auto.offset.reset", "earliest"),
            ("session.timeout.ms", "15000"),
            ("heartbeat.interval.ms", "500"),
        ],
    )
    .create_with_context(rebalances.clone())
    .expect("consumer");
    g.subscribe(&[TOPIC]).expect("subscribe");
    let read = |want: usize, what: &str, got: &mut BTreeSet<String>| {
        let t0 = Instant::now();
        while got.len() < want {
            assert!(
                t0.elapsed() < Duration::from_secs(60),
                "{what}: read {} of {want}",
                got.len()
            );
            if let Some(Ok(m)) = g.poll(Duration::from_millis(200)) {
                got.insert(String::from_utf8_lossy(m.payload().unwrap_or_default()).into());
            }
        }
    };
    let mut before = BTreeSet::new();
    read(100, "before the kill", &mut before);
    assert_eq!(rebalances.0.load(std::sync::atomic::Ordering::SeqCst), 1);
    let assignment = assigned_ctx(&g);
    assert_eq!(assignment.len(), PARTITIONS as usize);
    // The coordinator writes the Stable generation within its 100 ms tick.
    for _ in 0..10 {
        g.poll(Duration::from_millis(100));
    }

    let b2 = kill_coordinator(&mut c, "carry-on");
    produce(&b2, 100, 30);
    let mut after = BTreeSet::new();
    read(30, "after the kill", &mut after);
    // A few more seconds of heartbeats against the new coordinator.
    for _ in 0..20 {
        if let Some(Ok(m)) = g.poll(Duration::from_millis(100)) {
            after.insert(String::from_utf8_lossy(m.payload().unwrap_or_default()).into());
        }
    }
    let want: BTreeSet<String> = (100..130).map(|i| format!("v{i}")).collect();
    assert_eq!(after, want, "exactly the records produced after the kill");
    assert_eq!(
        rebalances.0.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "no rebalance on the coordinator move"
    );
    assert_eq!(assigned_ctx(&g), assignment);
}

/// A closed consumer's static membership (no LeaveGroup: KIP-345) ends with its
/// session: DeleteGroups right after the session timeout finds the group empty and
/// deletes it, as Kafka does, rather than NON_EMPTY_GROUP until some later sweep.
#[test]
fn a_static_members_group_can_be_deleted_as_soon_as_its_session_expires() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), &[]);
    create_topic(&broker.kafka, TOPIC, PARTITIONS, &[]);
    produce(&broker.kafka, 0, 60);
    let c = static_member(&broker.kafka, "static-1", Rebalances::default());
    let deadline = Instant::now() + Duration::from_secs(30);
    while assigned_ctx(&c).is_empty() {
        assert!(Instant::now() < deadline, "never assigned");
        let _ = c.poll(Duration::from_millis(200));
    }
    drop(c);
    let admin = common::kafka::admin(&broker.kafka);
    let opts = rdkafka::admin::AdminOptions::new();
    // Within the session the member is still there.
    let r = futures::executor::block_on(admin.delete_groups(&["static"], &opts)).unwrap();
    assert!(
        matches!(
            &r[0],
            Err((_, rdkafka::types::RDKafkaErrorCode::NonEmptyGroup))
        ),
        "{r:?}"
    );
    // Session (10 s) over, with a second of slack for the client's clock.
    std::thread::sleep(Duration::from_millis(11_000));
    let r = futures::executor::block_on(admin.delete_groups(&["static"], &opts)).unwrap();
    assert!(matches!(&r[0], Ok(g) if g == "static"), "{r:?}");
}

/// Admin behaviour as Kafka's, through kafka-python's admin client (an implementation
/// independent of librdkafka): a group whose members joined as consumers lists as a
/// `consumer` group once they have left (not as a "simple" group with an empty protocol
/// type), and committing offsets for a partition the cluster lacks answers
/// UNKNOWN_TOPIC_OR_PARTITION for it while the rest of the commit goes through.
#[test]
fn groups_list_with_their_type_and_commits_to_missing_partitions_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), &[]);
    create_topic(&broker.kafka, TOPIC, PARTITIONS, &[]);
    produce(&broker.kafka, 0, 12);
    let v = common::python_json("admin_groups.py", &[&broker.kafka, TOPIC]);
    assert_eq!(v["groups"]["listed"], "consumer", "{v}");
    assert_eq!(v["commit"][format!("{TOPIC}/0")], "NoError", "{v}");
    assert_eq!(
        v["commit"][format!("{TOPIC}/99")],
        "UnknownTopicOrPartitionError",
        "{v}"
    );
    assert_eq!(
        v["commit"]["missing/0"], "UnknownTopicOrPartitionError",
        "{v}"
    );
    // The partition that exists was committed; the missing topic was not created.
    assert_eq!(committed_of(&broker.kafka, "listed")[0], 1);
    let c: BaseConsumer = client_config(&broker.kafka, &[]).create().unwrap();
    let md = c.fetch_metadata(None, Duration::from_secs(10)).unwrap();
    assert!(md.topics().iter().all(|t| t.name() != "missing"));
}
