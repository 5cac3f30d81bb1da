//! Deterministic simulation of replication: three brokers, the controller and a
//! producer, driven by a seeded discrete-event loop with crashes, restarts, network
//! partitions, delayed and reordered messages and paused processes, with the safety
//! invariants checked after every event.
//!
//! # What runs
//!
//! Everything that decides is the real code; only the IO around it is simulated.
//!
//! * Each broker hosts one replica of every partition of one topic (1-3 partitions,
//!   replication factor 3, min.insync.replicas=2): the real
//!   [`strata_replica::PartitionReplica`] over a model log (one record per offset, packed
//!   with the leader epoch it was written in, and the real
//!   [`strata_log::LeaderEpochCache`]). The glue around it mirrors hot/broker:
//!   `Partition::apply_state` / `execute` (`Truncate` also at the log end), the
//!   follower fetcher (one per leader broker, fetching with the log end and the latest
//!   epoch; diverging epoch -> `on_epoch_end_offset`; OFFSET_OUT_OF_RANGE ->
//!   `on_fetch_out_of_range` with the leader's start and high-water mark), the leader's
//!   `check_follower` with long polling (a fetch without data waits for the log end to
//!   move, re-running the checks each time), produce (acks=all: min.insync check before
//!   the append, then parked until `check_enough_replicas_reach_offset` says done,
//!   woken by the high-water mark and every 100 ms, failing on timeout), leader ticks,
//!   `send_alter_partitions` (the broker epoch of the moment, RPC retries within a
//!   deadline, `AlterPartitionError::from(error code)`, a metadata refresh after
//!   success), heartbeats (re-registering when refused or fenced), the metadata long
//!   poll (newer versions only, unless a seed turns on unordered metadata, which also
//!   applies stale copies and leaves it to the replica to ignore them) and the
//!   high-water-mark checkpoint a restart starts from.
//! * The controller is one logical node (the raft quorum is tested elsewhere) applying
//!   the real [`strata_controller::state::ClusterMetadata::apply`] in log order
//!   (RegisterBroker with a new broker epoch, Fence/Unfence, CreateTopic, AlterPartition
//!   with KIP-497 validation, ElectLeaders) and running the real
//!   [`strata_controller::duties::Duties`] (heartbeats, fencing after the session
//!   timeout, preferred-leader rebalancing) on a simulated clock (a fixed `Instant` plus
//!   simulated milliseconds). Unclean election stays off.
//! * A producer sends batches of 1-3 records (85% acks=all, else acks=1) to the leader
//!   in its (delayed) copy of the metadata, sometimes to a random broker.
//!
//! Every message takes 0-20 ms, a few percent of them up to 0.8 s more, so they
//! reorder. Timeouts are scaled down from the real ones (heartbeat 300 ms, session
//! timeout 0.8-3 s, replica.lag.time.max.ms 0.5-4 s, fetch max wait 200 ms).
//!
//! # Faults
//!
//! Every 50 ms to 1.5 s (per seed) a fault may strike: a broker crashes (its memory, its
//! pending requests and everything in flight to it are lost; its log is durable; it
//! restarts later from its last high-water-mark checkpoint, which may be stale, and
//! registers again with a new broker epoch, which takes it out of every ISR and moves
//! its leaderships); a broker is cut off from everyone, from the controller only, from
//! one other broker, or one direction of one link is cut (then healed); a broker is
//! paused like SIGSTOP (it does nothing while messages to it queue up, then catches up
//! on everything at once: a leader fenced meanwhile wakes up as a zombie); the
//! controller fails over (what was in flight to it is lost, every broker's session
//! starts afresh); an operator runs a preferred-leader election (ElectLeaders). Not
//! modelled: losing unflushed data in a power loss (KIP-966's "last replica standing",
//! a documented limitation), retention (the log start never moves), reassignment,
//! idempotent-producer retries, unclean elections.
//!
//! # Invariants, after every event
//!
//! 1. No record acknowledged with acks=all is lost: the acknowledging leader held it at
//!    the acknowledged offset, and it stays in the log of the current leader (the
//!    controller's, once it acts as leader of the current epoch) and of every replica
//!    whose high-water mark covers it. More generally, the *committed log* (everything
//!    ever below any replica's high-water mark) only grows: every replica's log agrees
//!    with it below its high-water mark, and the current leader holds all of it.
//! 2. No offset holds two different records on two replicas below both their
//!    high-water marks (implied by 1's committed log; checked through it).
//! 3. A replica's high-water mark never moves back and never passes its log end, nor
//!    does the broker's copy of it (what consumers read below and the checkpoint saves;
//!    it is never behind the replica's, and item 1 holds for it too); a restarted
//!    replica starts from a checkpoint no higher than the committed log. (The mark a
//!    client sees *can* go back when leadership moves, as in Kafka: a new leader's mark
//!    may lag the old one's. What must not change is what was below any mark: item 1.)
//! 4. At most one broker leads a partition in a leader epoch (every (epoch, broker,
//!    incarnation) that ever acted as leader is recorded).
//! 5. No offset is acknowledged for two different records.
//! 6. A follower whose truncation completed (KIP-101/279) holds a prefix of its
//!    leader's log, if that leader still leads the epoch it answered in.
//!
//! Then everything heals (cuts removed, paused brokers resumed, crashed ones
//! restarted, no more produce) and the cluster must converge within 60 simulated
//! seconds: every replica has the leader's log, the ISR is every replica (controller
//! and leader agree), every high-water mark is the log end.
//!
//! # Running
//!
//! `simulate_many_seeds` runs 200 seeds as part of `cargo test` (a few seconds). The
//! long run (about 15 ms per seed):
//!
//! ```text
//! STRATA_SIM_SEEDS=20000 cargo test -p strata-replica --test simulation -- --ignored long_run
//! ```
//!
//! `STRATA_SIM_STEPS` sets the events per seed before healing (default 4000),
//! `STRATA_SIM_FIRST_SEED` where the seeds start, and `STRATA_SIM_SEED=n` replays one
//! seed (with `STRATA_SIM_TRACE=1` and `--nocapture`, printing what happened). A
//! failure names its seed, event and simulated time.

#![allow(clippy::unwrap_used)]

use std::cell::{Cell, RefCell};
use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, VecDeque};
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, Instant};

use strata_controller::Rejection;
use strata_controller::duties::{Duties, DutySettings, HeartbeatAction};
use strata_controller::state::{
    self as ctl, ClusterMetadata, CommandOutput, NewTopic, PartitionRecord,
};
use strata_log::LeaderEpochCache;
use strata_proto::{ErrorCode, TopicId};
use strata_replica::{
    AckStatus, AlterPartitionError, AlterPartitionRequest, Command, CommittedIsr, FetchDecision,
    FollowerFetch, LocalLog, PartitionReplica, PartitionState, ReplicaConfig, Role,
    TruncationDecision,
};

// ---------------------------------------------------------------------------------------
// Settings
// ---------------------------------------------------------------------------------------

const BROKERS: [i32; 3] = [1, 2, 3];
const MIN_INSYNC: usize = 2;
const TOPIC: &str = "sim";

/// The real defaults, scaled down so that much happens per simulated second.
const HEARTBEAT_MS: i64 = 300; // broker heartbeat_interval (1.5 s)
const LEADER_TICK_MS: i64 = 200; // leader_ticks (500 ms)
const CONTROLLER_TICK_MS: i64 = 100; // controller tick (250 ms)
const FETCH_MAX_WAIT_MS: i64 = 200; // replica fetch max_wait_ms (500 ms)
const FETCH_TIMEOUT_MS: i64 = 1_000; // replica fetch RPC timeout (10 s)
const FETCH_BACKOFF_MS: i64 = 100; // every partition refused / nothing to fetch
const FETCH_ERROR_BACKOFF_MS: i64 = 200; // the fetch failed
const RPC_TIMEOUT_MS: i64 = 500; // controller client rpc_timeout (12 s)
const REQUEST_TIMEOUT_MS: i64 = 1_500; // controller client request_timeout (30 s)
const ALTER_RESEND_MS: i64 = 100; // send_alter_partitions' loop
const ACK_POLL_MS: i64 = 100; // wait_for_replicas' look-again
const PRODUCE_TIMEOUT_MS: i64 = 2_000; // the produce request's timeout_ms
const POLL_WAIT_MS: i64 = 1_000; // metadata long poll (5 s)
const POLL_RETRY_MS: i64 = 200; // after a failed long poll
const RESTART_BACKOFF_MS: i64 = 500; // a broker whose registration failed exits; restarted
const SETTLE_LIMIT_MS: i64 = 60_000; // healed, the cluster must converge within this

/// What varies from seed to seed.
#[derive(Clone, Debug)]
struct Settings {
    partitions: usize,
    replica_lag_ms: i64,
    session_timeout_ms: i64,
    rebalance_ms: Option<i64>,
    checkpoint_ms: i64,
    /// Brokers apply metadata copies older than the one they have (the replica must
    /// ignore what is stale).
    unordered_metadata: bool,
    max_fetch_records: usize,
    produce_every_ms: (i64, i64),
    chaos_every_ms: (i64, i64),
    /// The chance (percent) that a message takes a long detour.
    slow_percent: u64,
}

impl Settings {
    fn random(rng: &mut Rng) -> Settings {
        Settings {
            partitions: rng.range(1, 3) as usize,
            replica_lag_ms: rng.pick(&[500, 1_500, 4_000]),
            session_timeout_ms: rng.pick(&[800, 1_500, 3_000]),
            rebalance_ms: rng.pick(&[None, Some(1_000), Some(4_000)]),
            checkpoint_ms: rng.pick(&[300, 1_000, 5_000]),
            unordered_metadata: rng.percent(25),
            max_fetch_records: rng.pick(&[2, 5, 50]),
            produce_every_ms: rng.pick(&[(5, 30), (20, 100)]),
            chaos_every_ms: rng.pick(&[(50, 300), (200, 600), (400, 1_500)]),
            slow_percent: rng.pick(&[0, 3, 10]),
        }
    }
}

// ---------------------------------------------------------------------------------------
// A seeded PRNG (splitmix64)
// ---------------------------------------------------------------------------------------

#[derive(Debug)]
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x5DEE_CE66_D1CE_4E5B)
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    /// Uniform in `lo..=hi`.
    fn range(&mut self, lo: i64, hi: i64) -> i64 {
        lo + self.below((hi - lo + 1) as u64) as i64
    }

    fn percent(&mut self, p: u64) -> bool {
        self.below(100) < p
    }

    fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len() as u64) as usize]
    }
}

// ---------------------------------------------------------------------------------------
// The model log
// ---------------------------------------------------------------------------------------

/// A record: the leader epoch it was appended in (high bits) and a unique id.
type Rec = u64;
const ID_BITS: u32 = 40;

fn rec(epoch: i32, id: u64) -> Rec {
    ((epoch as u64) << ID_BITS) | id
}

fn rec_epoch(r: Rec) -> i32 {
    (r >> ID_BITS) as i32
}

fn show(r: Rec) -> String {
    format!("{}@e{}", r & ((1 << ID_BITS) - 1), rec_epoch(r))
}

/// A durable log: one record per offset (the log start never moves), and the real
/// leader-epoch cache, kept as `strata_log::Log` keeps it.
#[derive(Clone, Debug, Default)]
struct ModelLog {
    recs: Vec<Rec>,
    epochs: LeaderEpochCache,
    /// The invariant checker's bookmark: `recs[..checked]` agreed with the committed
    /// log when it last looked. A truncation lowers it.
    checked: usize,
}

impl ModelLog {
    fn leo(&self) -> i64 {
        self.recs.len() as i64
    }

    /// `Log::append` (leader) and `Log::append_replicated` (follower): the epoch cache
    /// takes each batch's epoch at its first offset.
    fn append(&mut self, recs: &[Rec]) {
        for &r in recs {
            self.epochs.assign(rec_epoch(r), self.leo());
            self.recs.push(r);
        }
    }

    /// `Log::truncate_to`: the records at and above `offset` go, and the epoch cache's
    /// entries there (also at the log end).
    fn truncate(&mut self, offset: i64) {
        self.recs.truncate(offset as usize);
        self.epochs.truncate_from_end(offset);
        self.checked = self.checked.min(self.recs.len());
    }
}

impl LocalLog for ModelLog {
    fn log_start_offset(&self) -> i64 {
        0
    }
    fn log_end_offset(&self) -> i64 {
        self.leo()
    }
    fn latest_epoch(&self) -> Option<i32> {
        self.epochs.latest_epoch()
    }
    fn end_offset_for_epoch(&self, epoch: i32) -> Option<(i32, i64)> {
        self.epochs.end_offset_for(epoch, self.leo())
    }
}

// ---------------------------------------------------------------------------------------
// Messages, timers, events
// ---------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Node {
    Controller,
    Broker(i32),
    Client,
}

/// One partition of a follower's fetch request.
#[derive(Clone, Debug)]
struct FetchPart {
    p: usize,
    current_leader_epoch: i32,
    fetch_offset: i64,
    last_fetched_epoch: Option<i32>,
}

/// One partition of a fetch response.
#[derive(Clone, Debug)]
struct FetchPartResp {
    p: usize,
    error: ErrorCode,
    high_watermark: i64,
    log_start: i64,
    diverging: Option<(i32, i64)>,
    /// Records from `base` (the fetch offset).
    base: i64,
    records: Vec<Rec>,
    /// Not on the wire: the leader epoch the leader answered in, for invariant 6.
    answered_in: i32,
}

#[derive(Clone, Debug)]
enum Request {
    Register,
    Heartbeat { epoch: i64 },
    AlterPartition(ctl::AlterPartitionRequest),
    Poll { since: u64 },
}

#[derive(Clone, Debug)]
enum Reply {
    Registered {
        epoch: i64,
        md: Arc<ClusterMetadata>,
    },
    /// `Ok(fenced)`.
    Heartbeat(Result<bool, Rejection>),
    AlterPartition {
        result: Result<PartitionRecord, Rejection>,
        /// The refresh the broker does after a successful AlterPartition.
        md: Arc<ClusterMetadata>,
    },
    Metadata(Option<Arc<ClusterMetadata>>),
}

#[derive(Clone, Debug)]
enum Msg {
    Fetch {
        generation: u64,
        rpc: u64,
        parts: Vec<FetchPart>,
    },
    FetchResp {
        generation: u64,
        rpc: u64,
        parts: Vec<FetchPartResp>,
    },
    Produce {
        p: usize,
        acks_all: bool,
        ids: Vec<u64>,
    },
    Call {
        rpc: u64,
        req: Request,
    },
    Reply {
        rpc: u64,
        reply: Box<Reply>,
    },
    ClientMetadata(Arc<ClusterMetadata>),
}

impl Msg {
    fn describe(&self) -> String {
        match self {
            Msg::Fetch { parts, .. } => {
                let ps: Vec<String> = parts
                    .iter()
                    .map(|f| {
                        format!(
                            "p{} e{} off {} last {:?}",
                            f.p, f.current_leader_epoch, f.fetch_offset, f.last_fetched_epoch
                        )
                    })
                    .collect();
                format!("Fetch [{}]", ps.join("; "))
            }
            Msg::FetchResp { parts, .. } => {
                let ps: Vec<String> = parts
                    .iter()
                    .map(|r| {
                        format!(
                            "p{} {:?} hwm {} div {:?} {} recs from {} (e{})",
                            r.p,
                            r.error,
                            r.high_watermark,
                            r.diverging,
                            r.records.len(),
                            r.base,
                            r.answered_in
                        )
                    })
                    .collect();
                format!("FetchResp [{}]", ps.join("; "))
            }
            Msg::Produce { p, acks_all, ids } => {
                format!("Produce p{p} acks_all={acks_all} ids {ids:?}")
            }
            Msg::Call { rpc, req } => format!("Call#{rpc} {req:?}"),
            Msg::Reply { rpc, reply } => match &**reply {
                Reply::Registered { epoch, md } => {
                    format!("Reply#{rpc} registered epoch {epoch} (v{})", md.version)
                }
                Reply::Heartbeat(r) => format!("Reply#{rpc} heartbeat {r:?}"),
                Reply::AlterPartition { result, md } => {
                    format!("Reply#{rpc} AlterPartition {result:?} (v{})", md.version)
                }
                Reply::Metadata(md) => {
                    format!("Reply#{rpc} metadata {:?}", md.as_ref().map(|m| m.version))
                }
            },
            Msg::ClientMetadata(md) => format!("metadata v{}", md.version),
        }
    }
}

#[derive(Clone, Debug)]
enum Timer {
    Heartbeat,
    LeaderTick,
    Checkpoint,
    AckPoll,
    FetchSend {
        leader: i32,
        generation: u64,
    },
    FetchTimeout {
        leader: i32,
        generation: u64,
        rpc: u64,
    },
    ParkedFetchDeadline {
        id: u64,
    },
    RpcTimeout {
        rpc: u64,
    },
    AlterResend {
        p: usize,
        req: AlterPartitionRequest,
    },
    RegisterRetry,
    PollRetry,
    ControllerTick,
    PollDeadline {
        rpc: u64,
    },
    Produce,
}

#[derive(Clone, Debug)]
enum Event {
    Deliver {
        from: Node,
        from_inc: u64,
        to: Node,
        to_inc: u64,
        msg: Msg,
    },
    Timer {
        node: Node,
        inc: u64,
        timer: Timer,
    },
    Chaos,
    Heal {
        cut: u64,
    },
    Restart {
        broker: i32,
    },
    Resume {
        broker: i32,
    },
    ControllerUp,
}

/// The event queue's entries: earliest first, then in scheduling order.
#[derive(Debug)]
struct Scheduled {
    at: i64,
    seq: u64,
    event: Event,
}

impl PartialEq for Scheduled {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for Scheduled {}
impl PartialOrd for Scheduled {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Scheduled {
    fn cmp(&self, other: &Self) -> Ordering {
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

// ---------------------------------------------------------------------------------------
// What a node's handler hands back to the simulation
// ---------------------------------------------------------------------------------------

/// Records a leader acknowledged with acks=all.
#[derive(Debug)]
struct AckRecord {
    broker: i32,
    p: usize,
    first: i64,
    recs: Vec<Rec>,
    /// What the leader's log held at those offsets when it acknowledged.
    held: Vec<Rec>,
}

/// A follower completed a truncation against `leader`'s answer in `epoch`.
#[derive(Debug)]
struct PrefixCheck {
    follower: i32,
    leader: i32,
    p: usize,
    epoch: i32,
}

#[derive(Debug, Default, Clone)]
struct Stats {
    steps: u64,
    sim_ms: i64,
    settle_ms: i64,
    acked_all: u64,
    acked_one: u64,
    not_leader: u64,
    not_enough_replicas: u64,
    after_append: u64,
    ack_timeouts: u64,
    ack_lost_leadership: u64,
    crashes: u64,
    pauses: u64,
    cuts: u64,
    failovers: u64,
    registrations: u64,
    fencings: u64,
    elections: u64,
    admin_elections: u64,
    alter_ok: u64,
    alter_refused: u64,
    alter_timeouts: u64,
    diverging: u64,
    truncated_records: u64,
    out_of_range: u64,
    append_rejected: u64,
    stale_metadata: u64,
    max_leader_epoch: i32,
    committed: usize,
    /// A hash of the final logs (FNV-1a), to tell runs apart.
    digest: u64,
}

impl Stats {
    fn add(&mut self, o: &Stats) {
        self.steps += o.steps;
        self.sim_ms += o.sim_ms;
        self.settle_ms = self.settle_ms.max(o.settle_ms);
        self.acked_all += o.acked_all;
        self.acked_one += o.acked_one;
        self.not_leader += o.not_leader;
        self.not_enough_replicas += o.not_enough_replicas;
        self.after_append += o.after_append;
        self.ack_timeouts += o.ack_timeouts;
        self.ack_lost_leadership += o.ack_lost_leadership;
        self.crashes += o.crashes;
        self.pauses += o.pauses;
        self.cuts += o.cuts;
        self.failovers += o.failovers;
        self.registrations += o.registrations;
        self.fencings += o.fencings;
        self.elections += o.elections;
        self.admin_elections += o.admin_elections;
        self.alter_ok += o.alter_ok;
        self.alter_refused += o.alter_refused;
        self.alter_timeouts += o.alter_timeouts;
        self.diverging += o.diverging;
        self.truncated_records += o.truncated_records;
        self.out_of_range += o.out_of_range;
        self.append_rejected += o.append_rejected;
        self.stale_metadata += o.stale_metadata;
        self.max_leader_epoch = self.max_leader_epoch.max(o.max_leader_epoch);
        self.committed += o.committed;
        self.digest ^= o.digest;
    }
}

/// A handler's view of the world: the time, randomness, and where its output goes.
struct Ctx<'a> {
    now: i64,
    s: &'a Settings,
    rng: &'a mut Rng,
    ids: &'a mut u64,
    stats: &'a mut Stats,
    sends: Vec<(Node, Option<u64>, Msg)>,
    timers: Vec<(i64, Timer)>,
    acks: Vec<AckRecord>,
    prefix_checks: Vec<PrefixCheck>,
    /// Replicas (re)created on a broker: (partition, the high-water mark they start at).
    opened: Vec<(usize, i64)>,
}

impl Ctx<'_> {
    fn id(&mut self) -> u64 {
        *self.ids += 1;
        *self.ids
    }

    /// Sends to `to`: a reply goes to the incarnation that asked (`Some`), a request to
    /// whatever runs there now (`None`).
    fn send(&mut self, to: Node, to_inc: Option<u64>, msg: Msg) {
        self.sends.push((to, to_inc, msg));
    }

    fn timer(&mut self, after: i64, timer: Timer) {
        self.timers.push((after, timer));
    }

    fn note(&self, f: impl FnOnce() -> String) {
        trace(self.now, f);
    }
}

// ---------------------------------------------------------------------------------------
// Tracing and failure context (thread-local so that a panic anywhere can report them)
// ---------------------------------------------------------------------------------------

thread_local! {
    static TRACING: Cell<bool> = const { Cell::new(false) };
    static TRACE: RefCell<VecDeque<String>> = const { RefCell::new(VecDeque::new()) };
    /// (seed, step, simulated time) of the event being handled.
    static POSITION: Cell<(u64, u64, i64)> = const { Cell::new((0, 0, 0)) };
}

const TRACE_KEEP: usize = 200_000;

fn trace(now: i64, f: impl FnOnce() -> String) {
    if TRACING.get() {
        let line = format!("{now:>7} {}", f());
        TRACE.with_borrow_mut(|t| {
            if t.len() == TRACE_KEEP {
                t.pop_front();
            }
            t.push_back(line);
        });
    }
}

/// Fails the run ([`run_seed`] adds the seed, the event and the time).
fn fail(what: String) -> ! {
    panic!("{what}");
}

// ---------------------------------------------------------------------------------------
// Broker
// ---------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Down,
    /// Registering with the controller; not listening yet.
    Starting,
    Running,
}

/// A replica fetcher: one per leader broker this broker follows partitions of.
#[derive(Debug)]
struct Fetcher {
    generation: u64,
    in_flight: Option<u64>,
}

/// A follower fetch the leader holds until its log end moves or max_wait passes.
#[derive(Debug)]
struct ParkedFetch {
    id: u64,
    follower: i32,
    follower_inc: u64,
    generation: u64,
    rpc: u64,
    parts: Vec<FetchPart>,
}

/// A parked acks=all produce (the purgatory).
#[derive(Debug)]
struct PendingAck {
    p: usize,
    first: i64,
    recs: Vec<Rec>,
    deadline: i64,
    /// The leader epoch the batch was appended in.
    epoch: i32,
}

#[derive(Clone, Debug)]
enum CallKind {
    Register,
    Heartbeat,
    Alter {
        p: usize,
        req: AlterPartitionRequest,
    },
    Poll,
}

/// A call to the controller: the client resends it after each RPC timeout until the
/// deadline.
#[derive(Clone, Debug)]
struct Call {
    kind: CallKind,
    req: Request,
    deadline: i64,
}

/// What a broker process holds in memory (lost in a crash).
#[derive(Debug, Default)]
struct Volatile {
    epoch: i64,
    md: Option<Arc<ClusterMetadata>>,
    replicas: Vec<Option<PartitionReplica>>,
    /// `Partition::hwm`: the watch acks=all waits on and the checkpoint writes.
    hwm_watch: Vec<i64>,
    fetchers: BTreeMap<i32, Fetcher>,
    parked: Vec<ParkedFetch>,
    acks: Vec<PendingAck>,
    ack_poll_armed: bool,
    calls: BTreeMap<u64, Call>,
    /// The heartbeat loop is waiting for a heartbeat or a registration.
    heartbeat_busy: bool,
    leo_moved: BTreeSet<usize>,
    hwm_moved: BTreeSet<usize>,
}

#[derive(Debug)]
struct Broker {
    id: i32,
    /// Bumped by every crash: what was addressed to the old process is dropped.
    inc: u64,
    phase: Phase,
    paused: bool,
    stash: Vec<Event>,
    /// Durable.
    logs: Vec<ModelLog>,
    checkpoints: Vec<i64>,
    v: Volatile,
}

impl Broker {
    fn new(id: i32, partitions: usize) -> Broker {
        Broker {
            id,
            inc: 1,
            phase: Phase::Down,
            paused: false,
            stash: Vec::new(),
            logs: vec![ModelLog::default(); partitions],
            checkpoints: vec![0; partitions],
            v: Volatile::default(),
        }
    }

    fn partitions(&self) -> usize {
        self.logs.len()
    }

    fn replica(&self, p: usize) -> Option<&PartitionReplica> {
        self.v.replicas.get(p).and_then(Option::as_ref)
    }

    fn is_up(&self) -> bool {
        self.phase == Phase::Running
    }

    // --- life cycle -------------------------------------------------------------------

    fn crash(&mut self) {
        self.phase = Phase::Down;
        self.inc += 1;
        self.paused = false;
        self.stash.clear();
        self.v = Volatile::default();
    }

    /// The process starts (Broker::open): register, then open the replicas.
    fn start(&mut self, cx: &mut Ctx) {
        self.phase = Phase::Starting;
        self.v = Volatile::default();
        self.call(
            cx,
            CallKind::Register,
            Request::Register,
            REQUEST_TIMEOUT_MS,
        );
    }

    fn registered(&mut self, cx: &mut Ctx, epoch: i64, md: Arc<ClusterMetadata>) {
        cx.stats.registrations += 1;
        self.v.epoch = epoch;
        self.v.heartbeat_busy = false;
        if self.phase == Phase::Starting {
            self.phase = Phase::Running;
            let n = self.partitions();
            self.v.replicas = (0..n).map(|_| None).collect();
            self.v.hwm_watch = vec![0; n];
            cx.timer(HEARTBEAT_MS, Timer::Heartbeat);
            cx.timer(LEADER_TICK_MS, Timer::LeaderTick);
            cx.timer(cx.s.checkpoint_ms, Timer::Checkpoint);
            self.poll(cx);
        }
        cx.note(|| format!("b{} registered with epoch {epoch}", self.id));
        self.publish(cx, md);
    }

    // --- controller calls ---------------------------------------------------------------

    fn call(&mut self, cx: &mut Ctx, kind: CallKind, req: Request, within: i64) {
        let call = Call {
            kind,
            req,
            deadline: cx.now + within,
        };
        self.send_call(cx, call);
    }

    fn send_call(&mut self, cx: &mut Ctx, call: Call) {
        let rpc = cx.id();
        let timeout = match call.kind {
            CallKind::Poll => POLL_WAIT_MS + RPC_TIMEOUT_MS,
            _ => RPC_TIMEOUT_MS,
        };
        cx.send(
            Node::Controller,
            None,
            Msg::Call {
                rpc,
                req: call.req.clone(),
            },
        );
        cx.timer(timeout, Timer::RpcTimeout { rpc });
        self.v.calls.insert(rpc, call);
    }

    fn on_rpc_timeout(&mut self, cx: &mut Ctx, rpc: u64) {
        let Some(call) = self.v.calls.remove(&rpc) else {
            return;
        };
        if cx.now + RPC_TIMEOUT_MS <= call.deadline {
            // The client tries again (the first may have been applied: the controller
            // must cope with the duplicate).
            self.send_call(cx, call);
            return;
        }
        match call.kind {
            CallKind::Register if self.phase == Phase::Starting => {
                // Broker::open fails; the process exits and is restarted.
                cx.timer(RESTART_BACKOFF_MS, Timer::RegisterRetry);
            }
            CallKind::Register | CallKind::Heartbeat => self.v.heartbeat_busy = false,
            CallKind::Alter { p, req, .. } => {
                cx.stats.alter_timeouts += 1;
                // TimedOut -> REQUEST_TIMED_OUT -> retriable.
                self.on_alter_result(
                    cx,
                    p,
                    &req,
                    Err(AlterPartitionError::from(ErrorCode::RequestTimedOut)),
                    None,
                );
            }
            CallKind::Poll => cx.timer(POLL_RETRY_MS, Timer::PollRetry),
        }
    }

    fn on_reply(&mut self, cx: &mut Ctx, rpc: u64, reply: Reply) {
        // A late answer to a call that was resent or given up is dropped with its RPC.
        let Some(call) = self.v.calls.remove(&rpc) else {
            return;
        };
        match (call.kind, reply) {
            (CallKind::Register, Reply::Registered { epoch, md }) => self.registered(cx, epoch, md),
            (CallKind::Heartbeat, Reply::Heartbeat(r)) => match r {
                Ok(false) => self.v.heartbeat_busy = false,
                // Fenced after the heartbeat, or refused (stale epoch): register again.
                Ok(true) | Err(_) => {
                    cx.note(|| format!("b{} heartbeat answered {r:?}: registering again", self.id));
                    self.call(
                        cx,
                        CallKind::Register,
                        Request::Register,
                        REQUEST_TIMEOUT_MS,
                    );
                }
            },
            (CallKind::Alter { p, req, .. }, Reply::AlterPartition { result, md }) => {
                let result = match result {
                    Ok(rec) => Ok(CommittedIsr {
                        leader_epoch: rec.leader_epoch,
                        partition_epoch: rec.partition_epoch,
                        isr: rec.isr,
                    }),
                    Err(r) => Err(AlterPartitionError::from(r.error_code())),
                };
                self.on_alter_result(cx, p, &req, result, Some(md));
            }
            (CallKind::Poll, Reply::Metadata(md)) => {
                if let Some(md) = md {
                    self.publish(cx, md);
                }
                self.poll(cx);
            }
            (kind, reply) => fail(format!("b{}: {reply:?} answers {kind:?}", self.id)),
        }
    }

    fn poll(&mut self, cx: &mut Ctx) {
        let since = self.v.md.as_ref().map_or(0, |m| m.version);
        self.call(cx, CallKind::Poll, Request::Poll { since }, 0);
    }

    fn heartbeat(&mut self, cx: &mut Ctx) {
        cx.timer(HEARTBEAT_MS, Timer::Heartbeat);
        if self.v.heartbeat_busy {
            return;
        }
        self.v.heartbeat_busy = true;
        let epoch = self.v.epoch;
        self.call(
            cx,
            CallKind::Heartbeat,
            Request::Heartbeat { epoch },
            REQUEST_TIMEOUT_MS,
        );
    }

    // --- metadata -----------------------------------------------------------------------

    /// `MetadataCache::publish`, then `reconcile`.
    fn publish(&mut self, cx: &mut Ctx, md: Arc<ClusterMetadata>) {
        let newer = self
            .v
            .md
            .as_ref()
            .is_none_or(|cur| md.version > cur.version);
        if !newer && cx.s.unordered_metadata {
            cx.stats.stale_metadata += 1;
        }
        if newer || cx.s.unordered_metadata {
            self.v.md = Some(md);
            self.reconcile(cx);
        }
    }

    /// `Broker::reconcile_locked`: open the replicas assigned here, apply each
    /// partition's state when it has a leader; then the fetcher manager.
    fn reconcile(&mut self, cx: &mut Ctx) {
        let Some(md) = self.v.md.clone() else {
            return;
        };
        let Some(topic) = md.topic(TOPIC) else {
            return;
        };
        for pr in &topic.partitions {
            let p = pr.partition as usize;
            if !pr.replicas.contains(&self.id) {
                continue;
            }
            if self.v.replicas[p].is_none() {
                // Partition::open: the checkpointed mark, within the log.
                let hwm = self.checkpoints[p].clamp(0, self.logs[p].leo());
                let config = ReplicaConfig {
                    replica_lag_time_max_ms: cx.s.replica_lag_ms,
                    alter_partition_retry_backoff_ms: 100,
                };
                self.v.replicas[p] = Some(PartitionReplica::new(self.id, config, hwm));
                self.v.hwm_watch[p] = hwm;
                cx.opened.push((p, hwm));
            }
            if pr.leader >= 0 {
                let state = PartitionState {
                    leader: pr.leader,
                    leader_epoch: pr.leader_epoch,
                    partition_epoch: pr.partition_epoch,
                    replicas: pr.replicas.clone(),
                    isr: pr.isr.clone(),
                };
                self.apply_state(cx, p, &state);
            }
        }
        self.manage_fetchers(cx);
    }

    /// `Partition::apply_state`.
    fn apply_state(&mut self, cx: &mut Ctx, p: usize, state: &PartitionState) {
        let id = self.id;
        let log = &self.logs[p];
        let Some(r) = self.v.replicas[p].as_mut() else {
            return;
        };
        let unchanged = (r.leader_epoch(), r.partition_epoch())
            == (state.leader_epoch, state.partition_epoch)
            && r.role() != Role::Offline;
        if unchanged {
            return;
        }
        let before = (r.role(), r.leader_epoch());
        let cmds = if state.leader == id {
            r.become_leader(cx.now, state, log)
        } else {
            r.become_follower(cx.now, state, log)
        };
        let after = (r.role(), r.leader_epoch());
        if before != after {
            cx.note(|| format!("b{id} p{p}: {before:?} -> {after:?} (state {state:?})"));
        }
        let alters = self.execute(cx, p, cmds);
        self.send_alter_partitions(cx, p, alters);
    }

    /// `Partition::execute`: carries out the replica's commands; returns the
    /// AlterPartition requests to send.
    fn execute(
        &mut self,
        cx: &mut Ctx,
        p: usize,
        cmds: Vec<Command>,
    ) -> Vec<AlterPartitionRequest> {
        let mut alters = Vec::new();
        let log = &mut self.logs[p];
        for c in cmds {
            match c {
                Command::AssignEpochStart {
                    leader_epoch,
                    start_offset,
                } => {
                    // Log::assign_epoch_start: the epoch starts at the log end.
                    assert_eq!(start_offset, log.leo(), "b{}: AssignEpochStart", self.id);
                    log.epochs.assign(leader_epoch, log.leo());
                }
                Command::AlterPartition(req) => alters.push(req),
                Command::HighWatermarkAdvanced(h) => {
                    if h > self.v.hwm_watch[p] {
                        self.v.hwm_watch[p] = h;
                        self.v.hwm_moved.insert(p);
                    }
                }
                Command::IsrChanged { .. } => {}
                Command::Truncate(offset) => {
                    // At the log end too: it drops an epoch this replica started as
                    // leader and appended nothing in.
                    let leo = log.leo();
                    if offset <= leo {
                        if offset < leo {
                            cx.stats.truncated_records += (leo - offset) as u64;
                            cx.note(|| format!("b{} p{p}: truncating {leo} -> {offset}", self.id));
                        }
                        log.truncate(offset);
                        self.v.leo_moved.insert(p);
                    }
                }
                Command::TruncateFullyAndStartAt(offset) => fail(format!(
                    "b{} p{p}: asked to restart the log at {offset}, but no log start moves here",
                    self.id
                )),
            }
        }
        alters
    }

    /// `Broker::send_alter_partitions`: one call per request, with the broker epoch of
    /// the moment.
    fn send_alter_partitions(&mut self, cx: &mut Ctx, p: usize, reqs: Vec<AlterPartitionRequest>) {
        for req in reqs {
            let creq = ctl::AlterPartitionRequest {
                broker: self.id,
                broker_epoch: self.v.epoch,
                topic_id: topic_id(),
                partition: p as i32,
                leader_epoch: req.leader_epoch,
                partition_epoch: req.partition_epoch,
                new_isr: req.new_isr.clone(),
            };
            self.call(
                cx,
                CallKind::Alter { p, req },
                Request::AlterPartition(creq),
                REQUEST_TIMEOUT_MS,
            );
        }
    }

    /// The controller's answer (or the client's timeout) reaches the replica. After a
    /// success the broker refreshes its metadata; the reconcile that triggers may run
    /// before or after the answer is fed to the replica.
    fn on_alter_result(
        &mut self,
        cx: &mut Ctx,
        p: usize,
        req: &AlterPartitionRequest,
        result: Result<CommittedIsr, AlterPartitionError>,
        md: Option<Arc<ClusterMetadata>>,
    ) {
        if result.is_ok() {
            cx.stats.alter_ok += 1;
        } else {
            cx.stats.alter_refused += 1;
        }
        cx.note(|| format!("b{} p{p}: AlterPartition {req:?} -> {result:?}", self.id));
        let md = md.filter(|_| result.is_ok());
        let refresh_first = cx.rng.percent(50);
        if refresh_first && let Some(md) = &md {
            self.publish(cx, md.clone());
        }
        let Some(r) = self.v.replicas[p].as_mut() else {
            return;
        };
        let cmds = r.on_alter_partition_response(cx.now, req, result);
        let more = self.execute(cx, p, cmds);
        if !refresh_first && let Some(md) = md {
            self.publish(cx, md);
        }
        if let Some(next) = more.into_iter().next() {
            cx.timer(ALTER_RESEND_MS, Timer::AlterResend { p, req: next });
        }
    }

    // --- follower side ------------------------------------------------------------------

    /// The fetcher manager: one fetcher per leader that some local partition follows.
    fn manage_fetchers(&mut self, cx: &mut Ctx) {
        let wanted: BTreeSet<i32> = self
            .v
            .replicas
            .iter()
            .flatten()
            .filter_map(|r| match r.role() {
                Role::Follower { leader } => Some(leader),
                _ => None,
            })
            .collect();
        self.v.fetchers.retain(|l, _| wanted.contains(l));
        for leader in wanted {
            if let std::collections::btree_map::Entry::Vacant(e) = self.v.fetchers.entry(leader) {
                e.insert(Fetcher {
                    generation: cx.id(),
                    in_flight: None,
                });
                self.send_fetch(cx, leader);
            }
        }
    }

    fn send_fetch(&mut self, cx: &mut Ctx, leader: i32) {
        let Some(generation) = self.v.fetchers.get(&leader).map(|f| f.generation) else {
            return;
        };
        let parts: Vec<FetchPart> = (0..self.partitions())
            .filter_map(|p| {
                let r = self.replica(p)?;
                (r.role() == Role::Follower { leader }).then(|| FetchPart {
                    p,
                    current_leader_epoch: r.leader_epoch(),
                    fetch_offset: self.logs[p].leo(),
                    last_fetched_epoch: self.logs[p].latest_epoch(),
                })
            })
            .collect();
        if parts.is_empty() {
            cx.timer(FETCH_BACKOFF_MS, Timer::FetchSend { leader, generation });
            return;
        }
        let rpc = cx.id();
        if let Some(f) = self.v.fetchers.get_mut(&leader) {
            f.in_flight = Some(rpc);
        }
        cx.send(
            Node::Broker(leader),
            None,
            Msg::Fetch {
                generation,
                rpc,
                parts,
            },
        );
        cx.timer(
            FETCH_TIMEOUT_MS,
            Timer::FetchTimeout {
                leader,
                generation,
                rpc,
            },
        );
    }

    fn fetcher_matches(&self, leader: i32, generation: u64, rpc: Option<u64>) -> bool {
        self.v
            .fetchers
            .get(&leader)
            .is_some_and(|f| f.generation == generation && (rpc.is_none() || f.in_flight == rpc))
    }

    fn on_fetch_timeout(&mut self, cx: &mut Ctx, leader: i32, generation: u64, rpc: u64) {
        if self.fetcher_matches(leader, generation, Some(rpc)) {
            if let Some(f) = self.v.fetchers.get_mut(&leader) {
                f.in_flight = None;
            }
            cx.timer(
                FETCH_ERROR_BACKOFF_MS,
                Timer::FetchSend { leader, generation },
            );
        }
    }

    /// `handle_fetch_response`, then the fetcher's next round.
    fn on_fetch_response(
        &mut self,
        cx: &mut Ctx,
        leader: i32,
        generation: u64,
        rpc: u64,
        parts: Vec<FetchPartResp>,
    ) {
        if !self.fetcher_matches(leader, generation, Some(rpc)) {
            return;
        }
        if let Some(f) = self.v.fetchers.get_mut(&leader) {
            f.in_flight = None;
        }
        let mut served = false;
        for pd in parts {
            served |= self.apply_fetched(cx, leader, pd);
        }
        if served {
            self.send_fetch(cx, leader);
        } else {
            cx.timer(FETCH_BACKOFF_MS, Timer::FetchSend { leader, generation });
        }
    }

    /// One partition of a fetch response; whether the leader served it.
    fn apply_fetched(&mut self, cx: &mut Ctx, leader: i32, pd: FetchPartResp) -> bool {
        let p = pd.p;
        let log = &mut self.logs[p];
        let Some(r) = self.v.replicas[p].as_mut() else {
            return false;
        };
        // Leadership may have moved while the fetch was in flight.
        if r.role() != (Role::Follower { leader }) {
            return false;
        }
        let cmds = match pd.error {
            ErrorCode::None => {
                if let Some((epoch, end_offset)) = pd.diverging {
                    cx.stats.diverging += 1;
                    let out = r.on_epoch_end_offset(Some((epoch, end_offset)), log);
                    cx.note(|| {
                        format!(
                            "b{} p{p}: leader b{leader} says epoch {epoch} ends at {end_offset}: {:?}",
                            self.id, out.decision
                        )
                    });
                    if matches!(out.decision, TruncationDecision::Truncate { .. }) {
                        cx.prefix_checks.push(PrefixCheck {
                            follower: self.id,
                            leader,
                            p,
                            epoch: pd.answered_in,
                        });
                    }
                    out.commands
                } else {
                    if !pd.records.is_empty() {
                        if pd.base != log.leo() {
                            // Log::append_replicated refuses (UnexpectedAppendOffset);
                            // the broker logs it and moves on.
                            cx.stats.append_rejected += 1;
                            return true;
                        }
                        log.append(&pd.records);
                        self.v.leo_moved.insert(p);
                    }
                    r.on_fetch_response(pd.high_watermark, log.leo())
                }
            }
            ErrorCode::OffsetOutOfRange => {
                cx.stats.out_of_range += 1;
                r.on_fetch_out_of_range(pd.log_start, pd.high_watermark, log)
            }
            _ => return false,
        };
        let alters = self.execute(cx, p, cmds);
        self.send_alter_partitions(cx, p, alters);
        true
    }

    // --- leader side --------------------------------------------------------------------

    /// A follower's fetch: answered at once if it gets data or an error, else parked.
    fn on_fetch(
        &mut self,
        cx: &mut Ctx,
        follower: i32,
        follower_inc: u64,
        generation: u64,
        rpc: u64,
        parts: Vec<FetchPart>,
    ) {
        if let Some(resp) = self.fetch_once(cx, follower, &parts, false) {
            let msg = Msg::FetchResp {
                generation,
                rpc,
                parts: resp,
            };
            cx.send(Node::Broker(follower), Some(follower_inc), msg);
            return;
        }
        let id = cx.id();
        self.v.parked.push(ParkedFetch {
            id,
            follower,
            follower_inc,
            generation,
            rpc,
            parts,
        });
        cx.timer(FETCH_MAX_WAIT_MS, Timer::ParkedFetchDeadline { id });
    }

    /// `fetch_once` for a follower: `check_follower` on every partition (the replica
    /// decides, and the broker carries out its commands), then the records. `None`:
    /// nothing to answer with yet.
    fn fetch_once(
        &mut self,
        cx: &mut Ctx,
        follower: i32,
        parts: &[FetchPart],
        at_deadline: bool,
    ) -> Option<Vec<FetchPartResp>> {
        let (mut total, mut has_error, mut watches) = (0, false, false);
        let mut out = Vec::with_capacity(parts.len());
        for fp in parts {
            let p = fp.p;
            let mut pd = FetchPartResp {
                p,
                error: ErrorCode::None,
                high_watermark: -1,
                log_start: -1,
                diverging: None,
                base: fp.fetch_offset,
                records: Vec::new(),
                answered_in: -1,
            };
            let Some(r) = self.v.replicas[p].as_mut() else {
                pd.error = ErrorCode::NotLeaderOrFollower;
                has_error = true;
                out.push(pd);
                continue;
            };
            watches = true;
            let fetch = FollowerFetch {
                replica: follower,
                current_leader_epoch: (fp.current_leader_epoch >= 0)
                    .then_some(fp.current_leader_epoch),
                fetch_offset: fp.fetch_offset,
                last_fetched_epoch: fp.last_fetched_epoch,
            };
            let outcome = r.on_follower_fetch(cx.now, &fetch, &self.logs[p]);
            pd.answered_in = r.leader_epoch();
            let alters = self.execute(cx, p, outcome.commands);
            self.send_alter_partitions(cx, p, alters);
            pd.log_start = self.logs[p].log_start_offset();
            match outcome.decision {
                FetchDecision::Read { high_watermark } => {
                    pd.high_watermark = high_watermark;
                    let log = &self.logs[p].recs;
                    let from = fp.fetch_offset as usize;
                    if from < log.len() {
                        let to = (from + cx.s.max_fetch_records).min(log.len());
                        pd.records = log[from..to].to_vec();
                        total += to - from;
                    }
                }
                FetchDecision::DivergingEpoch {
                    epoch,
                    end_offset,
                    high_watermark,
                } => {
                    pd.high_watermark = high_watermark;
                    pd.diverging = Some((epoch, end_offset));
                    has_error = true;
                }
                other => {
                    pd.high_watermark = self.v.hwm_watch[p];
                    pd.error = other.error_code();
                    has_error = true;
                }
            }
            out.push(pd);
        }
        (total > 0 || has_error || at_deadline || !watches).then_some(out)
    }

    /// Parked fetches on a partition whose log end moved look again.
    fn wake_parked(&mut self, cx: &mut Ctx, moved: &BTreeSet<usize>) {
        let parked = std::mem::take(&mut self.v.parked);
        for f in parked {
            let hit = f.parts.iter().any(|fp| moved.contains(&fp.p));
            let resp = if hit {
                self.fetch_once(cx, f.follower, &f.parts, false)
            } else {
                None
            };
            match resp {
                Some(parts) => cx.send(
                    Node::Broker(f.follower),
                    Some(f.follower_inc),
                    Msg::FetchResp {
                        generation: f.generation,
                        rpc: f.rpc,
                        parts,
                    },
                ),
                None => self.v.parked.push(f),
            }
        }
    }

    fn on_parked_deadline(&mut self, cx: &mut Ctx, id: u64) {
        let Some(i) = self.v.parked.iter().position(|f| f.id == id) else {
            return;
        };
        let f = self.v.parked.remove(i);
        let parts = self
            .fetch_once(cx, f.follower, &f.parts, true)
            .expect("answered at the deadline");
        cx.send(
            Node::Broker(f.follower),
            Some(f.follower_inc),
            Msg::FetchResp {
                generation: f.generation,
                rpc: f.rpc,
                parts,
            },
        );
    }

    /// `produce_partition` (+ the acks=all purgatory).
    fn on_produce(&mut self, cx: &mut Ctx, p: usize, acks_all: bool, ids: Vec<u64>) {
        let Some(r) = self.v.replicas.get_mut(p).and_then(Option::as_mut) else {
            cx.stats.not_leader += 1;
            return;
        };
        if !r.is_leader() {
            cx.stats.not_leader += 1;
            return;
        }
        if acks_all && !r.acks_all_allowed(MIN_INSYNC) {
            cx.stats.not_enough_replicas += 1;
            return;
        }
        let epoch = r.leader_epoch();
        let log = &mut self.logs[p];
        let first = log.leo();
        let recs: Vec<Rec> = ids.iter().map(|&id| rec(epoch, id)).collect();
        log.append(&recs);
        self.v.leo_moved.insert(p);
        let cmds = r.on_local_append(cx.now, log.leo());
        cx.note(|| {
            format!(
                "b{} p{p}: appended {} at {first} (epoch {epoch}, acks_all={acks_all})",
                self.id,
                recs.len()
            )
        });
        let alters = self.execute(cx, p, cmds);
        self.send_alter_partitions(cx, p, alters);
        if acks_all {
            self.v.acks.push(PendingAck {
                p,
                first,
                recs,
                epoch,
                deadline: cx.now + PRODUCE_TIMEOUT_MS,
            });
            // wait_for_replicas looks at once.
            self.v.hwm_moved.insert(p);
            if !self.v.ack_poll_armed {
                self.v.ack_poll_armed = true;
                cx.timer(ACK_POLL_MS, Timer::AckPoll);
            }
        } else {
            cx.stats.acked_one += recs.len() as u64;
        }
    }

    /// `wait_for_replicas` for the parked produces of partition `p` (all with `None`).
    ///
    /// As the broker's `Partition::ack_status`, a parked produce fails once the leader
    /// epoch it was appended in is over: `check_enough_replicas_reach_offset` alone does
    /// not know it, and a leader that lost leadership, truncated the batch as a follower
    /// and was elected again would acknowledge it with other records at its offsets
    /// (with `ACK_POLL_MS` at 3 s and no epoch check, seed 817 did).
    fn check_acks(&mut self, cx: &mut Ctx, p: Option<usize>) {
        let acks = std::mem::take(&mut self.v.acks);
        for ack in acks {
            if p.is_some_and(|p| p != ack.p) {
                self.v.acks.push(ack);
                continue;
            }
            if cx.now >= ack.deadline {
                cx.stats.ack_timeouts += 1;
                continue;
            }
            let required = ack.first + ack.recs.len() as i64;
            let status = self
                .replica(ack.p)
                .map_or(AckStatus::NotLeaderOrFollower, |r| {
                    if r.leader_epoch() != ack.epoch {
                        AckStatus::NotLeaderOrFollower
                    } else {
                        r.check_enough_replicas_reach_offset(required, MIN_INSYNC)
                    }
                });
            match status {
                AckStatus::Waiting => self.v.acks.push(ack),
                AckStatus::Done => {
                    let log = &self.logs[ack.p].recs;
                    let held = log
                        .get(ack.first as usize..(required as usize).min(log.len()))
                        .unwrap_or_default()
                        .to_vec();
                    cx.stats.acked_all += ack.recs.len() as u64;
                    cx.note(|| {
                        format!(
                            "b{} p{}: acks=all done for {} records at {}",
                            self.id,
                            ack.p,
                            ack.recs.len(),
                            ack.first
                        )
                    });
                    cx.acks.push(AckRecord {
                        broker: self.id,
                        p: ack.p,
                        first: ack.first,
                        recs: ack.recs,
                        held,
                    });
                }
                AckStatus::NotEnoughReplicasAfterAppend => cx.stats.after_append += 1,
                AckStatus::NotLeaderOrFollower => cx.stats.ack_lost_leadership += 1,
            }
        }
    }

    fn on_ack_poll(&mut self, cx: &mut Ctx) {
        self.check_acks(cx, None);
        if self.v.acks.is_empty() {
            self.v.ack_poll_armed = false;
        } else {
            cx.timer(ACK_POLL_MS, Timer::AckPoll);
        }
    }

    fn leader_tick(&mut self, cx: &mut Ctx) {
        cx.timer(LEADER_TICK_MS, Timer::LeaderTick);
        for p in 0..self.partitions() {
            let Some(r) = self.v.replicas[p].as_mut().filter(|r| r.is_leader()) else {
                continue;
            };
            let cmds = r.tick(cx.now);
            let alters = self.execute(cx, p, cmds);
            self.send_alter_partitions(cx, p, alters);
        }
    }

    fn checkpoint(&mut self, cx: &mut Ctx) {
        cx.timer(cx.s.checkpoint_ms, Timer::Checkpoint);
        for p in 0..self.partitions() {
            if self.v.replicas[p].is_some() {
                self.checkpoints[p] = self.v.hwm_watch[p];
            }
        }
    }

    // --- dispatch -----------------------------------------------------------------------

    fn on_message(&mut self, cx: &mut Ctx, from: Node, from_inc: u64, msg: Msg) {
        match (self.phase, msg) {
            (Phase::Starting | Phase::Running, Msg::Reply { rpc, reply }) => {
                self.on_reply(cx, rpc, *reply)
            }
            (
                Phase::Running,
                Msg::Fetch {
                    generation,
                    rpc,
                    parts,
                },
            ) => {
                if let Node::Broker(f) = from {
                    self.on_fetch(cx, f, from_inc, generation, rpc, parts);
                }
            }
            (
                Phase::Running,
                Msg::FetchResp {
                    generation,
                    rpc,
                    parts,
                },
            ) => {
                if let Node::Broker(l) = from {
                    self.on_fetch_response(cx, l, generation, rpc, parts);
                }
            }
            (Phase::Running, Msg::Produce { p, acks_all, ids }) => {
                self.on_produce(cx, p, acks_all, ids)
            }
            // Not listening yet.
            _ => {}
        }
    }

    fn on_timer(&mut self, cx: &mut Ctx, timer: Timer) {
        if self.phase == Phase::Starting {
            match timer {
                Timer::RpcTimeout { rpc } => self.on_rpc_timeout(cx, rpc),
                Timer::RegisterRetry => self.start(cx),
                _ => {}
            }
            return;
        }
        match timer {
            Timer::Heartbeat => self.heartbeat(cx),
            Timer::LeaderTick => self.leader_tick(cx),
            Timer::Checkpoint => self.checkpoint(cx),
            Timer::AckPoll => self.on_ack_poll(cx),
            Timer::FetchSend { leader, generation } => {
                if self.fetcher_matches(leader, generation, None)
                    && self.v.fetchers[&leader].in_flight.is_none()
                {
                    self.send_fetch(cx, leader);
                }
            }
            Timer::FetchTimeout {
                leader,
                generation,
                rpc,
            } => self.on_fetch_timeout(cx, leader, generation, rpc),
            Timer::ParkedFetchDeadline { id } => self.on_parked_deadline(cx, id),
            Timer::RpcTimeout { rpc } => self.on_rpc_timeout(cx, rpc),
            Timer::AlterResend { p, req } => self.send_alter_partitions(cx, p, vec![req]),
            Timer::PollRetry => self.poll(cx),
            Timer::RegisterRetry
            | Timer::ControllerTick
            | Timer::PollDeadline { .. }
            | Timer::Produce => {}
        }
    }

    /// What the watches set off: parked fetches on a moved log end, parked produces on
    /// a moved high-water mark (which may move more).
    fn after(&mut self, cx: &mut Ctx) {
        loop {
            let leo = std::mem::take(&mut self.v.leo_moved);
            let hwm = std::mem::take(&mut self.v.hwm_moved);
            if leo.is_empty() && hwm.is_empty() {
                return;
            }
            if !leo.is_empty() {
                self.wake_parked(cx, &leo);
            }
            for p in hwm {
                self.check_acks(cx, Some(p));
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Controller
// ---------------------------------------------------------------------------------------

#[derive(Debug)]
struct ParkedPoll {
    broker: i32,
    broker_inc: u64,
    rpc: u64,
    since: u64,
}

/// The controller leader: the replicated state machine and the leader's duties.
#[derive(Debug)]
struct Controller {
    meta: ClusterMetadata,
    snapshot: Arc<ClusterMetadata>,
    /// The raft log index of the last command.
    index: u64,
    duties: Duties,
    base: Instant,
    /// Bumped by every failover: what was in flight to the old leader is lost.
    inc: u64,
    down: bool,
    polls: Vec<ParkedPoll>,
    notified: u64,
}

impl Controller {
    fn new(base: Instant, s: &Settings) -> Controller {
        Controller {
            meta: ClusterMetadata::default(),
            snapshot: Arc::new(ClusterMetadata::default()),
            index: 0,
            duties: Duties::new(DutySettings {
                session_timeout: Duration::from_millis(s.session_timeout_ms as u64),
                rebalance_delay: s.rebalance_ms.map(|ms| Duration::from_millis(ms as u64)),
            }),
            base,
            inc: 1,
            down: false,
            polls: Vec::new(),
            notified: 0,
        }
    }

    fn at(&self, now: i64) -> Instant {
        self.base + Duration::from_millis(now as u64)
    }

    fn apply(&mut self, cmd: &ctl::Command) -> ctl::CommandResult {
        self.index += 1;
        self.meta.apply(cmd, self.index)
    }

    fn snapshot(&mut self) -> Arc<ClusterMetadata> {
        if self.snapshot.version != self.meta.version {
            self.snapshot = Arc::new(self.meta.clone());
        }
        self.snapshot.clone()
    }

    fn partition(&self, p: usize) -> &PartitionRecord {
        &self.meta.topic(TOPIC).expect("the topic").partitions[p]
    }

    fn on_message(&mut self, cx: &mut Ctx, from: Node, from_inc: u64, msg: Msg) {
        let (Node::Broker(b), Msg::Call { rpc, req }) = (from, msg) else {
            return;
        };
        let reply = match req {
            Request::Register => {
                let cmd = ctl::Command::RegisterBroker {
                    broker: b,
                    host: format!("broker-{b}"),
                    port: 9092,
                    rack: None,
                    listeners: vec![],
                };
                let Ok(CommandOutput::Broker(rec)) = self.apply(&cmd) else {
                    fail(format!("the controller refused to register b{b}"));
                };
                self.duties.registered(self.at(cx.now), b, rec.epoch);
                cx.note(|| format!("controller: b{b} registered, epoch {}", rec.epoch));
                Some(Reply::Registered {
                    epoch: rec.epoch,
                    md: self.snapshot(),
                })
            }
            Request::Heartbeat { epoch } => {
                let result = match self.duties.heartbeat(self.at(cx.now), &self.meta, b, epoch) {
                    Ok(HeartbeatAction::None) => Ok(false),
                    Ok(HeartbeatAction::Unfence { epoch }) => {
                        cx.note(|| format!("controller: unfencing b{b}"));
                        self.apply(&ctl::Command::UnfenceBroker { broker: b, epoch })
                            .map(|_| false)
                    }
                    Err(r) => Err(r),
                };
                Some(Reply::Heartbeat(result))
            }
            Request::AlterPartition(req) => {
                let result = match self.apply(&ctl::Command::AlterPartition(req.clone())) {
                    Ok(CommandOutput::Partition(p)) => Ok(p),
                    Ok(other) => fail(format!("AlterPartition answered {other:?}")),
                    Err(r) => Err(r),
                };
                cx.note(|| format!("controller: {req:?} -> {result:?}"));
                Some(Reply::AlterPartition {
                    result,
                    md: self.snapshot(),
                })
            }
            Request::Poll { since } => {
                if self.meta.version > since {
                    Some(Reply::Metadata(Some(self.snapshot())))
                } else {
                    self.polls.push(ParkedPoll {
                        broker: b,
                        broker_inc: from_inc,
                        rpc,
                        since,
                    });
                    cx.timer(POLL_WAIT_MS, Timer::PollDeadline { rpc });
                    None
                }
            }
        };
        if let Some(reply) = reply {
            let msg = Msg::Reply {
                rpc,
                reply: Box::new(reply),
            };
            cx.send(Node::Broker(b), Some(from_inc), msg);
        }
        self.notify(cx);
    }

    /// Long polls and the client learn of a new metadata version.
    fn notify(&mut self, cx: &mut Ctx) {
        if self.meta.version == self.notified {
            return;
        }
        self.notified = self.meta.version;
        let md = self.snapshot();
        let version = md.version;
        let (ready, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut self.polls)
            .into_iter()
            .partition(|p| p.since < version);
        self.polls = waiting;
        for poll in ready {
            let msg = Msg::Reply {
                rpc: poll.rpc,
                reply: Box::new(Reply::Metadata(Some(md.clone()))),
            };
            cx.send(Node::Broker(poll.broker), Some(poll.broker_inc), msg);
        }
        cx.send(Node::Client, None, Msg::ClientMetadata(md));
    }

    fn on_timer(&mut self, cx: &mut Ctx, timer: Timer) {
        match timer {
            Timer::ControllerTick => {
                cx.timer(CONTROLLER_TICK_MS, Timer::ControllerTick);
                if self.down {
                    return;
                }
                let before = self.max_leader_epochs();
                for cmd in self.duties.tick(self.at(cx.now), &self.meta) {
                    if matches!(cmd, ctl::Command::FenceBroker { .. }) {
                        cx.stats.fencings += 1;
                    }
                    let r = self.apply(&cmd);
                    cx.note(|| format!("controller duty {cmd:?} -> ok={}", r.is_ok()));
                }
                if self.max_leader_epochs() != before {
                    cx.stats.elections += 1;
                }
                self.notify(cx);
            }
            Timer::PollDeadline { rpc } => {
                if let Some(i) = self.polls.iter().position(|p| p.rpc == rpc) {
                    let poll = self.polls.remove(i);
                    let msg = Msg::Reply {
                        rpc,
                        reply: Box::new(Reply::Metadata(None)),
                    };
                    cx.send(Node::Broker(poll.broker), Some(poll.broker_inc), msg);
                }
            }
            _ => {}
        }
    }

    fn max_leader_epochs(&self) -> Vec<i32> {
        self.meta
            .topic(TOPIC)
            .map(|t| t.partitions.iter().map(|p| p.leader_epoch).collect())
            .unwrap_or_default()
    }
}

fn topic_id() -> TopicId {
    "5e1a0000000000000000000000000001".parse().unwrap()
}

// ---------------------------------------------------------------------------------------
// Client
// ---------------------------------------------------------------------------------------

#[derive(Debug, Default)]
struct Client {
    md: Option<Arc<ClusterMetadata>>,
    next_id: u64,
    producing: bool,
}

impl Client {
    fn produce(&mut self, cx: &mut Ctx) {
        if !self.producing {
            return;
        }
        let (lo, hi) = cx.s.produce_every_ms;
        let every = cx.rng.range(lo, hi);
        cx.timer(every, Timer::Produce);
        let p = cx.rng.below(cx.s.partitions as u64) as usize;
        let leader = self
            .md
            .as_ref()
            .and_then(|m| m.partition(TOPIC, p as i32))
            .map_or(-1, |p| p.leader);
        let to = if leader >= 0 && cx.rng.percent(90) {
            leader
        } else {
            cx.rng.pick(&BROKERS)
        };
        let n = cx.rng.range(1, 3) as u64;
        let ids = (0..n).map(|k| self.next_id + k).collect();
        self.next_id += n;
        let acks_all = cx.rng.percent(85);
        cx.send(Node::Broker(to), None, Msg::Produce { p, acks_all, ids });
    }

    fn on_message(&mut self, msg: Msg) {
        if let Msg::ClientMetadata(md) = msg
            && self.md.as_ref().is_none_or(|m| md.version > m.version)
        {
            self.md = Some(md);
        }
    }
}

// ---------------------------------------------------------------------------------------
// The invariants
// ---------------------------------------------------------------------------------------

#[derive(Debug, Default)]
struct Checker {
    /// Per partition: every record ever below some replica's high-water mark.
    committed: Vec<Vec<Rec>>,
    /// Per partition: offset -> the record acknowledged there with acks=all.
    acked: Vec<BTreeMap<i64, Rec>>,
    /// Acknowledged this event, to find in the committed log after it.
    new_acks: Vec<(usize, i64, Rec)>,
    /// Per partition: leader epoch -> the (broker, incarnation) that led it.
    leaders: Vec<BTreeMap<i32, (i32, u64)>>,
    /// (broker, partition) -> (incarnation, high-water mark) last seen.
    hwms: BTreeMap<(i32, usize), (u64, i64)>,
}

impl Checker {
    fn new(partitions: usize) -> Checker {
        Checker {
            committed: vec![Vec::new(); partitions],
            acked: vec![BTreeMap::new(); partitions],
            leaders: vec![BTreeMap::new(); partitions],
            ..Checker::default()
        }
    }

    /// Invariants 1 (at the acknowledging leader) and 5.
    fn on_ack(&mut self, a: &AckRecord) {
        if a.held != a.recs {
            fail(format!(
                "b{} acknowledged p{} [{}] at {}, but its log holds [{}] there",
                a.broker,
                a.p,
                shows(&a.recs),
                a.first,
                shows(&a.held)
            ));
        }
        for (k, &r) in a.recs.iter().enumerate() {
            let o = a.first + k as i64;
            if let Some(prev) = self.acked[a.p].insert(o, r)
                && prev != r
            {
                fail(format!(
                    "p{} offset {o} acknowledged twice: {} and then {} (by b{})",
                    a.p,
                    show(prev),
                    show(r),
                    a.broker
                ));
            }
            self.new_acks.push((a.p, o, r));
        }
    }

    /// A restarted replica's high-water mark comes from its checkpoint: no higher than
    /// what was committed (invariant 3).
    fn on_opened(&self, broker: i32, p: usize, hwm: i64) {
        if hwm as usize > self.committed[p].len() {
            fail(format!(
                "b{broker} p{p} reopened with high-water mark {hwm}, above the committed log ({})",
                self.committed[p].len()
            ));
        }
    }

    /// Invariant 6.
    fn on_truncated(&self, brokers: &[Broker], c: &PrefixCheck) {
        let l = &brokers[idx(c.leader)];
        let leading = l.is_up()
            && l.replica(c.p)
                .is_some_and(|r| r.is_leader() && r.leader_epoch() == c.epoch);
        if !leading {
            return;
        }
        let fl = &brokers[idx(c.follower)].logs[c.p].recs;
        let ll = &l.logs[c.p].recs;
        if fl.len() > ll.len() || fl[..] != ll[..fl.len()] {
            fail(format!(
                "p{}: b{} truncated against leader b{} (epoch {}) but is no prefix of it:\n  follower [{}]\n  leader   [{}]",
                c.p,
                c.follower,
                c.leader,
                c.epoch,
                shows(fl),
                shows(ll)
            ));
        }
    }

    /// Invariants 1-4 after an event. `full` re-compares whole logs instead of what
    /// changed since the last look.
    fn check(&mut self, brokers: &mut [Broker], controller: &Controller, full: bool) {
        for p in 0..self.committed.len() {
            let pr = controller.partition(p);
            for b in brokers.iter_mut().filter(|b| b.is_up()) {
                let Some(r) = b.v.replicas[p].as_ref() else {
                    continue;
                };
                let (id, inc) = (b.id, b.inc);
                let watch = b.v.hwm_watch[p];
                let log = &mut b.logs[p];
                let (h, leo) = (r.high_watermark(), log.leo());
                // 3: within the log, never back. The broker's copy (what consumers read
                // below and the checkpoint saves) follows the replica's.
                if h > leo || watch > leo {
                    fail(format!(
                        "b{id} p{p}: high-water mark {h} (broker's copy {watch}) past the log end {leo}"
                    ));
                }
                if watch < h {
                    fail(format!(
                        "b{id} p{p}: the broker's high-water mark {watch} lags the replica's {h}"
                    ));
                }
                if let Some(&(seen_inc, last)) = self.hwms.get(&(id, p))
                    && seen_inc == inc
                    && h < last
                {
                    fail(format!(
                        "b{id} p{p}: high-water mark moved back {last} -> {h}"
                    ));
                }
                self.hwms.insert((id, p), (inc, h));
                // 4: one leader per epoch.
                if r.is_leader() {
                    let e = r.leader_epoch();
                    let who = *self.leaders[p].entry(e).or_insert((id, inc));
                    if who != (id, inc) {
                        fail(format!(
                            "p{p}: two leaders in epoch {e}: b{} (incarnation {}) and b{id} (incarnation {inc})",
                            who.0, who.1
                        ));
                    }
                }
                // 1 and 2: the committed log.
                let committed = &mut self.committed[p];
                let acting =
                    id == pr.leader && r.is_leader() && r.leader_epoch() == pr.leader_epoch;
                let need = if acting {
                    if (leo as usize) < committed.len() {
                        fail(format!(
                            "p{p}: leader b{id} (epoch {}) ends at {leo}, but {} records are committed",
                            pr.leader_epoch,
                            committed.len()
                        ));
                    }
                    committed.len()
                } else {
                    (watch as usize).min(committed.len())
                };
                let from = if full { 0 } else { log.checked.min(need) };
                if log.recs[from..need] != committed[from..need] {
                    let o = (from..need)
                        .find(|&o| log.recs[o] != committed[o])
                        .unwrap_or(from);
                    fail(format!(
                        "p{p}: b{id} (hwm {h}, leader={}) holds {} at offset {o}, where {} is committed",
                        r.is_leader(),
                        show(log.recs[o]),
                        show(committed[o])
                    ));
                }
                log.checked = log.checked.max(need);
                if watch as usize > committed.len() {
                    let n = committed.len();
                    committed.extend_from_slice(&log.recs[n..watch as usize]);
                    log.checked = watch as usize;
                }
            }
        }
        // 1: what was acknowledged is committed (so in the leader and below every HWM).
        for (p, o, r) in std::mem::take(&mut self.new_acks) {
            if self.committed[p].get(o as usize) != Some(&r) {
                fail(format!(
                    "p{p}: {} acknowledged at offset {o} but not committed there ({:?})",
                    show(r),
                    self.committed[p].get(o as usize).map(|&c| show(c))
                ));
            }
        }
        if full {
            self.check_acked_directly(brokers, controller);
        }
    }

    /// Invariant 1 without the committed log: every acknowledged record is in the
    /// acting leader's log and below every high-water mark that covers it.
    fn check_acked_directly(&self, brokers: &[Broker], controller: &Controller) {
        for (p, acked) in self.acked.iter().enumerate() {
            let pr = controller.partition(p);
            for b in brokers.iter().filter(|b| b.is_up()) {
                let Some(r) = b.replica(p) else { continue };
                let acting =
                    b.id == pr.leader && r.is_leader() && r.leader_epoch() == pr.leader_epoch;
                let log = &b.logs[p].recs;
                for (&o, &rec) in acked {
                    if (acting || o < r.high_watermark()) && log.get(o as usize) != Some(&rec) {
                        fail(format!(
                            "p{p}: acknowledged {} at offset {o} is not in b{} (leader={acting}, hwm {})",
                            show(rec),
                            b.id,
                            r.high_watermark()
                        ));
                    }
                }
            }
        }
    }
}

fn shows(recs: &[Rec]) -> String {
    recs.iter().map(|&r| show(r)).collect::<Vec<_>>().join(" ")
}

fn idx(broker: i32) -> usize {
    BROKERS
        .iter()
        .position(|&b| b == broker)
        .expect("a broker id")
}

// ---------------------------------------------------------------------------------------
// The simulation
// ---------------------------------------------------------------------------------------

/// A cut link: messages from `from` to `to` are dropped.
#[derive(Debug)]
struct Cut {
    id: u64,
    from: Node,
    to: Node,
}

struct Sim {
    seed: u64,
    s: Settings,
    now: i64,
    step: u64,
    seq: u64,
    queue: BinaryHeap<Scheduled>,
    rng: Rng,
    ids: u64,
    controller: Controller,
    brokers: Vec<Broker>,
    client: Client,
    cuts: Vec<Cut>,
    chaos: bool,
    checker: Checker,
    stats: Stats,
}

impl Sim {
    fn new(seed: u64) -> Sim {
        let mut rng = Rng::new(seed);
        let s = Settings::random(&mut rng);
        let mut controller = Controller::new(Instant::now(), &s);
        for b in BROKERS {
            let cmd = ctl::Command::RegisterBroker {
                broker: b,
                host: format!("broker-{b}"),
                port: 9092,
                rack: None,
                listeners: vec![],
            };
            controller.apply(&cmd).unwrap();
        }
        let assignment =
            strata_controller::assign::assign_replicas(&controller.meta, s.partitions as i32, 3, 0)
                .unwrap();
        let topic = NewTopic {
            id: topic_id(),
            name: TOPIC.into(),
            configs: BTreeMap::from([("min.insync.replicas".to_string(), "2".to_string())]),
            assignment,
            storage_cluster_id: None,
            initial_leader_epoch: 0,
        };
        controller.apply(&ctl::Command::CreateTopic(topic)).unwrap();
        let now = controller.at(0);
        controller.duties.became_leader(now, &controller.meta);
        let partitions = s.partitions;
        let mut sim = Sim {
            seed,
            now: 0,
            step: 0,
            seq: 0,
            queue: BinaryHeap::new(),
            rng,
            ids: 0,
            controller,
            brokers: BROKERS
                .iter()
                .map(|&b| Broker::new(b, partitions))
                .collect(),
            client: Client {
                producing: true,
                ..Client::default()
            },
            cuts: Vec::new(),
            chaos: true,
            checker: Checker::new(partitions),
            stats: Stats::default(),
            s,
        };
        // The brokers start registered (as if Broker::open had just succeeded).
        let md = sim.controller.snapshot();
        for (i, &b) in BROKERS.iter().enumerate() {
            let epoch = sim.controller.meta.broker(b).unwrap().epoch;
            sim.brokers[i].phase = Phase::Starting;
            let md = md.clone();
            sim.with_broker(i, |b, cx| b.registered(cx, epoch, md));
        }
        sim.client.md = Some(md);
        sim.push(
            CONTROLLER_TICK_MS,
            Event::Timer {
                node: Node::Controller,
                inc: 0,
                timer: Timer::ControllerTick,
            },
        );
        sim.push(
            1,
            Event::Timer {
                node: Node::Client,
                inc: 0,
                timer: Timer::Produce,
            },
        );
        let (lo, hi) = sim.s.chaos_every_ms;
        let first = sim.rng.range(lo, hi);
        sim.push(first, Event::Chaos);
        sim
    }

    fn push(&mut self, after: i64, event: Event) {
        self.seq += 1;
        self.queue.push(Scheduled {
            at: self.now + after,
            seq: self.seq,
            event,
        });
    }

    fn is_cut(&self, from: Node, to: Node) -> bool {
        self.cuts.iter().any(|c| c.from == from && c.to == to)
    }

    /// Where a request to `to` lands: its current incarnation, if it runs.
    fn incarnation(&self, to: Node) -> Option<u64> {
        match to {
            Node::Controller => Some(self.controller.inc),
            Node::Broker(b) => {
                let b = &self.brokers[idx(b)];
                (b.phase != Phase::Down).then_some(b.inc)
            }
            Node::Client => Some(0),
        }
    }

    fn delay(&mut self) -> i64 {
        let d = self.rng.range(0, 20);
        if self.rng.percent(self.s.slow_percent) {
            d + self.rng.range(50, 800)
        } else {
            d
        }
    }

    /// Runs a handler of `node` with a fresh context, then sends what it sent.
    fn with_node<T>(
        &mut self,
        node: Node,
        from_inc: u64,
        f: impl FnOnce(&mut Sim, &mut Ctx) -> T,
    ) -> T {
        let mut ids = self.ids;
        let mut stats = std::mem::take(&mut self.stats);
        let mut rng = Rng(self.rng.0);
        let s = self.s.clone();
        let mut cx = Ctx {
            now: self.now,
            s: &s,
            rng: &mut rng,
            ids: &mut ids,
            stats: &mut stats,
            sends: Vec::new(),
            timers: Vec::new(),
            acks: Vec::new(),
            prefix_checks: Vec::new(),
            opened: Vec::new(),
        };
        let out = f(self, &mut cx);
        let Ctx {
            sends,
            timers,
            acks,
            prefix_checks,
            opened,
            ..
        } = cx;
        self.ids = ids;
        self.stats = stats;
        self.rng = rng;
        for (p, hwm) in opened {
            if let Node::Broker(b) = node {
                self.checker.on_opened(b, p, hwm);
            }
        }
        for a in &acks {
            self.checker.on_ack(a);
        }
        for c in &prefix_checks {
            self.checker.on_truncated(&self.brokers, c);
        }
        for (after, timer) in timers {
            self.push(
                after,
                Event::Timer {
                    node,
                    inc: from_inc,
                    timer,
                },
            );
        }
        for (to, to_inc, msg) in sends {
            let Some(to_inc) = to_inc.or_else(|| self.incarnation(to)) else {
                continue; // connection refused
            };
            if self.is_cut(node, to) {
                continue;
            }
            let d = self.delay();
            self.push(
                d,
                Event::Deliver {
                    from: node,
                    from_inc,
                    to,
                    to_inc,
                    msg,
                },
            );
        }
        out
    }

    fn with_broker(&mut self, i: usize, f: impl FnOnce(&mut Broker, &mut Ctx)) {
        let (id, inc) = (self.brokers[i].id, self.brokers[i].inc);
        self.with_node(Node::Broker(id), inc, |sim, cx| {
            let b = &mut sim.brokers[i];
            f(b, cx);
            b.after(cx);
        });
    }

    fn handle(&mut self, event: Event) {
        match event {
            Event::Deliver {
                from,
                from_inc,
                to,
                to_inc,
                msg,
            } => {
                if self.is_cut(from, to) {
                    return;
                }
                match to {
                    Node::Broker(b) => {
                        let i = idx(b);
                        let br = &mut self.brokers[i];
                        if br.phase == Phase::Down || br.inc != to_inc {
                            return;
                        }
                        if br.paused {
                            br.stash.push(Event::Deliver {
                                from,
                                from_inc,
                                to,
                                to_inc,
                                msg,
                            });
                            return;
                        }
                        trace(self.now, || format!("{from:?} -> b{b}: {}", msg.describe()));
                        self.with_broker(i, |b, cx| b.on_message(cx, from, from_inc, msg));
                    }
                    Node::Controller => {
                        if self.controller.down || self.controller.inc != to_inc {
                            return;
                        }
                        trace(self.now, || {
                            format!("{from:?} -> controller: {}", msg.describe())
                        });
                        let inc = self.controller.inc;
                        self.with_node(Node::Controller, inc, |sim, cx| {
                            sim.controller.on_message(cx, from, from_inc, msg)
                        });
                    }
                    Node::Client => self.client.on_message(msg),
                }
            }
            Event::Timer { node, inc, timer } => match node {
                Node::Broker(b) => {
                    let i = idx(b);
                    let br = &mut self.brokers[i];
                    if br.phase == Phase::Down || br.inc != inc {
                        return;
                    }
                    if br.paused {
                        br.stash.push(Event::Timer { node, inc, timer });
                        return;
                    }
                    self.with_broker(i, |b, cx| b.on_timer(cx, timer));
                }
                Node::Controller => {
                    let inc = self.controller.inc;
                    self.with_node(Node::Controller, inc, |sim, cx| {
                        sim.controller.on_timer(cx, timer)
                    });
                }
                Node::Client => self.with_node(Node::Client, 0, |sim, cx| sim.client.produce(cx)),
            },
            Event::Chaos => self.chaos(),
            Event::Heal { cut } => self.cuts.retain(|c| c.id != cut),
            Event::Restart { broker } => self.restart(idx(broker)),
            Event::Resume { broker } => self.resume(idx(broker)),
            Event::ControllerUp => self.controller_up(),
        }
    }

    // --- faults -------------------------------------------------------------------------

    fn chaos(&mut self) {
        if !self.chaos {
            return;
        }
        let (lo, hi) = self.s.chaos_every_ms;
        let next = self.rng.range(lo, hi);
        self.push(next, Event::Chaos);
        let b = self.rng.pick(&BROKERS);
        let i = idx(b);
        let others: Vec<i32> = BROKERS.iter().copied().filter(|&o| o != b).collect();
        let other = self.rng.pick(&others);
        let dur = self.rng.range(100, 4_000);
        match self.rng.below(100) {
            0..=11 if self.brokers[i].phase != Phase::Down => {
                trace(self.now, || format!("CHAOS crash b{b}"));
                self.stats.crashes += 1;
                self.brokers[i].crash();
                let after = self.rng.range(50, 3_000);
                self.push(after, Event::Restart { broker: b });
            }
            12..=25 => {
                trace(self.now, || format!("CHAOS isolate b{b} for {dur} ms"));
                let mut links = vec![Node::Controller, Node::Client];
                links.extend(others.iter().map(|&o| Node::Broker(o)));
                for n in links {
                    self.cut(Node::Broker(b), n, dur);
                    self.cut(n, Node::Broker(b), dur);
                }
            }
            26..=37 => {
                trace(self.now, || {
                    format!("CHAOS cut b{b} <-> controller for {dur} ms")
                });
                self.cut(Node::Broker(b), Node::Controller, dur);
                self.cut(Node::Controller, Node::Broker(b), dur);
            }
            38..=45 => {
                let nodes = [Node::Controller, Node::Broker(other)];
                let n = self.rng.pick(&nodes);
                let (from, to) = if self.rng.percent(50) {
                    (Node::Broker(b), n)
                } else {
                    (n, Node::Broker(b))
                };
                trace(self.now, || {
                    format!("CHAOS cut {from:?} -> {to:?} for {dur} ms")
                });
                self.cut(from, to, dur);
            }
            46..=57 if self.brokers[i].phase != Phase::Down && !self.brokers[i].paused => {
                let dur = self.rng.range(50, 2_500);
                trace(self.now, || format!("CHAOS pause b{b} for {dur} ms"));
                self.stats.pauses += 1;
                self.brokers[i].paused = true;
                self.push(dur, Event::Resume { broker: b });
            }
            58..=63 if !self.controller.down => {
                let dur = self.rng.range(0, 1_000);
                trace(self.now, || format!("CHAOS controller failover ({dur} ms)"));
                self.stats.failovers += 1;
                self.controller.down = true;
                self.controller.inc += 1;
                self.controller.polls.clear();
                self.push(dur, Event::ControllerUp);
            }
            64..=71 => {
                trace(self.now, || {
                    format!("CHAOS cut b{b} <-> b{other} for {dur} ms")
                });
                self.cut(Node::Broker(b), Node::Broker(other), dur);
                self.cut(Node::Broker(other), Node::Broker(b), dur);
            }
            72..=77 if !self.controller.down => {
                // An operator runs a preferred-leader election (Kafka's
                // kafka-leader-election.sh; the controller's ElectLeaders).
                trace(self.now, || "CHAOS preferred-leader election".to_string());
                self.stats.admin_elections += 1;
                let partitions = (0..self.s.partitions as i32)
                    .map(|p| (TOPIC.to_string(), p))
                    .collect();
                let cmd = ctl::Command::ElectLeaders {
                    election: ctl::ElectionType::Preferred,
                    partitions,
                };
                self.controller.apply(&cmd).unwrap();
                let inc = self.controller.inc;
                self.with_node(Node::Controller, inc, |sim, cx| sim.controller.notify(cx));
            }
            _ => {}
        }
    }

    fn cut(&mut self, from: Node, to: Node, dur: i64) {
        self.stats.cuts += 1;
        self.ids += 1;
        let id = self.ids;
        self.cuts.push(Cut { id, from, to });
        self.push(dur, Event::Heal { cut: id });
    }

    fn restart(&mut self, i: usize) {
        if self.brokers[i].phase != Phase::Down {
            return;
        }
        trace(self.now, || format!("restart b{}", BROKERS[i]));
        self.with_broker(i, |b, cx| b.start(cx));
    }

    fn resume(&mut self, i: usize) {
        let b = &mut self.brokers[i];
        if !b.paused {
            return;
        }
        trace(self.now, || format!("resume b{}", BROKERS[i]));
        b.paused = false;
        // Everything that queued up is handled now, in order.
        for event in std::mem::take(&mut b.stash) {
            self.push(0, event);
        }
    }

    fn controller_up(&mut self) {
        if !self.controller.down {
            return;
        }
        trace(self.now, || "controller up (new leader)".to_string());
        self.controller.down = false;
        // A new leader starts every broker's session afresh.
        let now = self.controller.at(self.now);
        self.controller
            .duties
            .became_leader(now, &self.controller.meta);
    }

    /// Heal everything and stop producing.
    fn settle(&mut self) {
        trace(self.now, || "SETTLE: healing everything".to_string());
        self.chaos = false;
        self.client.producing = false;
        self.cuts.clear();
        self.controller_up();
        for i in 0..self.brokers.len() {
            self.resume(i);
            self.restart(i);
        }
    }

    // --- checks -------------------------------------------------------------------------

    fn check(&mut self, full: bool) {
        self.checker
            .check(&mut self.brokers, &self.controller, full);
    }

    /// `Err(why)` while the cluster has not converged.
    fn converged(&self) -> Result<(), String> {
        let all: Vec<i32> = BROKERS.to_vec();
        for b in &self.brokers {
            if !b.is_up() || b.paused {
                return Err(format!("b{} is {:?}", b.id, b.phase));
            }
            if !self.controller.meta.is_live(b.id) {
                return Err(format!("b{} is fenced", b.id));
            }
        }
        for p in 0..self.s.partitions {
            let pr = self.controller.partition(p);
            if pr.leader < 0 {
                return Err(format!("p{p} has no leader"));
            }
            let mut isr = pr.isr.clone();
            isr.sort_unstable();
            if isr != all {
                return Err(format!("p{p}: the controller's ISR is {:?}", pr.isr));
            }
            let leader = &self.brokers[idx(pr.leader)];
            let lr = leader.replica(p).ok_or("no leader replica")?;
            if !lr.is_leader() || lr.leader_epoch() != pr.leader_epoch {
                return Err(format!(
                    "p{p}: b{} does not lead epoch {} yet",
                    pr.leader, pr.leader_epoch
                ));
            }
            let mut lisr = lr.isr();
            lisr.sort_unstable();
            if lisr != all || lr.pending_alter_partition().is_some() {
                return Err(format!(
                    "p{p}: the leader's ISR is {:?} (pending {:?})",
                    lr.isr(),
                    lr.pending_alter_partition()
                ));
            }
            for b in &self.brokers {
                let r = b.replica(p).ok_or("no replica")?;
                let log = &b.logs[p];
                if r.leader_epoch() != pr.leader_epoch {
                    return Err(format!("p{p}: b{} is at epoch {}", b.id, r.leader_epoch()));
                }
                if log.recs != leader.logs[p].recs {
                    return Err(format!(
                        "p{p}: b{}'s log (end {}) differs from the leader's (end {})",
                        b.id,
                        log.leo(),
                        leader.logs[p].leo()
                    ));
                }
                if r.high_watermark() != log.leo() {
                    return Err(format!(
                        "p{p}: b{}'s high-water mark {} is not its log end {}",
                        b.id,
                        r.high_watermark(),
                        log.leo()
                    ));
                }
            }
        }
        Ok(())
    }

    /// Runs `steps` events with faults, then heals and waits for convergence.
    fn run(mut self, steps: u64) -> Stats {
        let mut settled_at = None;
        loop {
            if settled_at.is_none() && self.step >= steps {
                self.settle();
                settled_at = Some(self.now);
            }
            let Some(next) = self.queue.pop() else {
                fail("the event queue ran dry".to_string());
            };
            self.now = next.at;
            self.step += 1;
            POSITION.set((self.seed, self.step, self.now));
            self.handle(next.event);
            self.check(self.step.is_multiple_of(64));
            if let Some(t0) = settled_at
                && self.step.is_multiple_of(16)
            {
                match self.converged() {
                    Ok(()) => break,
                    Err(why) if self.now - t0 > SETTLE_LIMIT_MS => fail(format!(
                        "no convergence {} ms after healing: {why}",
                        self.now - t0
                    )),
                    Err(_) => {}
                }
            }
        }
        self.check(true);
        let mut stats = self.stats.clone();
        stats.steps = self.step;
        stats.sim_ms = self.now;
        stats.settle_ms = self.now - settled_at.unwrap_or(self.now);
        stats.committed = self.checker.committed.iter().map(Vec::len).sum();
        for (p, acked) in self.checker.acked.iter().enumerate() {
            let log = &self.brokers[0].logs[p].recs;
            for (&o, &r) in acked {
                assert_eq!(
                    log.get(o as usize),
                    Some(&r),
                    "seed {}: p{p} offset {o}",
                    self.seed
                );
            }
        }
        stats.digest = 0xcbf2_9ce4_8422_2325;
        for b in &self.brokers {
            for p in 0..self.s.partitions {
                stats.max_leader_epoch = stats
                    .max_leader_epoch
                    .max(b.replica(p).map_or(0, |r| r.leader_epoch()));
                for &r in &b.logs[p].recs {
                    stats.digest = (stats.digest ^ r).wrapping_mul(0x0100_0000_01b3);
                }
            }
        }
        stats
    }
}

// ---------------------------------------------------------------------------------------
// Running seeds
// ---------------------------------------------------------------------------------------

const DEFAULT_STEPS: u64 = 4_000;

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().map(|v| {
        v.trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v}: not a number"))
    })
}

/// Runs one seed; a failure (an invariant, or a panic in the code under test) comes back
/// as its message.
fn run_seed(seed: u64, steps: u64) -> Result<Stats, String> {
    TRACE.with_borrow_mut(VecDeque::clear);
    POSITION.set((seed, 0, 0));
    std::panic::catch_unwind(AssertUnwindSafe(|| Sim::new(seed).run(steps))).map_err(|e| {
        let what = e
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        let (seed, step, now) = POSITION.get();
        format!("seed {seed} (step {step}, t={now} ms): {what}")
    })
}

/// Runs `count` seeds from `first` (or only `STRATA_SIM_SEED`); panics listing the
/// seeds that failed.
fn run_seeds(first: u64, count: u64, steps: u64) -> Stats {
    let steps = env_u64("STRATA_SIM_STEPS").unwrap_or(steps);
    let seeds: Vec<u64> = match env_u64("STRATA_SIM_SEED") {
        Some(seed) => vec![seed],
        None => (first..first + count).collect(),
    };
    let tracing = std::env::var("STRATA_SIM_TRACE").is_ok_and(|v| v != "0");
    TRACING.set(tracing && seeds.len() == 1);
    let started = Instant::now();
    let mut total = Stats::default();
    let mut failures = Vec::new();
    for &seed in &seeds {
        let result = run_seed(seed, steps);
        if TRACING.get() {
            TRACE.with_borrow(|t| {
                for line in t {
                    println!("{line}");
                }
            });
        }
        match result {
            Ok(stats) => total.add(&stats),
            Err(e) => {
                failures.push(e);
                if failures.len() >= 10 {
                    break;
                }
            }
        }
    }
    println!(
        "{} seeds x {steps} steps in {:.1?}: {total:?}",
        seeds.len(),
        started.elapsed()
    );
    assert!(
        failures.is_empty(),
        "{} failing seed(s) (replay one with STRATA_SIM_SEED=<seed> STRATA_SIM_STEPS={steps} STRATA_SIM_TRACE=1 cargo test -p strata-replica --test simulation -- --ignored long_run --nocapture):\n{}",
        failures.len(),
        failures.join("\n")
    );
    total
}

#[test]
fn simulate_many_seeds() {
    let total = run_seeds(0, 200, DEFAULT_STEPS);
    // The faults must actually happen, and records get through them.
    if env_u64("STRATA_SIM_SEED").is_none() && env_u64("STRATA_SIM_STEPS").is_none() {
        let t = &total;
        assert!(t.crashes > 1_000 && t.pauses > 1_000, "{t:?}");
        assert!(
            t.failovers > 500 && t.admin_elections > 500 && t.fencings > 1_000,
            "{t:?}"
        );
        assert!(t.acked_all > 20_000 && t.committed > 40_000, "{t:?}");
        assert!(t.diverging > 200 && t.truncated_records > 2_000, "{t:?}");
        assert!(t.stale_metadata > 100 && t.alter_ok > 1_000, "{t:?}");
    }
}

#[test]
fn a_seed_replays_identically() {
    let a = format!("{:?}", run_seed(7, 800));
    let b = format!("{:?}", run_seed(7, 800));
    assert_eq!(a, b);
}

#[test]
#[ignore = "long: STRATA_SIM_SEEDS=20000 cargo test -p strata-replica --test simulation -- --ignored long_run"]
fn long_run() {
    let count = env_u64("STRATA_SIM_SEEDS").unwrap_or(5_000);
    let first = env_u64("STRATA_SIM_FIRST_SEED").unwrap_or(1_000_000);
    run_seeds(first, count, DEFAULT_STEPS);
}
