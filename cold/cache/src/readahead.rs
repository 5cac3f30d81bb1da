//! Sequential-reader detection and read-ahead planning.
//!
//! Sans-IO: the [`Tracker`] takes events (a read begins, a prefetch finished, a
//! read finished) and answers with what to do (serve these chunks from what the
//! reader already holds, prefetch those chunks). The cache owns the tasks, the
//! clock and the source.
//!
//! Why chunks are handed to the reader instead of only left in the cache: the
//! memory tier's S3-FIFO promotes a chunk to its main queue when the chunk is
//! accessed again while in the small queue. If a reader's own read of a chunk it
//! had prefetched (or its eight 1 MiB reads of one 8 MiB chunk) counted as such
//! accesses, every chunk of a one-pass scan would look "hot" and the scan would
//! flush the main queue. So a reader keeps the chunk it is reading (`current`)
//! and the chunks prefetched for it (`ahead`), and only an access by *another*
//! reader, or a later revisit, touches the cache's frequency counters.
//!
//! Bounds (the Redpanda promote/evict loop came from unbounded read-ahead of many
//! catch-up consumers evicting each other's prefetched chunks before use):
//! - per reader: at most `readahead_chunks` chunks prefetched and not consumed;
//! - global: at most `max_inflight` prefetch reads at the source, and at most
//!   `budget_chunks` chunks prefetched and not consumed over all readers, shared
//!   fairly: each sequential reader may use `budget / sequential readers`
//!   (at least one chunk, at most `readahead_chunks`).

use std::{
    collections::{BTreeMap, HashMap},
    ops::{Range, RangeInclusive},
    sync::Arc,
    time::Duration,
};

use bytes::Bytes;
use futures::{FutureExt, future::Shared};
use tokio::{sync::oneshot, time::Instant};

/// Identifies one sequential reader, chosen by the caller: typically a hash of
/// (topic partition, consumer connection), so that one consumer reading one
/// partition is one reader. A reader that alternates between objects or jumps
/// around gets no read-ahead.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ReaderId(pub u64);

impl ReaderId {
    /// A read that belongs to no reader: never tracked, never reads ahead, and
    /// every such read is a cache access. Meant for one-off reads: a long scan
    /// read this way in pieces smaller than a chunk looks like reuse to S3-FIFO.
    pub const NONE: ReaderId = ReaderId(u64::MAX);
}

#[derive(Debug, Clone)]
pub(crate) struct TrackerConfig {
    pub chunk_size: u64,
    pub readahead_chunks: u64,
    pub max_inflight: u64,
    pub budget_chunks: u64,
    pub max_readers: usize,
    pub idle_timeout: Duration,
}

/// Which prefetch: a chunk for one generation of one reader.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TicketId {
    pub reader: ReaderId,
    pub generation: u64,
    pub chunk: u64,
}

/// A prefetch the cache should start. Its result goes to `tx` (a read of the
/// same reader that arrives before the prefetch ends waits on it) and then to
/// [`Tracker::prefetch_done`].
#[derive(Debug)]
pub(crate) struct PrefetchTicket {
    pub id: TicketId,
    pub tx: oneshot::Sender<Option<Prefetched>>,
}

/// A finished prefetch, as a read waiting on it sees it.
#[derive(Debug, Clone)]
pub(crate) struct Prefetched {
    pub bytes: Bytes,
    /// Whether the prefetch had to read the source (else the disk tier had it).
    pub from_source: bool,
}

/// The result of a reader's own prefetch in flight; `Ok(None)` or an error if it
/// failed (the reader then looks the chunk up itself).
pub(crate) type PrefetchWait = Shared<oneshot::Receiver<Option<Prefetched>>>;

/// What the tracker decided for one read.
#[derive(Debug, Default)]
pub(crate) struct Plan {
    /// The reader's generation; pass it back to [`Tracker::end_read`].
    pub generation: u64,
    /// For each chunk of the read, in order: the bytes if the reader already
    /// holds them, else `None` (look it up in the cache).
    pub held: Vec<Option<Bytes>>,
    /// For each chunk of the read not in `held`: this reader's own prefetch of
    /// it, if one is in flight. The reader waits for it rather than looking the
    /// chunk up itself, so that its own read-ahead never counts as a second
    /// access in the cache (which would make S3-FIFO promote scan chunks).
    pub waits: Vec<Option<PrefetchWait>>,
    /// How many of `held` came from prefetched chunks (read-ahead hits).
    pub readahead_hits: u64,
    /// How many of `held` came from the chunk the reader was already reading.
    pub current_hits: u64,
    /// Prefetches to start.
    pub prefetch: Vec<PrefetchTicket>,
    /// Prefetches wanted but refused by a global bound.
    pub throttled: u64,
}

#[derive(Debug)]
struct ReaderState {
    object: Arc<str>,
    num_chunks: u64,
    last_start: u64,
    last_end: u64,
    sequential: bool,
    generation: u64,
    current: Option<(u64, Bytes)>,
    ahead: BTreeMap<u64, Bytes>,
    inflight: BTreeMap<u64, PrefetchWait>,
    /// Chunks below this were demanded or prefetched already.
    requested_upto: u64,
    last_active: Instant,
}

/// Snapshot of the tracker for stats.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct TrackerStats {
    pub readers: u64,
    pub sequential_readers: u64,
    pub inflight: u64,
    pub held: u64,
}

#[derive(Debug)]
pub(crate) struct Tracker {
    cfg: TrackerConfig,
    readers: HashMap<ReaderId, ReaderState>,
    /// Prefetch reads in flight at the source (decremented only when they end,
    /// even if their reader moved on: the GET is still running).
    inflight: u64,
    /// Prefetched chunks waiting in readers' `ahead` maps.
    held: u64,
    sequential_readers: u64,
    next_generation: u64,
    last_sweep: Option<Instant>,
}

impl Tracker {
    pub fn new(cfg: TrackerConfig) -> Self {
        Self {
            cfg,
            readers: HashMap::new(),
            inflight: 0,
            held: 0,
            sequential_readers: 0,
            next_generation: 0,
            last_sweep: None,
        }
    }

    pub fn stats(&self) -> TrackerStats {
        TrackerStats {
            readers: self.readers.len() as u64,
            sequential_readers: self.sequential_readers,
            inflight: self.inflight,
            held: self.held,
        }
    }

    fn chunk_of(&self, offset: u64) -> u64 {
        offset / self.cfg.chunk_size
    }

    /// A read of `range` (non-empty, within the object) by `reader` begins.
    /// `is_resident(chunk)` says whether the cache's memory tier already holds a
    /// chunk, in which case prefetching it is pointless.
    pub fn begin_read(
        &mut self,
        reader: ReaderId,
        object: &Arc<str>,
        object_size: u64,
        range: Range<u64>,
        now: Instant,
        mut is_resident: impl FnMut(u64) -> bool,
    ) -> Plan {
        debug_assert!(range.start < range.end && range.end <= object_size);
        let chunks = self.chunk_of(range.start)..=self.chunk_of(range.end - 1);
        let n = chunks.clone().count();
        let mut plan = Plan {
            held: vec![None; n],
            waits: vec![None; n],
            ..Plan::default()
        };
        if reader == ReaderId::NONE {
            return plan;
        }
        self.maybe_sweep(now);

        let (first, last) = (*chunks.start(), *chunks.end());
        let num_chunks = object_size.div_ceil(self.cfg.chunk_size);
        let sequential = match self.readers.get(&reader) {
            Some(s) if *s.object == **object && s.num_chunks == num_chunks => {
                range.start >= s.last_start
                    && first <= self.chunk_of(s.last_end.saturating_sub(1)) + 1
            }
            _ => false,
        };
        if !sequential {
            self.reset_reader(reader, object, num_chunks, now);
        }
        let state = self
            .readers
            .get_mut(&reader)
            .expect("reset_reader inserted the reader");
        let was_sequential = state.sequential;
        state.sequential = sequential;
        state.last_start = range.start;
        state.last_end = range.end;
        state.last_active = now;
        plan.generation = state.generation;

        // Serve what the reader holds; drop prefetched chunks it skipped over.
        let mut released = 0;
        while let Some((&c, _)) = state.ahead.first_key_value() {
            if c >= first {
                break;
            }
            state.ahead.pop_first();
            released += 1;
        }
        for ((slot, wait), c) in plan
            .held
            .iter_mut()
            .zip(plan.waits.iter_mut())
            .zip(chunks.clone())
        {
            if let Some((cur, bytes)) = &state.current
                && *cur == c
            {
                *slot = Some(bytes.clone());
                plan.current_hits += 1;
            } else if let Some(bytes) = state.ahead.remove(&c) {
                *slot = Some(bytes);
                plan.readahead_hits += 1;
                released += 1;
            } else {
                *wait = state.inflight.get(&c).cloned();
            }
        }
        state.requested_upto = state.requested_upto.max(last + 1);
        self.held -= released;
        match (was_sequential, sequential) {
            (false, true) => self.sequential_readers += 1,
            (true, false) => self.sequential_readers -= 1,
            _ => {}
        }

        if sequential && self.cfg.readahead_chunks > 0 {
            self.plan_prefetch(reader, last, &mut plan, &mut is_resident);
        }
        plan
    }

    fn plan_prefetch(
        &mut self,
        reader: ReaderId,
        last: u64,
        plan: &mut Plan,
        is_resident: &mut impl FnMut(u64) -> bool,
    ) {
        // Fair share of the global budget among sequential readers.
        let share = self.cfg.budget_chunks / self.sequential_readers.max(1);
        let allowance = share.clamp(1, self.cfg.readahead_chunks);
        let Some(state) = self.readers.get_mut(&reader) else {
            return;
        };
        let window: RangeInclusive<u64> =
            state.requested_upto.max(last + 1)..=(last + allowance).min(state.num_chunks - 1);
        for c in window {
            if (state.ahead.len() + state.inflight.len()) as u64 >= allowance {
                break;
            }
            if state.inflight.contains_key(&c) || state.ahead.contains_key(&c) {
                continue;
            }
            if is_resident(c) {
                state.requested_upto = c + 1;
                continue;
            }
            if self.inflight >= self.cfg.max_inflight
                || self.inflight + self.held >= self.cfg.budget_chunks
            {
                plan.throttled += 1;
                break;
            }
            let (tx, rx) = oneshot::channel();
            state.inflight.insert(c, rx.shared());
            state.requested_upto = c + 1;
            self.inflight += 1;
            plan.prefetch.push(PrefetchTicket {
                id: TicketId {
                    reader,
                    generation: state.generation,
                    chunk: c,
                },
                tx,
            });
        }
    }

    /// Starts a fresh state for `reader`, releasing whatever it held.
    fn reset_reader(&mut self, reader: ReaderId, object: &Arc<str>, num_chunks: u64, now: Instant) {
        if let Some(old) = self.readers.remove(&reader) {
            self.forget(old);
        } else if self.readers.len() >= self.cfg.max_readers {
            // Forget the least recently active reader. O(readers), but only when a
            // new reader arrives at a full table.
            if let Some(oldest) = self
                .readers
                .iter()
                .min_by_key(|(_, s)| s.last_active)
                .map(|(id, _)| *id)
                && let Some(old) = self.readers.remove(&oldest)
            {
                self.forget(old);
            }
        }
        let generation = self.next_generation;
        self.next_generation += 1;
        self.readers.insert(
            reader,
            ReaderState {
                object: object.clone(),
                num_chunks,
                last_start: 0,
                last_end: 0,
                sequential: false,
                generation,
                current: None,
                ahead: BTreeMap::new(),
                inflight: BTreeMap::new(),
                requested_upto: 0,
                last_active: now,
            },
        );
    }

    /// Releases the budget a removed reader held. Its in-flight prefetches stay
    /// counted in `self.inflight` until they end.
    fn forget(&mut self, old: ReaderState) {
        self.held -= old.ahead.len() as u64;
        if old.sequential {
            self.sequential_readers -= 1;
        }
    }

    fn maybe_sweep(&mut self, now: Instant) {
        // Sweep at most a few times per idle period; each sweep is O(readers).
        let period = self.cfg.idle_timeout / 4;
        if self
            .last_sweep
            .is_some_and(|t| now.saturating_duration_since(t) < period)
        {
            return;
        }
        self.last_sweep = Some(now);
        let idle = self.cfg.idle_timeout;
        let expired: Vec<ReaderId> = self
            .readers
            .iter()
            .filter(|(_, s)| now.saturating_duration_since(s.last_active) >= idle)
            .map(|(id, _)| *id)
            .collect();
        for id in expired {
            if let Some(old) = self.readers.remove(&id) {
                self.forget(old);
            }
        }
    }

    /// A prefetch ended, with the chunk's bytes or (on failure) without.
    pub fn prefetch_done(&mut self, ticket: &TicketId, bytes: Option<Bytes>) {
        self.inflight -= 1;
        let Some(state) = self.readers.get_mut(&ticket.reader) else {
            return;
        };
        if state.generation != ticket.generation || state.inflight.remove(&ticket.chunk).is_none() {
            return;
        }
        let position = state.last_end.saturating_sub(1) / self.cfg.chunk_size;
        match bytes {
            // Still ahead of the reader: hold it for the reader.
            Some(bytes) if ticket.chunk > position => {
                state.ahead.insert(ticket.chunk, bytes);
                self.held += 1;
            }
            // The reader already read past it (it joined this very fetch through
            // the cache's single flight), nothing to hold.
            Some(_) => {}
            // Failed: let a later read ask for it again (demand reads retry anyway).
            None => state.requested_upto = state.requested_upto.min(ticket.chunk),
        }
    }

    /// A read ended; the reader keeps its last chunk so that its next read
    /// within that chunk is served without touching the cache.
    pub fn end_read(&mut self, reader: ReaderId, generation: u64, chunk: u64, bytes: Bytes) {
        if reader == ReaderId::NONE {
            return;
        }
        if let Some(state) = self.readers.get_mut(&reader)
            && state.generation == generation
        {
            state.current = Some((chunk, bytes));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CS: u64 = 100;

    fn tracker(readahead: u64, max_inflight: u64, budget: u64) -> Tracker {
        Tracker::new(TrackerConfig {
            chunk_size: CS,
            readahead_chunks: readahead,
            max_inflight,
            budget_chunks: budget,
            max_readers: 8,
            idle_timeout: Duration::from_secs(60),
        })
    }

    fn obj() -> Arc<str> {
        Arc::from("o")
    }

    fn chunks(plan: &Plan) -> Vec<u64> {
        plan.prefetch.iter().map(|t| t.id.chunk).collect()
    }

    fn read(t: &mut Tracker, r: u64, range: Range<u64>, now: Instant) -> Plan {
        t.begin_read(ReaderId(r), &obj(), 10_000, range, now, |_| false)
    }

    #[test]
    fn first_read_gets_no_readahead_second_sequential_does() {
        let mut t = tracker(4, 16, 64);
        let now = Instant::now();
        assert!(read(&mut t, 1, 0..50, now).prefetch.is_empty());
        // Still within chunk 0, but sequential: prefetch chunks 1..=4.
        let p = read(&mut t, 1, 50..100, now);
        assert_eq!(chunks(&p), vec![1, 2, 3, 4]);
        // Next read in chunk 1: window tops up by one chunk once 1 is consumed.
        let p = read(&mut t, 1, 100..150, now);
        assert_eq!(chunks(&p), Vec::<u64>::new(), "1..=4 already in flight");
        assert_eq!(t.stats().inflight, 4);
    }

    #[test]
    fn prefetched_chunk_is_handed_to_the_reader() {
        let mut t = tracker(2, 16, 64);
        let now = Instant::now();
        read(&mut t, 1, 0..50, now);
        let p = read(&mut t, 1, 50..100, now);
        assert_eq!(chunks(&p), vec![1, 2]);
        for ticket in &p.prefetch {
            t.prefetch_done(
                &ticket.id,
                Some(Bytes::from(vec![ticket.id.chunk as u8; CS as usize])),
            );
        }
        assert_eq!(t.stats().held, 2);
        let p = read(&mut t, 1, 100..200, now);
        assert_eq!(p.readahead_hits, 1);
        assert_eq!(p.held[0].as_ref().unwrap()[0], 1);
        // Chunk 1 consumed: the window (2 chunks) admits chunk 3.
        assert_eq!(chunks(&p), vec![3]);
        assert_eq!(t.stats().held, 1);
    }

    #[test]
    fn a_read_arriving_before_its_prefetch_waits_for_it() {
        let mut t = tracker(2, 16, 64);
        let now = Instant::now();
        read(&mut t, 1, 0..50, now);
        let p = read(&mut t, 1, 50..100, now);
        let mut tickets = p.prefetch.into_iter();
        let first = tickets.next().unwrap();
        // The reader reaches chunk 1 while its prefetch is in flight.
        let p = read(&mut t, 1, 100..150, now);
        assert!(p.held[0].is_none());
        let wait = p.waits[0].clone().expect("waits on its own prefetch");
        let one = Bytes::from_static(b"one");
        first
            .tx
            .send(Some(Prefetched {
                bytes: one.clone(),
                from_source: true,
            }))
            .unwrap();
        t.prefetch_done(&first.id, Some(one.clone()));
        let got = futures::executor::block_on(wait).unwrap().unwrap();
        assert_eq!(got.bytes, one);
        // Already consumed by the waiting read: not held again.
        assert_eq!(t.stats().held, 0);
    }

    #[test]
    fn current_chunk_serves_rereads() {
        let mut t = tracker(0, 16, 64);
        let now = Instant::now();
        let p = read(&mut t, 1, 0..10, now);
        assert!(p.held[0].is_none());
        t.end_read(ReaderId(1), p.generation, 0, Bytes::from_static(&[7; 100]));
        let p = read(&mut t, 1, 10..20, now);
        assert_eq!(p.current_hits, 1);
        assert!(p.held[0].is_some());
    }

    #[test]
    fn random_reader_gets_no_readahead() {
        let mut t = tracker(4, 16, 64);
        let now = Instant::now();
        for start in [5_000, 200, 9_000, 3_000, 7_700, 100, 6_000, 4_200] {
            let p = read(&mut t, 1, start..start + 50, now);
            assert!(p.prefetch.is_empty(), "read at {start} prefetched");
        }
        assert_eq!(t.stats().sequential_readers, 0);
    }

    #[test]
    fn jump_releases_held_chunks() {
        let mut t = tracker(3, 16, 64);
        let now = Instant::now();
        read(&mut t, 1, 0..50, now);
        let p = read(&mut t, 1, 50..100, now);
        for ticket in &p.prefetch {
            t.prefetch_done(&ticket.id, Some(Bytes::from_static(b"x")));
        }
        assert_eq!(t.stats().held, 3);
        read(&mut t, 1, 8_000..8_050, now);
        assert_eq!(t.stats().held, 0);
        assert_eq!(t.stats().sequential_readers, 0);
    }

    #[test]
    fn stale_prefetch_after_jump_is_dropped() {
        let mut t = tracker(2, 16, 64);
        let now = Instant::now();
        read(&mut t, 1, 0..50, now);
        let p = read(&mut t, 1, 50..100, now);
        read(&mut t, 1, 8_000..8_050, now);
        for ticket in &p.prefetch {
            t.prefetch_done(&ticket.id, Some(Bytes::from_static(b"x")));
        }
        assert_eq!(
            t.stats(),
            TrackerStats {
                readers: 1,
                sequential_readers: 0,
                inflight: 0,
                held: 0
            }
        );
    }

    #[test]
    fn global_inflight_bound_and_fair_share() {
        // Budget of 6 chunks shared by 3 sequential readers: 2 each.
        let mut t = tracker(4, 100, 6);
        let now = Instant::now();
        for r in 1..=3 {
            read(&mut t, r, 0..50, now);
        }
        let mut issued = 0;
        for r in 1..=3 {
            let p = read(&mut t, r, 50..100, now);
            issued += p.prefetch.len();
            assert!(p.prefetch.len() <= 4);
        }
        assert!(t.stats().inflight <= 6);
        assert_eq!(issued as u64, t.stats().inflight);
        // The in-flight bound applies even when the budget has room.
        let mut t = tracker(4, 2, 64);
        read(&mut t, 1, 0..50, now);
        let p = read(&mut t, 1, 50..100, now);
        assert_eq!(chunks(&p), vec![1, 2], "max_inflight = 2");
        assert_eq!(p.throttled, 1);
    }

    #[test]
    fn resident_chunks_are_not_prefetched() {
        let mut t = tracker(4, 16, 64);
        let now = Instant::now();
        t.begin_read(ReaderId(1), &obj(), 10_000, 0..50, now, |_| false);
        let p = t.begin_read(ReaderId(1), &obj(), 10_000, 50..100, now, |c| c % 2 == 1);
        assert_eq!(chunks(&p), vec![2, 4]);
    }

    #[test]
    fn window_stops_at_the_last_chunk() {
        let mut t = tracker(4, 16, 64);
        let now = Instant::now();
        read(&mut t, 1, 9_700..9_750, now);
        let p = read(&mut t, 1, 9_750..9_800, now);
        assert_eq!(chunks(&p), vec![98, 99]);
    }

    #[test]
    fn idle_readers_are_forgotten() {
        let mut t = tracker(2, 16, 64);
        let now = Instant::now();
        read(&mut t, 1, 0..50, now);
        let p = read(&mut t, 1, 50..100, now);
        for ticket in &p.prefetch {
            t.prefetch_done(&ticket.id, Some(Bytes::from_static(b"x")));
        }
        assert_eq!(t.stats().held, 2);
        read(&mut t, 2, 0..50, now + Duration::from_secs(61));
        assert_eq!(t.stats().readers, 1);
        assert_eq!(t.stats().held, 0);
    }

    #[test]
    fn reader_table_is_bounded() {
        let mut t = tracker(2, 16, 64);
        let now = Instant::now();
        for r in 0..20 {
            read(&mut t, r, 0..50, now + Duration::from_millis(r));
        }
        assert_eq!(t.stats().readers, 8);
    }

    #[test]
    fn none_reader_is_not_tracked() {
        let mut t = tracker(4, 16, 64);
        let now = Instant::now();
        for start in [0, 50, 100, 150] {
            let p = t.begin_read(
                ReaderId::NONE,
                &obj(),
                10_000,
                start..start + 50,
                now,
                |_| false,
            );
            assert!(p.prefetch.is_empty());
        }
        assert_eq!(t.stats().readers, 0);
    }
}
