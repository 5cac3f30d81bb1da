//! A seeded, sans-IO model of one lagging consumer group draining through the tier:
//! consumers, the chunk cache with its read-ahead, and the bucket's GET latency and
//! request limits. It predicts the drain time and the GETs it costs where the plan's
//! arithmetic assumes consumers are the only limit.
//!
//! The model, per partition: the group's position starts `lag` behind the live end. A
//! record older than `local_retention` at the moment it is read is only in the bucket:
//! reading its chunk is a cache hit or a GET (first-byte latency drawn from a lognormal
//! with the given median and p99, plus the chunk at `get_bytes_per_sec`); a newer one
//! comes from local disk. Live traffic keeps arriving at `events_per_sec`, so the live
//! end moves; the partition is drained when its position reaches it.
//!
//! Each consumer processes `consumer_bytes_per_sec` of its partitions' records, one
//! chunk at a time, taking the next partition (round robin) whose next chunk is ready;
//! it waits when none is. Reading chunk k of a partition from the tier asks for chunks
//! k+1..=k+read_ahead too (as `ChunkCache`'s per-reader read-ahead does), within its
//! budget of chunks read ahead and not yet read (shared fairly: `budget / readers` each,
//! as the cache shares it) and at most `max_inflight_prefetches` such GETs at once, both
//! per broker (partition p is led by broker p % brokers); a consumer's own GETs go first. GETs start at most
//! `bucket_get_limit` a second.
//!
//! Deterministic: the same config and seed give the same result (splitmix64, Box-Muller).

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap, VecDeque};

use serde::{Deserialize, Serialize};

/// The drain to model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SimConfig {
    pub partitions: u32,
    /// Brokers leading the partitions (each has its own cache and read-ahead budget).
    pub brokers: u32,
    pub consumers: u32,
    pub events_per_sec: f64,
    pub event_bytes: f64,
    /// How far behind the group starts, and how long records stay on local disk.
    pub lag_secs: f64,
    pub local_retention_secs: f64,
    /// Bytes per second one consumer processes.
    pub consumer_bytes_per_sec: f64,
    pub chunk_bytes: f64,
    /// Chunks asked for ahead of the one read, per partition.
    pub read_ahead: u32,
    /// Bytes of read-ahead chunks asked for and not yet read, over one broker's readers
    /// (its cache's read-ahead budget): read-ahead waits beyond it, so it never evicts a
    /// chunk before its reader gets to it.
    pub readahead_budget_bytes: f64,
    /// First-byte latency of a GET: median and 99th percentile, seconds.
    pub get_latency_median_secs: f64,
    pub get_latency_p99_secs: f64,
    /// Transfer rate of one GET once it starts sending.
    pub get_bytes_per_sec: f64,
    /// GETs the bucket starts per second (0: no limit).
    pub bucket_get_limit: f64,
    /// Read-ahead GETs in flight at once (0: no limit); a reader's own GETs are not
    /// limited.
    pub max_inflight_prefetches: u32,
    pub seed: u64,
    /// Give up after this much simulated time (a group that never drains).
    pub max_secs: f64,
}

/// What the model predicts.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SimResult {
    /// When the last partition reached the live end; `None` if not within `max_secs`.
    pub drain_secs: Option<f64>,
    pub gets: u64,
    pub get_bytes: f64,
    /// Tier chunks read ahead and ready when their consumer came for them.
    pub cache_hits: u64,
    pub tier_chunks: u64,
    pub local_chunks: u64,
    /// Of the consumers' time until the drain, the share spent waiting for GETs.
    pub consumer_wait_fraction: f64,
}

/// splitmix64: small, fast, and good enough to draw latencies from.
#[derive(Debug, Clone)]
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in (0, 1].
    fn unit(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 1.0) / (1u64 << 53) as f64
    }

    fn normal(&mut self) -> f64 {
        let (u1, u2) = (self.unit(), self.unit());
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }
}

/// The z-score of the 99th percentile of a standard normal.
const Z99: f64 = 2.326_347_874;

/// A lognormal latency with this median and 99th percentile.
fn latency(rng: &mut Rng, median: f64, p99: f64) -> f64 {
    if median <= 0.0 {
        return 0.0;
    }
    let sigma = (p99.max(median) / median).ln() / Z99;
    median * (sigma * rng.normal()).exp()
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Event {
    /// A GET of (partition, chunk) completes; whether it was read-ahead.
    GetDone(u32, u64, bool),
    /// A consumer finished processing a chunk.
    ConsumerFree(u32),
    /// A rate-limited GET may start.
    Token,
}

#[derive(Debug, Clone, Copy, PartialEq)]
struct At(f64, u64, Event);

impl Eq for At {}

impl Ord for At {
    fn cmp(&self, other: &Self) -> Ordering {
        // A min-heap on time, then on insertion order (deterministic ties).
        other
            .0
            .total_cmp(&self.0)
            .then_with(|| other.1.cmp(&self.1))
    }
}

impl PartialOrd for At {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Queued,
    InFlight,
    Ready,
}

/// A chunk asked for, and whether by read-ahead (counted in its budget until read).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Chunk {
    state: State,
    prefetch: bool,
}

struct Sim<'a> {
    c: &'a SimConfig,
    rng: Rng,
    now: f64,
    seq: u64,
    events: BinaryHeap<At>,
    /// Per partition: the group's position (bytes from where it started).
    position: Vec<f64>,
    done: Vec<bool>,
    /// Bytes per second arriving in one partition, and the lag in bytes at the start.
    partition_rate: f64,
    start_lag: f64,
    /// Position below which a record was only in the bucket at t=0 (the edge moves up
    /// at `partition_rate`).
    tier_edge: f64,
    cache: HashMap<(u32, u64), Chunk>,
    /// Per broker: read-ahead chunks asked for and not yet read (the budget is per
    /// broker, in chunks), read-ahead GETs waiting for a slot and in flight. Partition p
    /// is led by broker p % brokers.
    prefetched: Vec<usize>,
    budget_chunks: usize,
    /// Per partition: its read-ahead chunks not yet read; per broker: partitions still
    /// draining (the readers the budget is shared among, `budget / readers` each, as
    /// the cache shares it).
    prefetched_by: Vec<usize>,
    readers: Vec<usize>,
    ahead: Vec<VecDeque<(u32, u64)>>,
    inflight_prefetches: Vec<u32>,
    /// Readers' own GETs waiting for a token of the bucket's rate.
    demand: VecDeque<(u32, u64)>,
    next_token: f64,
    token_pending: bool,
    /// Per consumer: its partitions, the round-robin cursor, whether it is processing,
    /// and since when it has waited for a chunk.
    owned: Vec<Vec<u32>>,
    cursor: Vec<usize>,
    busy: Vec<bool>,
    waiting_since: Vec<Option<f64>>,
    waited: f64,
    owner: Vec<u32>,
    result: SimResult,
}

impl Sim<'_> {
    fn push(&mut self, at: f64, e: Event) {
        self.seq += 1;
        self.events.push(At(at, self.seq, e));
    }

    fn live_end(&self) -> f64 {
        self.start_lag + self.partition_rate * self.now
    }

    fn chunk_of(&self, position: f64) -> u64 {
        (position / self.c.chunk_bytes).floor() as u64
    }

    /// Whether the record at `position` is only in the bucket now.
    fn in_tier(&self, position: f64) -> bool {
        position < self.tier_edge + self.partition_rate * self.now
    }

    /// A consumer needs chunk k of partition p now.
    fn need(&mut self, p: u32, k: u64) {
        let b = self.broker_of(p);
        match self.cache.get_mut(&(p, k)) {
            Some(c) if c.state == State::Queued && c.prefetch => {
                // Asked for ahead but not started: read it now instead.
                c.prefetch = false;
                self.prefetched[b] -= 1;
                self.prefetched_by[p as usize] -= 1;
            }
            Some(_) => return,
            None => {
                self.cache.insert(
                    (p, k),
                    Chunk {
                        state: State::Queued,
                        prefetch: false,
                    },
                );
            }
        }
        self.demand.push_back((p, k));
        self.start_gets();
    }

    /// Read-ahead asks for chunk k of partition p, within the budget.
    fn read_ahead(&mut self, p: u32, k: u64) {
        let b = self.broker_of(p);
        let share = (self.budget_chunks / self.readers[b].max(1)).max(1);
        if self.cache.contains_key(&(p, k))
            || self.prefetched[b] >= self.budget_chunks
            || self.prefetched_by[p as usize] >= share
        {
            return;
        }
        self.cache.insert(
            (p, k),
            Chunk {
                state: State::Queued,
                prefetch: true,
            },
        );
        self.prefetched[b] += 1;
        self.prefetched_by[p as usize] += 1;
        self.ahead[b].push_back((p, k));
        self.start_gets();
    }

    /// Takes a token of the bucket's request rate, or schedules a retry when it has one.
    fn token(&mut self) -> bool {
        if self.c.bucket_get_limit <= 0.0 {
            return true;
        }
        if self.now < self.next_token {
            if !self.token_pending {
                self.token_pending = true;
                let at = self.next_token;
                self.push(at, Event::Token);
            }
            return false;
        }
        self.next_token = self.now.max(self.next_token) + 1.0 / self.c.bucket_get_limit;
        true
    }

    fn start_gets(&mut self) {
        // A reader's own GETs first.
        while let Some(&(p, k)) = self.demand.front() {
            if !self.token() {
                return;
            }
            self.demand.pop_front();
            self.begin(p, k, false);
        }
        for b in 0..self.ahead.len() {
            while let Some(&(p, k)) = self.ahead[b].front() {
                let still = self
                    .cache
                    .get(&(p, k))
                    .is_some_and(|c| c.state == State::Queued && c.prefetch);
                if !still {
                    // Promoted to a demand read since.
                    self.ahead[b].pop_front();
                    continue;
                }
                if self.c.max_inflight_prefetches > 0
                    && self.inflight_prefetches[b] >= self.c.max_inflight_prefetches
                {
                    break;
                }
                if !self.token() {
                    return;
                }
                self.ahead[b].pop_front();
                self.inflight_prefetches[b] += 1;
                self.begin(p, k, true);
            }
        }
    }

    /// Starts the GET of chunk k of partition p.
    fn begin(&mut self, p: u32, k: u64, prefetch: bool) {
        if let Some(c) = self.cache.get_mut(&(p, k)) {
            c.state = State::InFlight;
        }
        self.result.gets += 1;
        self.result.get_bytes += self.c.chunk_bytes;
        let first_byte = latency(
            &mut self.rng,
            self.c.get_latency_median_secs,
            self.c.get_latency_p99_secs,
        );
        let transfer = if self.c.get_bytes_per_sec > 0.0 {
            self.c.chunk_bytes / self.c.get_bytes_per_sec
        } else {
            0.0
        };
        let at = self.now + first_byte + transfer;
        self.push(at, Event::GetDone(p, k, prefetch));
    }

    fn broker_of(&self, p: u32) -> usize {
        (p % self.ahead.len() as u32) as usize
    }

    /// Consumer `i` takes the next partition with a chunk it can process now.
    fn schedule(&mut self, i: u32) {
        let iu = i as usize;
        if self.busy[iu] {
            return;
        }
        let n = self.owned[iu].len();
        for step in 0..n {
            let slot = (self.cursor[iu] + step) % n;
            let p = self.owned[iu][slot];
            let pu = p as usize;
            if self.done[pu] {
                continue;
            }
            let pos = self.position[pu];
            let end = self.live_end();
            if pos >= end {
                // Caught up with the live end, for good: it outpaces live traffic.
                self.done[pu] = true;
                let b = self.broker_of(p);
                self.readers[b] -= 1;
                continue;
            }
            let k = self.chunk_of(pos);
            let mut take = (((k + 1) as f64 * self.c.chunk_bytes).min(end) - pos).max(1.0);
            if self.in_tier(pos) {
                match self.cache.get(&(p, k)).copied() {
                    Some(Chunk {
                        state: State::Ready,
                        prefetch,
                    }) => {
                        self.cache.remove(&(p, k));
                        if prefetch {
                            let b = self.broker_of(p);
                            self.prefetched[b] -= 1;
                            self.prefetched_by[pu] -= 1;
                            self.result.cache_hits += 1;
                        }
                    }
                    Some(Chunk {
                        state: State::Queued,
                        prefetch: true,
                    })
                    | None => {
                        // Not asked for, or read-ahead still waiting for a slot: the
                        // reader asks for it itself.
                        self.need(p, k);
                        continue;
                    }
                    Some(_) => continue,
                }
                self.result.tier_chunks += 1;
                for a in 1..=u64::from(self.c.read_ahead) {
                    if self.in_tier((k + a) as f64 * self.c.chunk_bytes) {
                        self.read_ahead(p, k + a);
                    }
                }
                self.position[pu] = pos + take;
            } else {
                // Local disk: no GETs, so a longer step (up to 64 chunks, or the tier
                // edge) costs the model one event instead of 64.
                let run = (end - pos).min(64.0 * self.c.chunk_bytes).max(take);
                self.result.local_chunks += (run / self.c.chunk_bytes).ceil() as u64;
                take = run;
                self.position[pu] = pos + take;
            }
            self.cursor[iu] = (slot + 1) % n;
            self.busy[iu] = true;
            if let Some(since) = self.waiting_since[iu].take() {
                self.waited += self.now - since;
            }
            let at = self.now + take / self.c.consumer_bytes_per_sec;
            self.push(at, Event::ConsumerFree(i));
            return;
        }
        if self.waiting_since[iu].is_none()
            && self.owned[iu].iter().any(|p| !self.done[*p as usize])
        {
            self.waiting_since[iu] = Some(self.now);
        }
    }

    fn run(mut self) -> SimResult {
        for i in 0..self.owned.len() as u32 {
            self.schedule(i);
        }
        let mut drained_at = None;
        while let Some(At(at, _, e)) = self.events.pop() {
            if at > self.c.max_secs {
                break;
            }
            self.now = at;
            match e {
                Event::GetDone(p, k, prefetch) => {
                    if prefetch {
                        let b = self.broker_of(p);
                        self.inflight_prefetches[b] -= 1;
                    }
                    if let Some(c) = self.cache.get_mut(&(p, k)) {
                        c.state = State::Ready;
                    }
                    let owner = self.owner[p as usize];
                    self.schedule(owner);
                    self.start_gets();
                }
                Event::ConsumerFree(i) => {
                    self.busy[i as usize] = false;
                    self.schedule(i);
                }
                Event::Token => {
                    self.token_pending = false;
                    self.start_gets();
                }
            }
            if self.done.iter().all(|d| *d) {
                drained_at = Some(self.now);
                break;
            }
        }
        let consumers = self.owned.len() as f64;
        let span = drained_at.unwrap_or(self.now).max(f64::MIN_POSITIVE);
        let mut waited = self.waited;
        for since in self.waiting_since.iter().flatten() {
            waited += span - since;
        }
        self.result.drain_secs = drained_at;
        self.result.consumer_wait_fraction = (waited / (consumers * span)).clamp(0.0, 1.0);
        self.result
    }
}

/// Runs the model.
pub fn simulate(c: &SimConfig) -> SimResult {
    let partitions = c.partitions.max(1);
    let consumers = c.consumers.clamp(1, partitions);
    let partition_rate = c.events_per_sec * c.event_bytes / f64::from(partitions);
    let brokers = c.brokers.clamp(1, partitions) as usize;
    let mut owned = vec![Vec::new(); consumers as usize];
    let mut owner = Vec::with_capacity(partitions as usize);
    for p in 0..partitions {
        owned[(p % consumers) as usize].push(p);
        owner.push(p % consumers);
    }
    let sim = Sim {
        c,
        rng: Rng(c.seed),
        now: 0.0,
        seq: 0,
        events: BinaryHeap::new(),
        position: vec![0.0; partitions as usize],
        done: vec![false; partitions as usize],
        partition_rate,
        start_lag: partition_rate * c.lag_secs,
        tier_edge: partition_rate * (c.lag_secs - c.local_retention_secs),
        cache: HashMap::new(),
        prefetched: vec![0; brokers],
        prefetched_by: vec![0; partitions as usize],
        readers: (0..brokers)
            .map(|b| {
                (0..partitions as usize)
                    .filter(|p| p % brokers == b)
                    .count()
            })
            .collect(),
        budget_chunks: (c.readahead_budget_bytes / c.chunk_bytes).floor() as usize,
        demand: VecDeque::new(),
        ahead: vec![VecDeque::new(); brokers],
        inflight_prefetches: vec![0; brokers],
        next_token: 0.0,
        token_pending: false,
        cursor: vec![0; consumers as usize],
        busy: vec![false; consumers as usize],
        waiting_since: vec![None; consumers as usize],
        waited: 0.0,
        owned,
        owner,
        result: SimResult {
            drain_secs: None,
            gets: 0,
            get_bytes: 0.0,
            cache_hits: 0,
            tier_chunks: 0,
            local_chunks: 0,
            consumer_wait_fraction: 0.0,
        },
    };
    sim.run()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> SimConfig {
        SimConfig {
            partitions: 8,
            brokers: 1,
            consumers: 4,
            events_per_sec: 10_000.0,
            event_bytes: 1_000.0,
            lag_secs: 600.0,
            local_retention_secs: 60.0,
            consumer_bytes_per_sec: 10e6,
            chunk_bytes: 1e6,
            read_ahead: 4,
            readahead_budget_bytes: 256e6,
            get_latency_median_secs: 0.02,
            get_latency_p99_secs: 0.1,
            get_bytes_per_sec: 100e6,
            bucket_get_limit: 0.0,
            max_inflight_prefetches: 16,
            seed: 1,
            max_secs: 1e6,
        }
    }

    /// Consumers are the limit when the tier keeps up: the drain takes backlog over
    /// surplus, as the plan's arithmetic says.
    #[test]
    fn with_a_fast_tier_consumers_set_the_pace() {
        let c = base();
        let r = simulate(&c);
        let backlog = c.events_per_sec * c.event_bytes * c.lag_secs;
        let surplus = 4.0 * c.consumer_bytes_per_sec - c.events_per_sec * c.event_bytes;
        let want = backlog / surplus;
        let got = r.drain_secs.unwrap();
        assert!((got - want).abs() / want < 0.02, "{got} vs {want}: {r:?}");
        assert!(r.consumer_wait_fraction < 0.05, "{r:?}");
        // Every chunk older than local retention came from the bucket once.
        assert_eq!(r.gets, r.tier_chunks, "{r:?}");
        assert!(r.cache_hits > r.tier_chunks / 2, "{r:?}");
    }

    /// Without read-ahead each tier chunk waits a whole GET: slower, and the consumers
    /// wait; read-ahead hides the latency.
    #[test]
    fn read_ahead_hides_get_latency() {
        let slow = SimConfig {
            get_latency_median_secs: 0.2,
            get_latency_p99_secs: 0.5,
            read_ahead: 0,
            ..base()
        };
        let without = simulate(&slow);
        let with = simulate(&SimConfig {
            read_ahead: 8,
            ..slow.clone()
        });
        let (a, b) = (without.drain_secs.unwrap(), with.drain_secs.unwrap());
        assert!(a > 1.5 * b, "no read-ahead {a} s, read-ahead {b} s");
        assert!(without.consumer_wait_fraction > 0.3, "{without:?}");
    }

    /// The bucket's request limit caps the drain: 20 GETs of 1 MB a second against 10
    /// MB/s of live traffic gains 10 MB/s, three times slower than the consumers could.
    #[test]
    fn the_bucket_limit_caps_the_drain() {
        let c = SimConfig {
            bucket_get_limit: 20.0,
            local_retention_secs: 1.0,
            ..base()
        };
        let r = simulate(&c);
        let got = r.drain_secs.unwrap();
        let backlog = c.events_per_sec * c.event_bytes * c.lag_secs;
        let want = backlog / (20e6 - 10e6);
        assert!(
            got >= want * 0.98 && got <= want * 1.05,
            "{got} s, want {want}: {r:?}"
        );
        // The consumers could take 40 MB/s: they wait half the time.
        assert!(r.consumer_wait_fraction > 0.4, "{r:?}");
    }

    /// A read-ahead budget of a few chunks for many readers hides little latency.
    #[test]
    fn a_small_read_ahead_budget_hides_less() {
        let slow = SimConfig {
            get_latency_median_secs: 0.2,
            get_latency_p99_secs: 0.5,
            read_ahead: 8,
            ..base()
        };
        let big = simulate(&slow);
        let small = simulate(&SimConfig {
            readahead_budget_bytes: 2e6,
            ..slow
        });
        let (a, b) = (small.drain_secs.unwrap(), big.drain_secs.unwrap());
        assert!(a > 1.2 * b, "budget of 2 chunks {a} s, of 256 {b} s");
        assert_eq!(small.gets, small.tier_chunks, "{small:?}");
    }

    /// The read-ahead budget and slots are each broker's: the same partitions over
    /// more brokers get more of both.
    #[test]
    fn more_brokers_bring_more_read_ahead() {
        let c = SimConfig {
            partitions: 40,
            consumers: 40,
            events_per_sec: 40_000.0,
            get_latency_median_secs: 0.2,
            get_latency_p99_secs: 0.5,
            readahead_budget_bytes: 16e6,
            max_inflight_prefetches: 4,
            ..base()
        };
        let one = simulate(&c);
        let ten = simulate(&SimConfig { brokers: 10, ..c });
        let (a, b) = (one.drain_secs.unwrap(), ten.drain_secs.unwrap());
        assert!(a > 1.2 * b, "1 broker {a} s, 10 brokers {b} s");
        let hit = |r: &SimResult| r.cache_hits as f64 / r.tier_chunks as f64;
        assert!(hit(&ten) > hit(&one), "{one:?} {ten:?}");
    }

    /// Consumers that do not outpace live traffic never drain.
    #[test]
    fn too_few_consumers_never_drain() {
        let r = simulate(&SimConfig {
            consumer_bytes_per_sec: 2e6,
            max_secs: 2_000.0,
            ..base()
        });
        assert_eq!(r.drain_secs, None, "{r:?}");
    }

    #[test]
    fn the_same_seed_gives_the_same_answer() {
        let a = simulate(&base());
        let b = simulate(&base());
        assert_eq!(a, b);
        let c = simulate(&SimConfig {
            seed: 2,
            get_latency_median_secs: 0.3,
            read_ahead: 0,
            ..base()
        });
        assert_ne!(a.drain_secs, c.drain_secs);
    }
}
