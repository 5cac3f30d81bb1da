//! Random sequences of join/sync/heartbeat/leave/tick from a few members, checking the
//! invariants clients rely on.

mod common;
use common::C;
use std::collections::{BTreeMap, HashMap};

use bytes::Bytes;
use proptest::prelude::*;
use strata_group::*;
use strata_proto::ErrorCode;

const G: &str = "g";
const CLIENTS: usize = 3;

#[derive(Clone, Debug)]
enum Op {
    Join {
        client: usize,
        require_known: bool,
        alt_protocol: bool,
    },
    Sync {
        client: usize,
    },
    Heartbeat {
        client: usize,
    },
    Leave {
        client: usize,
    },
    Restart {
        client: usize,
    },
    Tick {
        advance: i64,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..CLIENTS, any::<bool>(), prop::bool::weighted(0.15)).prop_map(|(client, require_known, alt_protocol)| Op::Join { client, require_known, alt_protocol }),
        3 => (0..CLIENTS).prop_map(|client| Op::Sync { client }),
        2 => (0..CLIENTS).prop_map(|client| Op::Heartbeat { client }),
        1 => (0..CLIENTS).prop_map(|client| Op::Leave { client }),
        1 => (0..CLIENTS).prop_map(|client| Op::Restart { client }),
        3 => (0i64..16_000).prop_map(|advance| Op::Tick { advance }),
    ]
}

#[derive(Default, Clone, Debug)]
struct Client {
    member_id: String,
    generation: i32,
    leader: String,
    members: Vec<String>,
}

/// Client 2 is static (KIP-345).
fn instance(client: usize) -> Option<String> {
    (client == 2).then(|| "static-2".to_string())
}

#[derive(PartialEq, Eq, Debug, Clone, Copy)]
enum Kind {
    Join,
    Sync,
}

struct World {
    c: C,
    now: i64,
    next_ticket: u64,
    clients: Vec<Client>,
    outstanding: HashMap<u64, (Kind, usize)>,
    answered: HashMap<u64, ()>,
    leaders: BTreeMap<i32, String>,
    max_generation: i32,
}

impl World {
    fn ticket(&mut self, kind: Kind, client: usize) -> u64 {
        self.next_ticket += 1;
        self.outstanding.insert(self.next_ticket, (kind, client));
        self.next_ticket
    }

    fn on_join(&mut self, client: usize, r: &JoinResponse) {
        let cl = &mut self.clients[client];
        match r.error {
            ErrorCode::None => {
                if let Some(prev) = self.leaders.insert(r.generation_id, r.leader.clone()) {
                    // A static member replaced without a rebalance is told the pre-replacement
                    // leader, so compare only for non-empty, freshly completed generations.
                    if !r.members.is_empty() {
                        assert_eq!(
                            prev, r.leader,
                            "two leaders for generation {}",
                            r.generation_id
                        );
                    }
                }
                cl.member_id = r.member_id.clone();
                cl.generation = r.generation_id;
                cl.leader = r.leader.clone();
                cl.members = r.members.iter().map(|m| m.member_id.clone()).collect();
            }
            ErrorCode::MemberIdRequired => cl.member_id = r.member_id.clone(),
            ErrorCode::UnknownMemberId | ErrorCode::FencedInstanceId => *cl = Client::default(),
            _ => {}
        }
    }

    fn drain(&mut self) {
        for comp in self.c.take_completions() {
            let t = comp.ticket();
            assert!(
                self.answered.insert(t, ()).is_none(),
                "ticket {t} answered twice"
            );
            let (kind, client) = self
                .outstanding
                .remove(&t)
                .unwrap_or_else(|| panic!("completion for unknown ticket {t}"));
            match comp {
                Completion::Join(_, r) => {
                    assert_eq!(kind, Kind::Join);
                    self.on_join(client, &r);
                }
                Completion::Sync(_, _) => assert_eq!(kind, Kind::Sync),
            }
        }
    }

    fn immediate(&mut self, t: u64) {
        self.outstanding.remove(&t);
        self.answered.insert(t, ());
    }

    fn check(&mut self) {
        self.c
            .check_invariants()
            .unwrap_or_else(|e| panic!("invariant: {e}"));
        if let Some(d) = self.c.describe(G) {
            assert!(
                d.generation_id >= self.max_generation,
                "generation went backwards"
            );
            self.max_generation = d.generation_id;
            if d.state == "Stable" {
                assert!(d.leader.is_some());
            }
        }
    }

    fn apply(&mut self, op: Op) {
        match op {
            Op::Join {
                client,
                require_known,
                alt_protocol,
            } => {
                let t = self.ticket(Kind::Join, client);
                let protocols = if alt_protocol {
                    vec![("sticky".to_string(), Bytes::from_static(b"s"))]
                } else {
                    vec![
                        ("range".to_string(), Bytes::from_static(b"r")),
                        ("sticky".to_string(), Bytes::from_static(b"s")),
                    ]
                };
                let req = JoinGroup {
                    group_id: G.into(),
                    member_id: self.clients[client].member_id.clone(),
                    group_instance_id: instance(client),
                    protocol_type: "consumer".into(),
                    protocols,
                    session_timeout_ms: 10_000,
                    rebalance_timeout_ms: 20_000,
                    client_id: format!("c{client}"),
                    client_host: "h".into(),
                    require_known_member_id: require_known,
                };
                if let Some(r) = self.c.join(self.now, t, req) {
                    self.immediate(t);
                    self.on_join(client, &r);
                }
            }
            Op::Sync { client } => {
                let cl = self.clients[client].clone();
                if cl.member_id.is_empty() {
                    return;
                }
                let assignments = if cl.leader == cl.member_id {
                    cl.members
                        .iter()
                        .map(|m| (m.clone(), Bytes::from(m.clone().into_bytes())))
                        .collect()
                } else {
                    Vec::new()
                };
                let t = self.ticket(Kind::Sync, client);
                let req = SyncGroup {
                    group_id: G.into(),
                    generation_id: cl.generation,
                    member_id: cl.member_id.clone(),
                    group_instance_id: instance(client),
                    protocol_type: None,
                    protocol_name: None,
                    assignments,
                };
                if let Some(r) = self.c.sync(self.now, t, req) {
                    self.immediate(t);
                    if matches!(
                        r.error,
                        ErrorCode::UnknownMemberId | ErrorCode::FencedInstanceId
                    ) {
                        self.clients[client] = Client::default();
                    }
                }
            }
            Op::Heartbeat { client } => {
                let cl = self.clients[client].clone();
                let e = self.c.heartbeat(
                    self.now,
                    G,
                    cl.generation,
                    &cl.member_id,
                    instance(client).as_deref(),
                );
                if matches!(e, ErrorCode::UnknownMemberId | ErrorCode::FencedInstanceId) {
                    self.clients[client] = Client::default();
                }
            }
            Op::Leave { client } => {
                let cl = std::mem::take(&mut self.clients[client]);
                self.c
                    .leave(self.now, G, vec![(cl.member_id, instance(client))]);
            }
            Op::Restart { client } => self.clients[client] = Client::default(),
            Op::Tick { advance } => {
                self.now += advance;
                self.c.tick(self.now);
            }
        }
        self.drain();
        self.check();
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn random_sessions_keep_invariants(ops in prop::collection::vec(op(), 1..80), delay in prop_oneof![Just(0i64), Just(3000i64)]) {
        let mut w = World {
            c: C::new(GroupConfig { initial_rebalance_delay_ms: delay, ..GroupConfig::default() }),
            now: 0,
            next_ticket: 0,
            clients: vec![Client::default(); CLIENTS],
            outstanding: HashMap::new(),
            answered: HashMap::new(),
            leaders: BTreeMap::new(),
            max_generation: 0,
        };
        for op in ops {
            w.apply(op);
        }
        // With no more requests, every parked request is answered within the timeouts.
        for _ in 0..20 {
            w.now += 10_000;
            w.c.tick(w.now);
            w.drain();
            w.check();
        }
        prop_assert!(w.outstanding.is_empty(), "unanswered tickets: {:?}", w.outstanding);
    }
}
