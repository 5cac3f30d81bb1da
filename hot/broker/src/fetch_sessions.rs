//! Fetch sessions (KIP-227): a client that fetches the same partitions over and over
//! (a follower of thousands of partitions, a consumer) names them once; later fetches
//! carry only what changed (a partition's fetch offset moved, one was added or
//! forgotten), and answers carry only partitions with something new (records, a moved
//! high-water mark, last stable offset or log start, an error). A follower of 5,000
//! idle partitions sends and receives a few dozen bytes per fetch instead of ~150 KB.
//!
//! The protocol, as Kafka's `FetchSession.scala`:
//! - epoch -1 (final): no session; a named session is closed. A full fetch, answered
//!   in full, with session id 0.
//! - epoch 0 (initial): a named session is closed, the fetch is full, and the answer
//!   creates a session (its id in the answer; 0 when the cache has no room).
//! - epoch n > 0: an incremental fetch on a session, which must expect epoch n
//!   (FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH otherwise). The request's
//!   partitions are added to the session or update it, its forgotten ones leave it; every
//!   partition in the session is fetched; only those with news are answered, and those
//!   that brought records move to the back of the session so that a response size limit
//!   rotates among partitions.
//!
//! The cache is bounded twice: at most `slots` sessions and `max_partitions` partitions
//! across them (each is a few dozen bytes; a peer's partitions are bounded by the bytes
//! of the requests that named them). A new session makes room by evicting sessions idle
//! for two minutes, or, for a follower (privileged, as Kafka's), a consumer's; otherwise
//! it is not created and the client keeps sending full fetches. An incremental fetch that
//! would grow its session past the bound closes it (answered in full, session id 0).
//! A session belongs to the principal that created it.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::fetch_response::PartitionData;
use kafka_protocol::messages::{FetchRequest, FetchResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use strata_proto::ErrorCode;
use uuid::Uuid;

/// A session unused this long may be evicted for a new one (Kafka's
/// min.incremental.fetch.session.eviction.ms).
const EVICTABLE_AFTER: Duration = Duration::from_secs(120);

/// Fetch API versions with sessions (v7+).
const FIRST_SESSION_VERSION: i16 = 7;

/// How a session names a topic: by id from Fetch v13, by name before.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum TopicRef {
    Id(Uuid),
    Name(Arc<str>),
}

pub(crate) type Key = (TopicRef, i32);

/// Per topic of an effective request, per partition: the session's keys, and the marks
/// each was last answered with.
type Layout = (Vec<Vec<Key>>, Vec<Vec<Option<Sent>>>);

/// What the client asks of a partition.
#[derive(Clone, Debug, PartialEq)]
struct Params {
    fetch_offset: i64,
    current_leader_epoch: i32,
    last_fetched_epoch: i32,
    log_start_offset: i64,
    max_bytes: i32,
}

impl Params {
    fn of(fp: &FetchPartition) -> Params {
        Params {
            fetch_offset: fp.fetch_offset,
            current_leader_epoch: fp.current_leader_epoch,
            last_fetched_epoch: fp.last_fetched_epoch,
            log_start_offset: fp.log_start_offset,
            max_bytes: fp.partition_max_bytes,
        }
    }

    fn to_fetch_partition(&self, partition: i32) -> FetchPartition {
        let mut fp = FetchPartition::default();
        fp.partition = partition;
        fp.fetch_offset = self.fetch_offset;
        fp.current_leader_epoch = self.current_leader_epoch;
        fp.last_fetched_epoch = self.last_fetched_epoch;
        fp.log_start_offset = self.log_start_offset;
        fp.partition_max_bytes = self.max_bytes;
        fp
    }
}

/// The marks the last answer gave a partition. `None` until it has been answered, and
/// after an error, so that it is answered again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Sent {
    high_watermark: i64,
    last_stable_offset: i64,
    log_start_offset: i64,
}

impl Sent {
    fn of(pd: &PartitionData) -> Option<Sent> {
        (pd.error_code == 0).then_some(Sent {
            high_watermark: pd.high_watermark,
            last_stable_offset: pd.last_stable_offset,
            log_start_offset: pd.log_start_offset,
        })
    }
}

struct Cached {
    /// Position in the session's order.
    seq: u64,
    params: Params,
    sent: Option<Sent>,
}

struct Session {
    principal: Arc<str>,
    /// A follower's (replica fetches may evict consumers' sessions).
    privileged: bool,
    /// Created at Fetch v13+ (topics by id); a session is used at one kind of version.
    uses_ids: bool,
    /// The epoch the next request must carry.
    epoch: i32,
    parts: HashMap<Key, Cached>,
    order: BTreeMap<u64, Key>,
    next_seq: u64,
    last_used: Instant,
}

impl Session {
    /// Adds a partition at the back, or updates what is asked of it. Whether it is new.
    fn upsert(&mut self, key: Key, params: Params) -> bool {
        if let Some(c) = self.parts.get_mut(&key) {
            c.params = params;
            return false;
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        self.order.insert(seq, key.clone());
        self.parts.insert(
            key,
            Cached {
                seq,
                params,
                sent: None,
            },
        );
        true
    }

    fn remove(&mut self, key: &Key) -> bool {
        match self.parts.remove(key) {
            Some(c) => {
                self.order.remove(&c.seq);
                true
            }
            None => false,
        }
    }

    /// Moves a partition to the back of the order.
    fn move_to_back(&mut self, key: &Key) {
        if let Some(c) = self.parts.get_mut(key) {
            self.order.remove(&c.seq);
            c.seq = self.next_seq;
            self.next_seq += 1;
            self.order.insert(c.seq, key.clone());
        }
    }
}

/// How a fetch is answered.
pub(crate) enum Kind {
    /// In full, without a session (session id 0).
    Sessionless,
    /// In full; the answer creates a session for `principal`.
    Full {
        privileged: bool,
        uses_ids: bool,
        principal: Arc<str>,
    },
    /// Only partitions with news, on session `id` (which now expects `next_epoch`).
    Incremental {
        id: i32,
        next_epoch: i32,
        principal: Arc<str>,
        /// The session's partitions, as the effective request lists them.
        keys: Vec<Vec<Key>>,
        sent: Vec<Vec<Option<Sent>>>,
    },
    /// The session was closed while answering (it would outgrow the cache): in full,
    /// session id 0.
    Closed,
}

pub struct FetchSessions {
    slots: usize,
    max_partitions: usize,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    sessions: HashMap<i32, Session>,
    /// Partitions across all sessions.
    partitions: usize,
}

impl std::fmt::Debug for FetchSessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (sessions, partitions) = self.usage();
        f.debug_struct("FetchSessions")
            .field("slots", &self.slots)
            .field("max_partitions", &self.max_partitions)
            .field("sessions", &sessions)
            .field("partitions", &partitions)
            .finish()
    }
}

impl Inner {
    fn remove(&mut self, id: i32) {
        if let Some(s) = self.sessions.remove(&id) {
            self.partitions -= s.parts.len();
        }
    }

    /// Evicts sessions until one of `needed` partitions fits; false if it cannot.
    fn make_room(
        &mut self,
        slots: usize,
        max_partitions: usize,
        needed: usize,
        privileged: bool,
        now: Instant,
    ) -> bool {
        if slots == 0 || needed > max_partitions {
            return false;
        }
        while self.sessions.len() >= slots || self.partitions + needed > max_partitions {
            let lru = |eligible: &dyn Fn(&Session) -> bool| {
                self.sessions
                    .iter()
                    .filter(|(_, s)| eligible(s))
                    .min_by_key(|(_, s)| s.last_used)
                    .map(|(id, _)| *id)
            };
            let victim = lru(&|s| now.saturating_duration_since(s.last_used) >= EVICTABLE_AFTER)
                .or_else(|| privileged.then(|| lru(&|s| !s.privileged)).flatten());
            match victim {
                Some(id) => {
                    self.remove(id);
                    metrics::counter!("strata_fetch_sessions_evicted_total").increment(1);
                }
                None => return false,
            }
        }
        true
    }
}

fn topic_ref(uses_ids: bool, id: Uuid, name: &TopicName) -> TopicRef {
    if uses_ids {
        TopicRef::Id(id)
    } else {
        TopicRef::Name(Arc::from(name.0.as_str()))
    }
}

/// A fetch response's record sets past a partition's first piece, by (topic index,
/// partition index) in the response (the fetch response frame splices them in uncopied).
pub(crate) type MoreRecords = HashMap<(usize, usize), Vec<bytes::Bytes>>;

/// The next epoch after `epoch` (0, the full fetch that made the session, is followed
/// by 1; past i32::MAX it wraps to 1, as Kafka's).
pub(crate) fn next_epoch(epoch: i32) -> i32 {
    if epoch == i32::MAX { 1 } else { epoch + 1 }
}

impl FetchSessions {
    /// A cache of at most `slots` sessions (0: no sessions) and `max_partitions`
    /// partitions across them.
    pub fn new(slots: usize, max_partitions: usize) -> FetchSessions {
        FetchSessions {
            slots,
            max_partitions,
            inner: Mutex::new(Inner::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sessions and the partitions they hold.
    pub fn usage(&self) -> (usize, usize) {
        let inner = self.lock();
        (inner.sessions.len(), inner.partitions)
    }

    /// Reads a fetch's session fields: how the fetch is answered, and for an
    /// incremental one the request it stands for (the session's partitions, in its
    /// order). An error is the fetch's top-level error.
    pub(crate) fn begin(
        &self,
        version: i16,
        req: &FetchRequest,
        principal: &Arc<str>,
        privileged: bool,
        now: Instant,
    ) -> Result<(Kind, Option<FetchRequest>), ErrorCode> {
        let sessionless = (Kind::Sessionless, None);
        let count = |kind: &'static str| {
            metrics::counter!("strata_fetch_requests_total", "session" => kind).increment(1)
        };
        if version < FIRST_SESSION_VERSION {
            count("none");
            return Ok(sessionless);
        }
        let (id, epoch) = (req.session_id, req.session_epoch);
        if epoch == -1 || epoch == 0 {
            if id != 0 {
                self.lock().remove(id);
            }
            if epoch == -1 || self.slots == 0 {
                count("none");
                return Ok(sessionless);
            }
            count("full");
            return Ok((
                Kind::Full {
                    privileged,
                    uses_ids: version >= 13,
                    principal: principal.clone(),
                },
                None,
            ));
        }
        count("incremental");
        if epoch < -1 {
            return Err(ErrorCode::InvalidFetchSessionEpoch);
        }
        let mut inner = self.lock();
        let inner = &mut *inner;
        let Some(session) = inner.sessions.get_mut(&id) else {
            return Err(ErrorCode::FetchSessionIdNotFound);
        };
        if session.principal != *principal {
            return Err(ErrorCode::FetchSessionIdNotFound);
        }
        if session.epoch != epoch {
            return Err(ErrorCode::InvalidFetchSessionEpoch);
        }
        if session.uses_ids != (version >= 13) {
            return Err(ErrorCode::FetchSessionTopicIdError);
        }
        let mut added = 0usize;
        for t in &req.topics {
            let topic = topic_ref(version >= 13, t.topic_id, &t.topic);
            for fp in &t.partitions {
                if session.upsert((topic.clone(), fp.partition), Params::of(fp)) {
                    added += 1;
                }
            }
        }
        let mut removed = 0usize;
        for t in &req.forgotten_topics_data {
            let topic = topic_ref(version >= 13, t.topic_id, &t.topic);
            for p in &t.partitions {
                if session.remove(&(topic.clone(), *p)) {
                    removed += 1;
                }
            }
        }
        session.epoch = next_epoch(epoch);
        session.last_used = now;
        let next_epoch = session.epoch;
        let (request, (keys, sent)) = effective_request(req, session);
        inner.partitions = inner.partitions + added - removed;
        if inner.partitions > self.max_partitions {
            inner.remove(id);
            return Ok((Kind::Closed, Some(request)));
        }
        Ok((
            Kind::Incremental {
                id,
                next_epoch,
                principal: principal.clone(),
                keys,
                sent,
            },
            Some(request),
        ))
    }

    /// Completes a fetch's answer: creates the session a full fetch asked for, or keeps
    /// only the partitions with news in an incremental answer (`more` follows the
    /// partitions it holds pieces of) and remembers what they said. `req` is the
    /// effective request (the one the answer was built from). Returns the session id
    /// for the answer.
    pub(crate) fn finish(
        &self,
        kind: Kind,
        req: &FetchRequest,
        resp: &mut FetchResponse,
        more: &mut MoreRecords,
        now: Instant,
    ) -> i32 {
        match kind {
            Kind::Sessionless | Kind::Closed => 0,
            Kind::Full {
                privileged,
                uses_ids,
                principal,
            } => {
                // Quota-throttled or failed answers do not create sessions.
                if resp.error_code != 0 {
                    return 0;
                }
                let mut session = Session {
                    principal,
                    privileged,
                    uses_ids,
                    epoch: 1,
                    parts: HashMap::new(),
                    order: BTreeMap::new(),
                    next_seq: 0,
                    last_used: now,
                };
                for (t, rt) in req.topics.iter().zip(&resp.responses) {
                    let topic = topic_ref(uses_ids, t.topic_id, &t.topic);
                    for (fp, pd) in t.partitions.iter().zip(&rt.partitions) {
                        let key = (topic.clone(), fp.partition);
                        session.upsert(key.clone(), Params::of(fp));
                        if let Some(c) = session.parts.get_mut(&key) {
                            c.sent = Sent::of(pd);
                        }
                    }
                }
                let mut inner = self.lock();
                let needed = session.parts.len();
                if !inner.make_room(self.slots, self.max_partitions, needed, privileged, now) {
                    return 0;
                }
                let id = loop {
                    let id = (Uuid::new_v4().as_u128() as i32) & i32::MAX;
                    if id != 0 && !inner.sessions.contains_key(&id) {
                        break id;
                    }
                };
                inner.partitions += needed;
                inner.sessions.insert(id, session);
                metrics::counter!("strata_fetch_sessions_created_total").increment(1);
                id
            }
            Kind::Incremental {
                id,
                next_epoch,
                principal,
                keys,
                sent,
            } => {
                let answered = keep_news(resp, more, &keys, &sent);
                let mut inner = self.lock();
                // Another request on the session since (a client bug): its marks win.
                if let Some(s) = inner.sessions.get_mut(&id)
                    && s.epoch == next_epoch
                    && s.principal == principal
                {
                    for (key, now_sent, with_records) in answered {
                        if let Some(c) = s.parts.get_mut(&key) {
                            c.sent = now_sent;
                        }
                        if with_records {
                            s.move_to_back(&key);
                        }
                    }
                }
                id
            }
        }
    }
}

/// The request an incremental fetch stands for: the session's partitions in its order,
/// consecutive partitions of a topic under one topic; with their keys and last marks.
fn effective_request(req: &FetchRequest, session: &Session) -> (FetchRequest, Layout) {
    let mut out = FetchRequest::default();
    out.replica_id = req.replica_id;
    out.replica_state = req.replica_state.clone();
    out.max_wait_ms = req.max_wait_ms;
    out.min_bytes = req.min_bytes;
    out.max_bytes = req.max_bytes;
    out.isolation_level = req.isolation_level;
    out.session_id = req.session_id;
    out.session_epoch = req.session_epoch;
    out.rack_id = req.rack_id.clone();
    let mut keys: Vec<Vec<Key>> = Vec::new();
    let mut sent: Vec<Vec<Option<Sent>>> = Vec::new();
    let mut last: Option<&TopicRef> = None;
    for key in session.order.values() {
        let Some(c) = session.parts.get(key) else {
            continue;
        };
        if last != Some(&key.0) {
            let mut t = FetchTopic::default();
            match &key.0 {
                TopicRef::Id(id) => t.topic_id = *id,
                TopicRef::Name(name) => {
                    t.topic = TopicName(StrBytes::from_string(name.to_string()))
                }
            }
            out.topics.push(t);
            keys.push(Vec::new());
            sent.push(Vec::new());
            last = Some(&key.0);
        }
        if let (Some(t), Some(k), Some(s)) =
            (out.topics.last_mut(), keys.last_mut(), sent.last_mut())
        {
            t.partitions.push(c.params.to_fetch_partition(key.1));
            k.push(key.clone());
            s.push(c.sent);
        }
    }
    (out, (keys, sent))
}

/// Drops from an incremental answer the partitions without news; returns the answered
/// ones' keys, their new marks, and whether they carried records.
fn keep_news(
    resp: &mut FetchResponse,
    more: &mut MoreRecords,
    keys: &[Vec<Key>],
    sent: &[Vec<Option<Sent>>],
) -> Vec<(Key, Option<Sent>, bool)> {
    let mut answered = Vec::new();
    let mut old_more = std::mem::take(more);
    let responses = std::mem::take(&mut resp.responses);
    for (ti, mut t) in responses.into_iter().enumerate() {
        let partitions = std::mem::take(&mut t.partitions);
        let mut kept = Vec::new();
        let mut kept_more = Vec::new();
        for (pi, pd) in partitions.into_iter().enumerate() {
            let (Some(key), Some(last)) = (
                keys.get(ti).and_then(|k| k.get(pi)),
                sent.get(ti).and_then(|s| s.get(pi)),
            ) else {
                continue;
            };
            let pieces = old_more.remove(&(ti, pi));
            let with_records = pd.records.as_ref().is_some_and(|r| !r.is_empty())
                || pieces.as_ref().is_some_and(|p| !p.is_empty());
            let now_sent = Sent::of(&pd);
            let news = with_records
                || pd.error_code != 0
                || pd.diverging_epoch.epoch >= 0
                || now_sent != *last;
            if news {
                answered.push((key.clone(), now_sent, with_records));
                kept_more.push(pieces);
                kept.push(pd);
            }
        }
        if !kept.is_empty() {
            let nti = resp.responses.len();
            for (npi, pieces) in kept_more.into_iter().enumerate() {
                if let Some(p) = pieces {
                    more.insert((nti, npi), p);
                }
            }
            t.partitions = kept;
            resp.responses.push(t);
        }
    }
    answered
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::fetch_request::ForgottenTopic;
    use kafka_protocol::messages::fetch_response::FetchableTopicResponse;

    use super::*;

    fn principal() -> Arc<str> {
        Arc::from("User:a")
    }

    fn request(id: i32, epoch: i32, parts: &[(&str, i32, i64)]) -> FetchRequest {
        let mut req = FetchRequest::default();
        req.session_id = id;
        req.session_epoch = epoch;
        for (topic, p, offset) in parts {
            if req
                .topics
                .last()
                .is_none_or(|t| t.topic.0.as_str() != *topic)
            {
                let mut t = FetchTopic::default();
                t.topic = TopicName(StrBytes::from_string(topic.to_string()));
                req.topics.push(t);
            }
            let mut fp = FetchPartition::default();
            fp.partition = *p;
            fp.fetch_offset = *offset;
            fp.partition_max_bytes = 1 << 20;
            req.topics.last_mut().unwrap().partitions.push(fp);
        }
        req
    }

    /// The answer a fetch of `req` would get: each partition at high-water mark `hw`
    /// (by partition), with records where `data` says.
    fn answer(
        req: &FetchRequest,
        hw: &dyn Fn(&str, i32) -> i64,
        data: &[(&str, i32)],
    ) -> FetchResponse {
        let mut resp = FetchResponse::default();
        for t in &req.topics {
            let mut rt = FetchableTopicResponse::default();
            rt.topic = t.topic.clone();
            for fp in &t.partitions {
                let name = t.topic.0.as_str();
                let mut pd = PartitionData::default();
                pd.partition_index = fp.partition;
                pd.high_watermark = hw(name, fp.partition);
                pd.last_stable_offset = pd.high_watermark;
                if data.contains(&(name, fp.partition)) {
                    pd.records = Some(bytes::Bytes::from_static(b"records"));
                }
                rt.partitions.push(pd);
            }
            resp.responses.push(rt);
        }
        resp
    }

    fn answered(resp: &FetchResponse) -> Vec<(String, i32)> {
        resp.responses
            .iter()
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .map(|p| (t.topic.0.to_string(), p.partition_index))
            })
            .collect()
    }

    fn listed(req: &FetchRequest) -> Vec<(String, i32, i64)> {
        req.topics
            .iter()
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .map(|p| (t.topic.0.to_string(), p.partition, p.fetch_offset))
            })
            .collect()
    }

    /// An answer, its session id, and the partitions fetched (topic, partition, offset).
    type Round = (FetchResponse, i32, Vec<(String, i32, i64)>);

    /// One round: begin, answer with `hw`/`data`, finish.
    fn round(
        s: &FetchSessions,
        req: &FetchRequest,
        hw: &dyn Fn(&str, i32) -> i64,
        data: &[(&str, i32)],
    ) -> Result<Round, ErrorCode> {
        round_with(s, req, hw, data, &|_| {})
    }

    /// [`round`], with the answer changed by `edit` before it is finished.
    fn round_with(
        s: &FetchSessions,
        req: &FetchRequest,
        hw: &dyn Fn(&str, i32) -> i64,
        data: &[(&str, i32)],
        edit: &dyn Fn(&mut FetchResponse),
    ) -> Result<Round, ErrorCode> {
        let now = Instant::now();
        let (kind, effective) = s.begin(12, req, &principal(), false, now)?;
        let effective = effective.unwrap_or_else(|| req.clone());
        let mut resp = answer(&effective, hw, data);
        edit(&mut resp);
        let id = s.finish(kind, &effective, &mut resp, &mut MoreRecords::new(), now);
        Ok((resp, id, listed(&effective)))
    }

    #[test]
    fn an_incremental_fetch_answers_only_what_changed() {
        let s = FetchSessions::new(10, 1000);
        let parts: Vec<(&str, i32, i64)> = (0..5).map(|p| ("t", p, 0)).collect();
        let (resp, id, _) = round(&s, &request(0, 0, &parts), &|_, _| 10, &[]).unwrap();
        assert_ne!(id, 0, "a full fetch at epoch 0 creates a session");
        assert_eq!(answered(&resp).len(), 5, "a full fetch is answered in full");
        assert_eq!(s.usage(), (1, 5));

        // Nothing changed: an empty incremental request, an empty answer; every
        // partition was still fetched at its cached offset.
        let (resp, id2, fetched) = round(&s, &request(id, 1, &[]), &|_, _| 10, &[]).unwrap();
        assert_eq!(id2, id);
        assert!(answered(&resp).is_empty());
        assert_eq!(
            fetched,
            parts
                .iter()
                .map(|(t, p, o)| (t.to_string(), *p, *o))
                .collect::<Vec<_>>()
        );

        // Partition 2's high-water mark moves, partition 3 has records.
        let hw = |_: &str, p: i32| if p == 2 { 11 } else { 10 };
        let (resp, _, _) = round(&s, &request(id, 2, &[]), &hw, &[("t", 3)]).unwrap();
        assert_eq!(answered(&resp), vec![("t".into(), 2), ("t".into(), 3)]);

        // The client moves partition 3's offset; partition 3 (it brought records) went
        // to the back of the session.
        let (resp, _, fetched) = round(&s, &request(id, 3, &[("t", 3, 7)]), &hw, &[]).unwrap();
        assert!(answered(&resp).is_empty());
        assert_eq!(fetched.last(), Some(&("t".into(), 3, 7)));
        assert_eq!(fetched.len(), 5);

        // A wrong epoch, an unknown session.
        assert_eq!(
            round(&s, &request(id, 3, &[]), &hw, &[]).err(),
            Some(ErrorCode::InvalidFetchSessionEpoch)
        );
        assert_eq!(
            round(&s, &request(id ^ 1, 4, &[]), &hw, &[]).err(),
            Some(ErrorCode::FetchSessionIdNotFound)
        );
        // Forgetting partition 0, adding u/0.
        let mut req = request(id, 4, &[("u", 0, 0)]);
        let mut f = ForgottenTopic::default();
        f.topic = TopicName(StrBytes::from_static_str("t"));
        f.partitions = vec![0];
        req.forgotten_topics_data.push(f);
        let (resp, _, fetched) = round(&s, &req, &hw, &[]).unwrap();
        assert_eq!(
            answered(&resp),
            vec![("u".into(), 0)],
            "a new partition is answered"
        );
        assert!(!fetched.iter().any(|(t, p, _)| t == "t" && *p == 0));
        assert_eq!(s.usage(), (1, 5));

        // An error is answered every time; once it clears, the partition is answered.
        let mut errors = 0;
        for epoch in 5..8 {
            let fail = |resp: &mut FetchResponse| {
                if epoch < 7 {
                    resp.responses[0].partitions[0].error_code =
                        ErrorCode::NotLeaderOrFollower.code();
                }
            };
            let (resp, _, _) = round_with(&s, &request(id, epoch, &[]), &hw, &[], &fail).unwrap();
            errors += answered(&resp).len();
        }
        assert_eq!(errors, 3);

        // Epoch -1 closes the session.
        let (_, id3, _) = round(&s, &request(id, -1, &parts), &hw, &[]).unwrap();
        assert_eq!(id3, 0);
        assert_eq!(s.usage(), (0, 0));
    }

    #[test]
    fn the_cache_is_bounded_and_followers_evict_consumers() {
        let s = FetchSessions::new(2, 10);
        let now = Instant::now();
        let create = |privileged: bool, n: i32, at: Instant| {
            let parts: Vec<(&str, i32, i64)> = (0..n).map(|p| ("t", p, 0)).collect();
            let req = request(0, 0, &parts);
            let (kind, _) = s.begin(12, &req, &principal(), privileged, at).unwrap();
            let mut resp = answer(&req, &|_, _| 0, &[]);
            s.finish(kind, &req, &mut resp, &mut MoreRecords::new(), at)
        };
        let a = create(false, 4, now);
        let b = create(false, 4, now);
        assert!(a != 0 && b != 0);
        // No slot, nothing idle: a consumer gets no session, a follower evicts one.
        assert_eq!(create(false, 1, now), 0);
        let f = create(true, 2, now);
        assert_ne!(f, 0);
        assert_eq!(s.usage().0, 2);
        // Too many partitions for the cache at all.
        assert_eq!(create(true, 11, now), 0);
        // Two minutes idle: anyone may take the slot.
        assert_ne!(create(false, 1, now + EVICTABLE_AFTER), 0);
        assert_eq!(s.usage().0, 2);
        assert!(s.usage().1 <= 10);
    }

    #[test]
    fn another_principal_cannot_use_a_session() {
        let s = FetchSessions::new(10, 100);
        let (_, id, _) = round(&s, &request(0, 0, &[("t", 0, 0)]), &|_, _| 1, &[]).unwrap();
        let other: Arc<str> = Arc::from("User:b");
        assert_eq!(
            s.begin(12, &request(id, 1, &[]), &other, false, Instant::now())
                .err(),
            Some(ErrorCode::FetchSessionIdNotFound)
        );
        // A session made at v12 (names) is not used at v13 (ids).
        assert_eq!(
            s.begin(
                13,
                &request(id, 1, &[]),
                &principal(),
                false,
                Instant::now()
            )
            .err(),
            Some(ErrorCode::FetchSessionTopicIdError)
        );
    }

    #[test]
    fn growing_past_the_bound_closes_the_session() {
        let s = FetchSessions::new(10, 4);
        let (_, id, _) = round(
            &s,
            &request(0, 0, &[("t", 0, 0), ("t", 1, 0)]),
            &|_, _| 1,
            &[],
        )
        .unwrap();
        assert_ne!(id, 0);
        let more: Vec<(&str, i32, i64)> = (2..5).map(|p| ("t", p, 0)).collect();
        let (resp, id2, _) = round(&s, &request(id, 1, &more), &|_, _| 1, &[]).unwrap();
        assert_eq!(id2, 0, "the session was closed");
        assert_eq!(answered(&resp).len(), 5, "and the fetch answered in full");
        assert_eq!(s.usage(), (0, 0));
    }
}
