//! What only the raft leader does, sans-IO: broker liveness and preferred-leader
//! rebalancing. Events in (heartbeats, registrations, ticks with the time), commands out.
//!
//! Heartbeats are not logged: the leader keeps last-seen times in memory, as Kafka's
//! controller does (BrokerHeartbeatManager). A new leader starts every broker's session
//! afresh, so a leader change never fences a broker that was heartbeating to the old one.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use strata_proto::TopicId;

use crate::error::Rejection;
use crate::state::{ClusterMetadata, Command, ElectionType};
use crate::types::BrokerId;

/// Liveness and rebalancing settings.
#[derive(Clone, Debug)]
pub struct DutySettings {
    /// Fence a broker that has not heartbeated for this long (Kafka's
    /// broker.session.timeout.ms, 9 s).
    pub session_timeout: Duration,
    /// Move leadership back to the preferred replica once it has been eligible this long
    /// (Kafka's auto.leader.rebalance.enable with leader.imbalance.check.interval.seconds).
    /// `None` turns rebalancing off.
    pub rebalance_delay: Option<Duration>,
}

/// What the leader should do about a heartbeat.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeartbeatAction {
    /// Nothing: the broker is live.
    None,
    /// The broker is fenced and alive again: propose UnfenceBroker.
    Unfence { epoch: i64 },
}

/// The leader's in-memory liveness and rebalancing state.
#[derive(Debug)]
pub struct Duties {
    settings: DutySettings,
    /// When each broker was last heard from, and under which broker epoch: a session
    /// belongs to one incarnation, so a registration this map has not seen yet (applied
    /// through the log, or racing a tick between its apply and [`Duties::registered`])
    /// starts a fresh session rather than inheriting the old incarnation's silence.
    last_seen: BTreeMap<BrokerId, (i64, Instant)>,
    /// Partitions whose preferred leader is eligible but not leading, since when.
    imbalanced_since: BTreeMap<(TopicId, i32), Instant>,
}

impl Duties {
    pub fn new(settings: DutySettings) -> Self {
        Duties {
            settings,
            last_seen: BTreeMap::new(),
            imbalanced_since: BTreeMap::new(),
        }
    }

    pub fn settings(&self) -> &DutySettings {
        &self.settings
    }

    /// This node just became the leader. It cannot know when brokers last heartbeated
    /// (heartbeats are not replicated), so every broker gets half a session from now:
    /// live brokers heartbeat six times per session and find the new leader well
    /// within that, while a broker that died with the old leader (the common case: a
    /// killed node took its voter down too) is fenced half a session sooner than a
    /// full fresh session would allow (KRaft grants a full one).
    pub fn became_leader(&mut self, now: Instant, meta: &ClusterMetadata) {
        let start = now
            .checked_sub(self.settings.session_timeout / 2)
            .unwrap_or(now);
        self.last_seen = meta
            .brokers
            .values()
            .map(|b| (b.id, (b.epoch, start)))
            .collect();
        self.imbalanced_since.clear();
    }

    /// A broker registered at `epoch` (its session starts now).
    pub fn registered(&mut self, now: Instant, broker: BrokerId, epoch: i64) {
        self.last_seen.insert(broker, (epoch, now));
    }

    /// A heartbeat from `broker` at `epoch`.
    pub fn heartbeat(
        &mut self,
        now: Instant,
        meta: &ClusterMetadata,
        broker: BrokerId,
        epoch: i64,
    ) -> Result<HeartbeatAction, Rejection> {
        let b = meta
            .broker(broker)
            .ok_or(Rejection::UnknownBroker { broker })?;
        if b.epoch != epoch {
            return Err(Rejection::StaleBrokerEpoch {
                broker,
                current: b.epoch,
                requested: epoch,
            });
        }
        self.last_seen.insert(broker, (epoch, now));
        Ok(if b.fenced {
            HeartbeatAction::Unfence { epoch }
        } else {
            HeartbeatAction::None
        })
    }

    /// Periodic work: fence brokers whose session expired; elect preferred leaders that
    /// have been eligible for `rebalance_delay`.
    pub fn tick(&mut self, now: Instant, meta: &ClusterMetadata) -> Vec<Command> {
        let mut out = Vec::new();
        self.last_seen.retain(|b, _| meta.brokers.contains_key(b));
        let mut fencing = BTreeSet::new();
        for b in meta.brokers.values().filter(|b| !b.fenced) {
            // A registration this leader has not seen yet (another epoch) gets its
            // session from now.
            let seen = match self.last_seen.get(&b.id) {
                Some((epoch, at)) if *epoch == b.epoch => *at,
                _ => {
                    self.last_seen.insert(b.id, (b.epoch, now));
                    now
                }
            };
            if now.saturating_duration_since(seen) >= self.settings.session_timeout {
                fencing.insert(b.id);
                out.push(Command::FenceBroker {
                    broker: b.id,
                    epoch: b.epoch,
                });
            }
        }
        let Some(delay) = self.settings.rebalance_delay else {
            return out;
        };
        let mut still = BTreeMap::new();
        let mut elect = Vec::new();
        for (t, p) in meta.partitions() {
            let preferred = p.preferred_leader();
            let eligible = p.leader != preferred
                && p.isr.contains(&preferred)
                && meta.is_live(preferred)
                && !fencing.contains(&preferred);
            if !eligible {
                continue;
            }
            let key = (t.id, p.partition);
            let since = self.imbalanced_since.get(&key).copied().unwrap_or(now);
            if now.saturating_duration_since(since) >= delay {
                elect.push((t.name.clone(), p.partition));
            } else {
                still.insert(key, since);
            }
        }
        self.imbalanced_since = still;
        if !elect.is_empty() {
            out.push(Command::ElectLeaders {
                election: ElectionType::Preferred,
                partitions: elect,
            });
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{AlterPartitionRequest, CommandOutput, NewTopic};

    fn settings() -> DutySettings {
        DutySettings {
            session_timeout: Duration::from_secs(9),
            rebalance_delay: Some(Duration::from_secs(5)),
        }
    }

    fn cluster() -> ClusterMetadata {
        let mut m = ClusterMetadata::default();
        for b in 1..=3 {
            m.apply(
                &Command::RegisterBroker {
                    broker: b,
                    host: "h".into(),
                    port: 1,
                    rack: None,
                    listeners: vec![],
                },
                b as u64,
            )
            .unwrap();
        }
        m.apply(
            &Command::CreateTopic(NewTopic {
                id: TopicId::random(),
                name: "t".into(),
                configs: Default::default(),
                assignment: vec![vec![1, 2, 3], vec![2, 3, 1]],
                storage_cluster_id: None,
                initial_leader_epoch: 0,
            }),
            4,
        )
        .unwrap();
        m
    }

    #[test]
    fn a_silent_broker_is_fenced_after_the_session_timeout() {
        let mut m = cluster();
        let mut d = Duties::new(settings());
        let t0 = Instant::now();
        d.became_leader(t0, &m);
        // Half a session after the takeover.
        assert!(d.tick(t0 + Duration::from_secs(4), &m).is_empty());
        for b in [1, 2] {
            let e = m.broker(b).unwrap().epoch;
            assert_eq!(
                d.heartbeat(t0 + Duration::from_secs(4), &m, b, e),
                Ok(HeartbeatAction::None)
            );
        }
        let cmds = d.tick(t0 + Duration::from_millis(4_500), &m);
        assert_eq!(
            cmds,
            vec![Command::FenceBroker {
                broker: 3,
                epoch: 3
            }]
        );
        m.apply(&cmds[0], 10).unwrap();
        // Fenced brokers are not fenced again; a full session after a heartbeat, the
        // others are.
        assert!(d.tick(t0 + Duration::from_secs(10), &m).is_empty());
        assert_eq!(d.tick(t0 + Duration::from_secs(13), &m).len(), 2);
        // A heartbeat from the fenced broker unfences it; a stale epoch is refused.
        assert!(matches!(
            d.heartbeat(t0 + Duration::from_secs(11), &m, 3, 2),
            Err(Rejection::StaleBrokerEpoch { .. })
        ));
        assert!(matches!(
            d.heartbeat(t0, &m, 7, 1),
            Err(Rejection::UnknownBroker { broker: 7 })
        ));
        assert_eq!(
            d.heartbeat(t0 + Duration::from_secs(11), &m, 3, 3),
            Ok(HeartbeatAction::Unfence { epoch: 3 })
        );
    }

    #[test]
    fn a_new_leader_gives_every_broker_half_a_session() {
        let m = cluster();
        let mut d = Duties::new(settings());
        let t0 = Instant::now();
        d.became_leader(t0, &m);
        assert_eq!(d.tick(t0 + Duration::from_secs(30), &m).len(), 3);
        d.became_leader(t0 + Duration::from_secs(30), &m);
        assert!(d.tick(t0 + Duration::from_secs(34), &m).is_empty());
        assert_eq!(d.tick(t0 + Duration::from_millis(34_500), &m).len(), 3);
    }

    /// A broker restarted after the leader took over: its new registration is applied
    /// (the state machine has the new epoch) before `registered` is called, and a tick
    /// can run in between. The old incarnation's silence must not fence the new one.
    #[test]
    fn a_new_incarnation_starts_a_fresh_session() {
        let mut m = cluster();
        let mut d = Duties::new(settings());
        let t0 = Instant::now();
        d.became_leader(t0, &m);
        let old = m.broker(3).unwrap().epoch;
        m.apply(
            &Command::RegisterBroker {
                broker: 3,
                host: "h".into(),
                port: 1,
                rack: None,
                listeners: vec![],
            },
            30,
        )
        .unwrap();
        let new = m.broker(3).unwrap().epoch;
        assert_ne!(old, new);
        for b in [1, 2] {
            let e = m.broker(b).unwrap().epoch;
            d.heartbeat(t0 + Duration::from_secs(4), &m, b, e).unwrap();
        }
        // The old session would have run out at 4.5 s; the new one started at the
        // first tick that saw it (5 s here).
        assert!(d.tick(t0 + Duration::from_secs(5), &m).is_empty());
        d.registered(t0 + Duration::from_secs(5), 3, new);
        assert_eq!(d.tick(t0 + Duration::from_secs(13), &m).len(), 2);
        assert_eq!(
            d.tick(t0 + Duration::from_secs(14), &m),
            vec![
                Command::FenceBroker {
                    broker: 1,
                    epoch: m.broker(1).unwrap().epoch
                },
                Command::FenceBroker {
                    broker: 2,
                    epoch: m.broker(2).unwrap().epoch
                },
                Command::FenceBroker {
                    broker: 3,
                    epoch: new
                }
            ]
        );
    }

    #[test]
    fn preferred_leaders_come_back_after_the_delay() {
        let mut m = cluster();
        let mut d = Duties::new(settings());
        let t0 = Instant::now();
        d.became_leader(t0, &m);
        let e1 = m.broker(1).unwrap().epoch;
        m.apply(
            &Command::FenceBroker {
                broker: 1,
                epoch: e1,
            },
            20,
        )
        .unwrap();
        assert_eq!(m.partition("t", 0).unwrap().leader, 2);
        m.apply(
            &Command::UnfenceBroker {
                broker: 1,
                epoch: e1,
            },
            21,
        )
        .unwrap();
        // Not in the ISR yet: nothing to do, however long.
        assert!(d.tick(t0 + Duration::from_secs(1), &m).is_empty());
        let p = m.partition("t", 0).unwrap().clone();
        let out = m
            .apply(
                &Command::AlterPartition(AlterPartitionRequest {
                    broker: 2,
                    broker_epoch: m.broker(2).unwrap().epoch,
                    topic_id: m.topic("t").unwrap().id,
                    partition: 0,
                    leader_epoch: p.leader_epoch,
                    partition_epoch: p.partition_epoch,
                    new_isr: vec![2, 3, 1],
                }),
                22,
            )
            .unwrap();
        assert!(matches!(out, CommandOutput::Partition(_)));
        let t = t0 + Duration::from_secs(2);
        assert!(d.tick(t, &m).is_empty(), "eligible now, but the delay runs");
        let heartbeat_all = |d: &mut Duties, at| {
            for b in 1..=3 {
                let e = m.broker(b).unwrap().epoch;
                d.heartbeat(at, &m, b, e).unwrap();
            }
        };
        heartbeat_all(&mut d, t + Duration::from_secs(4));
        assert!(d.tick(t + Duration::from_secs(4), &m).is_empty());
        let cmds = d.tick(t + Duration::from_secs(5), &m);
        assert_eq!(
            cmds,
            vec![Command::ElectLeaders {
                election: ElectionType::Preferred,
                partitions: vec![("t".into(), 0)]
            }]
        );
    }
}
