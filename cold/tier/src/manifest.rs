//! A partition's remote manifest: which segments live in object storage.
//!
//! The manifest is an ordered, contiguous list of remote segments plus the remote log
//! start offset. It is persisted as an append-only log of small delta objects
//! (`manifest/{seq:020}.delta`), each written with a create-only conditional put, and
//! periodic snapshots (`manifest/{seq:020}.snap`) that let a reader skip the deltas
//! before them. Committing a segment therefore writes one small object whatever the
//! history's length (Redpanda solved the same problem with spillover manifests), and a
//! leader that was fenced cannot overwrite a newer leader's commit: its create of the
//! next sequence number fails. (A plain put is last-writer-wins: a zombie leader's late
//! write would silently replace its successor's commit and lose the segments it named.)
//!
//! This module is sans-IO: encoding, decoding, applying, and lookups. Lookups are binary
//! searches: by offset over the segment bases, by timestamp over the running maximum of
//! the segments' max timestamps (timestamps are not monotonic across segments, their
//! running maximum is).

use strata_proto::Offset;
use uuid::Uuid;

/// One segment in object storage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RemoteSegment {
    pub base_offset: Offset,
    /// The offset after the segment's last record.
    pub next_offset: Offset,
    pub size_bytes: u64,
    /// The largest record timestamp in the segment.
    pub max_timestamp: i64,
    /// The leader epoch of the broker that uploaded it.
    pub leader_epoch: i32,
    /// Makes object names unique: a leader that loses leadership mid-upload leaves
    /// objects no manifest names, which cleanup removes later.
    pub id: Uuid,
    /// Whether a producer-state snapshot was uploaded with the segment (`.state`).
    pub has_producer_state: bool,
    /// Whether the leader epochs of its batches were uploaded with it (`.epochs`, in
    /// Kafka's leader-epoch-checkpoint format). Segments committed before this existed
    /// have none.
    pub has_leader_epochs: bool,
    /// Whether its aborted-transaction index was uploaded with it (`.txnindex`, Kafka's
    /// format): only segments holding an ABORT marker have one.
    pub has_txn_index: bool,
    /// When the segment was committed (ms since the epoch).
    pub committed_at_ms: i64,
}

impl RemoteSegment {
    /// The stem of the segment's object names: `{base:020}-{epoch}-{uuid}`.
    pub fn object_stem(&self) -> String {
        format!(
            "{:020}-{}-{}",
            self.base_offset,
            self.leader_epoch,
            self.id.simple()
        )
    }

    pub fn contains(&self, offset: Offset) -> bool {
        self.base_offset <= offset && offset < self.next_offset
    }
}

/// A change to a manifest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ManifestOp {
    /// A segment was uploaded; it must start where the manifest ends.
    Add(RemoteSegment),
    /// The remote log start moved forward (remote retention, DeleteRecords). Segments
    /// wholly below it leave the manifest; their objects are deleted after the commit.
    AdvanceStart { log_start_offset: Offset },
    /// A compacted topic's remote pass replaced a run of segments (`replaced`, their
    /// ids, consecutive and in order) by one cleaned segment covering the same offsets
    /// (`with`: the first one's base to the last one's next offset). Refused unless the
    /// run is exactly in the manifest, so a retention or another writer's change in
    /// between fails the commit. The replaced objects are deleted after a grace period.
    Replace {
        replaced: Vec<Uuid>,
        with: RemoteSegment,
    },
}

/// Why a manifest change or encoding was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ManifestError {
    #[error("segment {base}..{next} does not continue the manifest, which ends at {end}")]
    NotContiguous {
        base: Offset,
        next: Offset,
        end: Offset,
    },
    #[error("segment {base}..{next} lies wholly below the remote log start {start}")]
    BelowStart {
        base: Offset,
        next: Offset,
        start: Offset,
    },
    #[error("segment {base}..{next} is empty or inverted")]
    EmptySegment { base: Offset, next: Offset },
    #[error(
        "segment uploaded under leader epoch {epoch} after epoch {max_epoch} committed: fenced"
    )]
    StaleEpoch { epoch: i32, max_epoch: i32 },
    #[error("corrupt manifest object: {0}")]
    Corrupt(String),
    #[error("delta {got} does not follow {expected}")]
    Sequence { expected: u64, got: u64 },
    #[error(
        "the segments a cleaned segment replaces are not a run of this manifest ending at {next}"
    )]
    NotReplaceable { next: Offset },
}

/// A partition's manifest, in memory.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Manifest {
    segments: Vec<RemoteSegment>,
    /// running_max[i] = max of segments[..=i].max_timestamp.
    running_max: Vec<i64>,
    log_start_offset: Offset,
    max_epoch: i32,
    /// The sequence number of the last delta applied (0: none).
    seq: u64,
}

impl Manifest {
    pub fn new() -> Self {
        Manifest::default()
    }

    pub fn segments(&self) -> &[RemoteSegment] {
        &self.segments
    }

    pub fn len(&self) -> usize {
        self.segments.len()
    }

    pub fn is_empty(&self) -> bool {
        self.segments.is_empty()
    }

    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// The first offset readable from object storage (None when nothing is remote).
    pub fn log_start_offset(&self) -> Option<Offset> {
        (!self.segments.is_empty()).then_some(self.log_start_offset)
    }

    /// The remote log start even when every segment has expired (0 before anything
    /// was uploaded): nothing wholly below it is uploaded again, and local data below
    /// it is expired.
    pub fn start_bound(&self) -> Offset {
        self.log_start_offset
    }

    /// The offset after the last remote segment (None when nothing is remote).
    pub fn end_offset(&self) -> Option<Offset> {
        self.segments.last().map(|s| s.next_offset)
    }

    pub fn total_bytes(&self) -> u64 {
        self.segments
            .iter()
            .fold(0u64, |t, s| t.saturating_add(s.size_bytes))
    }

    pub fn max_epoch(&self) -> i32 {
        self.max_epoch
    }

    /// Whether the range [base, next) is wholly in object storage.
    pub fn covers(&self, base: Offset, next: Offset) -> bool {
        match (self.segments.first(), self.end_offset()) {
            (Some(first), Some(end)) => first.base_offset <= base && next <= end,
            _ => false,
        }
    }

    /// The segment holding `offset`, if it is remote and at or above the remote start.
    pub fn find_offset(&self, offset: Offset) -> Option<&RemoteSegment> {
        if offset < self.log_start_offset {
            return None;
        }
        let i = self.segments.partition_point(|s| s.base_offset <= offset);
        let s = self.segments.get(i.checked_sub(1)?)?;
        s.contains(offset).then_some(s)
    }

    /// The first segment that may hold a record at or after `timestamp`: the first whose
    /// running maximum reaches it.
    pub fn find_timestamp(&self, timestamp: i64) -> Option<&RemoteSegment> {
        let i = self.running_max.partition_point(|&m| m < timestamp);
        self.segments.get(i)
    }

    /// The segment after `s`, if any.
    pub fn next_segment(&self, s: &RemoteSegment) -> Option<&RemoteSegment> {
        let i = self
            .segments
            .partition_point(|x| x.base_offset <= s.base_offset);
        self.segments.get(i)
    }

    /// Applies one op, checking it keeps the manifest contiguous and unfenced.
    pub fn apply(&mut self, op: &ManifestOp) -> Result<(), ManifestError> {
        match op {
            ManifestOp::Add(s) => {
                if s.next_offset <= s.base_offset {
                    return Err(ManifestError::EmptySegment {
                        base: s.base_offset,
                        next: s.next_offset,
                    });
                }
                if s.leader_epoch < self.max_epoch {
                    return Err(ManifestError::StaleEpoch {
                        epoch: s.leader_epoch,
                        max_epoch: self.max_epoch,
                    });
                }
                match self.end_offset() {
                    Some(end) if s.base_offset != end => {
                        return Err(ManifestError::NotContiguous {
                            base: s.base_offset,
                            next: s.next_offset,
                            end,
                        });
                    }
                    // The first segment (also after every earlier one expired) may
                    // start anywhere that leaves records at or after the start.
                    None if s.next_offset <= self.log_start_offset => {
                        return Err(ManifestError::BelowStart {
                            base: s.base_offset,
                            next: s.next_offset,
                            start: self.log_start_offset,
                        });
                    }
                    None => self.log_start_offset = self.log_start_offset.max(s.base_offset),
                    _ => {}
                }
                let prev = self.running_max.last().copied().unwrap_or(i64::MIN);
                self.running_max.push(prev.max(s.max_timestamp));
                self.segments.push(*s);
                self.max_epoch = self.max_epoch.max(s.leader_epoch);
            }
            ManifestOp::Replace { replaced, with } => {
                let not = || ManifestError::NotReplaceable {
                    next: with.next_offset,
                };
                let first = replaced.first().ok_or_else(not)?;
                let i = self
                    .segments
                    .iter()
                    .position(|s| s.id == *first)
                    .ok_or_else(not)?;
                let run = self.segments.get(i..i + replaced.len()).ok_or_else(not)?;
                if run.iter().zip(replaced).any(|(s, id)| s.id != *id)
                    || run[0].base_offset != with.base_offset
                    || run[run.len() - 1].next_offset != with.next_offset
                {
                    return Err(not());
                }
                if with.leader_epoch < self.max_epoch {
                    return Err(ManifestError::StaleEpoch {
                        epoch: with.leader_epoch,
                        max_epoch: self.max_epoch,
                    });
                }
                self.segments.splice(i..i + replaced.len(), [*with]);
                self.max_epoch = self.max_epoch.max(with.leader_epoch);
                self.rebuild_running_max();
            }
            ManifestOp::AdvanceStart { log_start_offset } => {
                if *log_start_offset <= self.log_start_offset {
                    return Ok(());
                }
                self.log_start_offset = *log_start_offset;
                let keep_from = self
                    .segments
                    .partition_point(|s| s.next_offset <= *log_start_offset);
                if keep_from > 0 {
                    self.segments.drain(..keep_from);
                    self.rebuild_running_max();
                }
            }
        }
        Ok(())
    }

    /// The segments an AdvanceStart to `offset` would remove (their objects are deleted
    /// after the commit).
    pub fn segments_below(&self, offset: Offset) -> &[RemoteSegment] {
        let n = self.segments.partition_point(|s| s.next_offset <= offset);
        &self.segments[..n]
    }

    fn rebuild_running_max(&mut self) {
        self.running_max.clear();
        let mut m = i64::MIN;
        for s in &self.segments {
            m = m.max(s.max_timestamp);
            self.running_max.push(m);
        }
    }

    /// Applies a decoded delta, which must be the next in sequence.
    pub fn apply_delta(&mut self, delta: &Delta) -> Result<(), ManifestError> {
        if delta.seq != self.seq + 1 {
            return Err(ManifestError::Sequence {
                expected: self.seq + 1,
                got: delta.seq,
            });
        }
        for op in &delta.ops {
            self.apply(op)?;
        }
        self.seq = delta.seq;
        Ok(())
    }

    /// Records that delta `seq` was read and deliberately not applied (a fenced
    /// leader's write), so the next delta still applies in sequence.
    pub fn skip_delta(&mut self, seq: u64) {
        if seq == self.seq + 1 {
            self.seq = seq;
        }
    }

    /// Encodes the whole manifest as a snapshot object.
    pub fn encode_snapshot(&self) -> Vec<u8> {
        let mut w = Writer::new(SNAPSHOT_MAGIC);
        w.u64(self.seq);
        w.i64(self.log_start_offset);
        w.i32(self.max_epoch);
        w.u32(self.segments.len() as u32);
        for s in &self.segments {
            w.segment(s);
        }
        w.finish()
    }

    /// Decodes a snapshot object.
    pub fn decode_snapshot(bytes: &[u8]) -> Result<Manifest, ManifestError> {
        let mut r = Reader::new(bytes, SNAPSHOT_MAGIC)?;
        let seq = r.u64()?;
        let log_start_offset = r.i64()?;
        let max_epoch = r.i32()?;
        let n = r.u32()? as usize;
        if n > r.remaining() / SEGMENT_LEN {
            return Err(ManifestError::Corrupt(format!(
                "{n} segments promised, room for fewer"
            )));
        }
        let mut m = Manifest {
            seq,
            log_start_offset,
            max_epoch,
            ..Default::default()
        };
        m.segments.reserve(n);
        for _ in 0..n {
            let s = r.segment()?;
            if let Some(last) = m.segments.last()
                && s.base_offset != last.next_offset
            {
                return Err(ManifestError::Corrupt(
                    "snapshot segments are not contiguous".into(),
                ));
            }
            if s.next_offset <= s.base_offset {
                return Err(ManifestError::Corrupt("empty segment in snapshot".into()));
            }
            m.segments.push(s);
        }
        r.end()?;
        m.rebuild_running_max();
        Ok(m)
    }
}

/// One committed batch of ops.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delta {
    pub seq: u64,
    pub ops: Vec<ManifestOp>,
}

impl Delta {
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new(DELTA_MAGIC);
        w.u64(self.seq);
        w.u32(self.ops.len() as u32);
        for op in &self.ops {
            match op {
                ManifestOp::Add(s) => {
                    w.u8(1);
                    w.segment(s);
                }
                ManifestOp::AdvanceStart { log_start_offset } => {
                    w.u8(2);
                    w.i64(*log_start_offset);
                }
                ManifestOp::Replace { replaced, with } => {
                    w.u8(3);
                    w.u32(replaced.len() as u32);
                    for id in replaced {
                        w.buf.extend_from_slice(id.as_bytes());
                    }
                    w.segment(with);
                }
            }
        }
        w.finish()
    }

    pub fn decode(bytes: &[u8]) -> Result<Delta, ManifestError> {
        let mut r = Reader::new(bytes, DELTA_MAGIC)?;
        let seq = r.u64()?;
        let n = r.u32()? as usize;
        if n > r.remaining() {
            return Err(ManifestError::Corrupt(format!(
                "{n} ops promised, room for fewer"
            )));
        }
        let mut ops = Vec::with_capacity(n);
        for _ in 0..n {
            ops.push(match r.u8()? {
                1 => ManifestOp::Add(r.segment()?),
                2 => ManifestOp::AdvanceStart {
                    log_start_offset: r.i64()?,
                },
                3 => {
                    let n = r.u32()? as usize;
                    if n > r.remaining() / 16 {
                        return Err(ManifestError::Corrupt(format!(
                            "{n} replaced segments promised, room for fewer"
                        )));
                    }
                    let mut replaced = Vec::with_capacity(n);
                    for _ in 0..n {
                        let mut id = [0u8; 16];
                        id.copy_from_slice(r.take(16)?);
                        replaced.push(Uuid::from_bytes(id));
                    }
                    ManifestOp::Replace {
                        replaced,
                        with: r.segment()?,
                    }
                }
                t => return Err(ManifestError::Corrupt(format!("unknown op {t}"))),
            });
        }
        r.end()?;
        Ok(Delta { seq, ops })
    }
}

/// Object names under a partition's `manifest/` prefix.
pub fn delta_name(seq: u64) -> String {
    format!("{seq:020}.delta")
}

pub fn snapshot_name(seq: u64) -> String {
    format!("{seq:020}.snap")
}

/// What a manifest object name is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum ManifestObject {
    Snapshot(u64),
    Delta(u64),
}

pub fn parse_object_name(name: &str) -> Option<ManifestObject> {
    if let Some(s) = name.strip_suffix(".delta") {
        return s.parse().ok().map(ManifestObject::Delta);
    }
    if let Some(s) = name.strip_suffix(".snap") {
        return s.parse().ok().map(ManifestObject::Snapshot);
    }
    None
}

const DELTA_MAGIC: &[u8; 4] = b"STMD";
const SNAPSHOT_MAGIC: &[u8; 4] = b"STMS";
const VERSION: u16 = 1;
const SEGMENT_LEN: usize = 8 + 8 + 8 + 8 + 4 + 16 + 1 + 8;

struct Writer {
    buf: Vec<u8>,
}

impl Writer {
    fn new(magic: &[u8; 4]) -> Self {
        let mut buf = Vec::with_capacity(64);
        buf.extend_from_slice(magic);
        buf.extend_from_slice(&VERSION.to_be_bytes());
        Writer { buf }
    }
    fn u8(&mut self, v: u8) {
        self.buf.push(v);
    }
    fn u32(&mut self, v: u32) {
        self.buf.extend_from_slice(&v.to_be_bytes());
    }
    fn i32(&mut self, v: i32) {
        self.buf.extend_from_slice(&v.to_be_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.buf.extend_from_slice(&v.to_be_bytes());
    }
    fn i64(&mut self, v: i64) {
        self.buf.extend_from_slice(&v.to_be_bytes());
    }
    fn segment(&mut self, s: &RemoteSegment) {
        self.i64(s.base_offset);
        self.i64(s.next_offset);
        self.u64(s.size_bytes);
        self.i64(s.max_timestamp);
        self.i32(s.leader_epoch);
        self.buf.extend_from_slice(s.id.as_bytes());
        // One byte of flags: bit 0 the producer state, bit 1 the leader epochs, bit 2
        // the aborted-transaction index.
        self.u8(s.has_producer_state as u8
            | (s.has_leader_epochs as u8) << 1
            | (s.has_txn_index as u8) << 2);
        self.i64(s.committed_at_ms);
    }
    /// Appends the CRC-32C of everything before it.
    fn finish(mut self) -> Vec<u8> {
        let crc = crc32c::crc32c(&self.buf);
        self.buf.extend_from_slice(&crc.to_be_bytes());
        self.buf
    }
}

struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn new(bytes: &'a [u8], magic: &[u8; 4]) -> Result<Self, ManifestError> {
        if bytes.len() < 10 {
            return Err(ManifestError::Corrupt(format!(
                "{} bytes is too short",
                bytes.len()
            )));
        }
        let (body, crc) = bytes.split_at(bytes.len() - 4);
        let stored = u32::from_be_bytes([crc[0], crc[1], crc[2], crc[3]]);
        if crc32c::crc32c(body) != stored {
            return Err(ManifestError::Corrupt("CRC mismatch".into()));
        }
        if &body[..4] != magic {
            return Err(ManifestError::Corrupt("wrong magic".into()));
        }
        let version = u16::from_be_bytes([body[4], body[5]]);
        if version != VERSION {
            return Err(ManifestError::Corrupt(format!("unknown version {version}")));
        }
        Ok(Reader { buf: &body[6..] })
    }
    fn remaining(&self) -> usize {
        self.buf.len()
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8], ManifestError> {
        if self.buf.len() < n {
            return Err(ManifestError::Corrupt("truncated".into()));
        }
        let (a, b) = self.buf.split_at(n);
        self.buf = b;
        Ok(a)
    }
    fn u8(&mut self) -> Result<u8, ManifestError> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32, ManifestError> {
        let b = self.take(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn i32(&mut self) -> Result<i32, ManifestError> {
        Ok(self.u32()? as i32)
    }
    fn u64(&mut self) -> Result<u64, ManifestError> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_be_bytes(a))
    }
    fn i64(&mut self) -> Result<i64, ManifestError> {
        Ok(self.u64()? as i64)
    }
    fn segment(&mut self) -> Result<RemoteSegment, ManifestError> {
        let base_offset = self.i64()?;
        let next_offset = self.i64()?;
        let size_bytes = self.u64()?;
        let max_timestamp = self.i64()?;
        let leader_epoch = self.i32()?;
        let mut id = [0u8; 16];
        id.copy_from_slice(self.take(16)?);
        let flags = self.u8()?;
        if flags > 0b111 {
            return Err(ManifestError::Corrupt(format!("bad flags {flags}")));
        }
        let (has_producer_state, has_leader_epochs, has_txn_index) =
            (flags & 1 != 0, flags & 2 != 0, flags & 4 != 0);
        let committed_at_ms = self.i64()?;
        Ok(RemoteSegment {
            base_offset,
            next_offset,
            size_bytes,
            max_timestamp,
            leader_epoch,
            id: Uuid::from_bytes(id),
            has_producer_state,
            has_leader_epochs,
            has_txn_index,
            committed_at_ms,
        })
    }
    fn end(&self) -> Result<(), ManifestError> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(ManifestError::Corrupt("trailing bytes".into()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn seg(base: i64, next: i64, ts: i64, epoch: i32) -> RemoteSegment {
        RemoteSegment {
            base_offset: base,
            next_offset: next,
            size_bytes: ((next - base) * 100) as u64,
            max_timestamp: ts,
            leader_epoch: epoch,
            id: Uuid::from_u128(base as u128 * 7 + 1),
            has_producer_state: base % 2 == 0,
            has_leader_epochs: base % 3 == 0,
            has_txn_index: base % 5 == 0,
            committed_at_ms: 1000 + base,
        }
    }

    /// Fuzzing found it (fuzz/corpus/tier_manifest/regress-segment-sizes-overflow-u64):
    /// sizes read from a bucket object summed past u64::MAX; the total saturates.
    #[test]
    fn total_bytes_saturates() {
        let mut m = Manifest::new();
        let mut a = seg(0, 10, 1, 1);
        a.size_bytes = u64::MAX;
        let mut b = seg(10, 20, 1, 1);
        b.size_bytes = u64::MAX;
        m.apply(&ManifestOp::Add(a)).unwrap();
        m.apply(&ManifestOp::Add(b)).unwrap();
        assert_eq!(m.total_bytes(), u64::MAX);
    }

    #[test]
    fn adds_must_be_contiguous_and_unfenced() {
        let mut m = Manifest::new();
        assert_eq!(m.log_start_offset(), None);
        m.apply(&ManifestOp::Add(seg(100, 200, 10, 1))).unwrap();
        assert_eq!(
            (m.log_start_offset(), m.end_offset()),
            (Some(100), Some(200))
        );
        assert!(matches!(
            m.apply(&ManifestOp::Add(seg(201, 300, 10, 1))),
            Err(ManifestError::NotContiguous { .. })
        ));
        assert!(matches!(
            m.apply(&ManifestOp::Add(seg(200, 200, 10, 1))),
            Err(ManifestError::EmptySegment { .. })
        ));
        m.apply(&ManifestOp::Add(seg(200, 300, 5, 3))).unwrap();
        assert!(matches!(
            m.apply(&ManifestOp::Add(seg(300, 400, 5, 2))),
            Err(ManifestError::StaleEpoch { .. })
        ));
        assert!(m.covers(100, 300) && !m.covers(100, 301) && !m.covers(99, 200));
    }

    #[test]
    fn lookups_by_offset_and_time() {
        let mut m = Manifest::new();
        // Timestamps wander: 10, 50, 30, 70.
        for (i, ts) in [10, 50, 30, 70].iter().enumerate() {
            let b = i as i64 * 100;
            m.apply(&ManifestOp::Add(seg(b, b + 100, *ts, 0))).unwrap();
        }
        assert_eq!(m.find_offset(0).unwrap().base_offset, 0);
        assert_eq!(m.find_offset(250).unwrap().base_offset, 200);
        assert!(m.find_offset(400).is_none());
        assert!(m.find_offset(-1).is_none());
        assert_eq!(m.find_timestamp(5).unwrap().base_offset, 0);
        assert_eq!(m.find_timestamp(40).unwrap().base_offset, 100);
        // 30 < 50: the first segment that can hold ts >= 45 is still 100.
        assert_eq!(m.find_timestamp(45).unwrap().base_offset, 100);
        assert_eq!(m.find_timestamp(60).unwrap().base_offset, 300);
        assert!(m.find_timestamp(71).is_none());
        // Advancing the start removes whole segments below it only.
        m.apply(&ManifestOp::AdvanceStart {
            log_start_offset: 150,
        })
        .unwrap();
        assert_eq!(m.segments()[0].base_offset, 100);
        assert_eq!(m.log_start_offset(), Some(150));
        assert!(m.find_offset(120).is_none(), "below the start is gone");
        assert_eq!(m.find_timestamp(5).unwrap().base_offset, 100);
        m.apply(&ManifestOp::AdvanceStart {
            log_start_offset: 300,
        })
        .unwrap();
        assert_eq!(m.len(), 1);
        assert_eq!(
            m.find_timestamp(40).unwrap().base_offset,
            300,
            "running max rebuilt"
        );
    }

    #[test]
    fn deltas_apply_in_sequence_only() {
        let mut m = Manifest::new();
        let d1 = Delta {
            seq: 1,
            ops: vec![ManifestOp::Add(seg(0, 10, 1, 0))],
        };
        let d3 = Delta {
            seq: 3,
            ops: vec![ManifestOp::Add(seg(10, 20, 1, 0))],
        };
        m.apply_delta(&Delta::decode(&d1.encode()).unwrap())
            .unwrap();
        assert!(matches!(
            m.apply_delta(&d3),
            Err(ManifestError::Sequence {
                expected: 2,
                got: 3
            })
        ));
        assert_eq!(m.seq(), 1);
    }

    #[test]
    fn corrupt_objects_are_refused() {
        let d = Delta {
            seq: 9,
            ops: vec![
                ManifestOp::Add(seg(0, 10, 1, 0)),
                ManifestOp::AdvanceStart {
                    log_start_offset: 5,
                },
            ],
        };
        let bytes = d.encode();
        assert_eq!(Delta::decode(&bytes).unwrap(), d);
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0x20;
            assert!(Delta::decode(&b).is_err(), "flip at {i}");
        }
        for n in 0..bytes.len() {
            assert!(Delta::decode(&bytes[..n]).is_err());
        }
        assert!(
            Manifest::decode_snapshot(&bytes).is_err(),
            "a delta is not a snapshot"
        );
        assert_eq!(
            parse_object_name(&delta_name(42)),
            Some(ManifestObject::Delta(42))
        );
        assert_eq!(
            parse_object_name(&snapshot_name(7)),
            Some(ManifestObject::Snapshot(7))
        );
        assert_eq!(parse_object_name("00000000000000000001.tmp"), None);
    }

    proptest! {
        #[test]
        fn snapshot_plus_deltas_equals_applying_everything(
            lens in proptest::collection::vec(1i64..50, 1..60),
            tss in proptest::collection::vec(0i64..1000, 60),
            advance in proptest::collection::vec((0usize..60, 0i64..3000), 0..5),
            cut in 0usize..60,
        ) {
            // Build ops: adds, with some start advances interleaved.
            let mut ops = Vec::new();
            let mut b = 0i64;
            for (i, l) in lens.iter().enumerate() {
                ops.push(ManifestOp::Add(seg(b, b + l, tss[i], 0)));
                b += l;
                for (at, off) in &advance {
                    if *at == i {
                        ops.push(ManifestOp::AdvanceStart { log_start_offset: (*off).min(b) });
                    }
                }
            }
            let deltas: Vec<Delta> = ops.iter().enumerate().map(|(i, op)| Delta { seq: i as u64 + 1, ops: vec![op.clone()] }).collect();
            let mut all = Manifest::new();
            for d in &deltas { all.apply_delta(d).unwrap(); }
            // Snapshot after `cut` deltas, then the rest.
            let cut = cut.min(deltas.len());
            let mut first = Manifest::new();
            for d in &deltas[..cut] { first.apply_delta(d).unwrap(); }
            let mut restored = Manifest::decode_snapshot(&first.encode_snapshot()).unwrap();
            for d in &deltas[cut..] { restored.apply_delta(&Delta::decode(&d.encode()).unwrap()).unwrap(); }
            prop_assert_eq!(&restored, &all);
            // Lookups agree with a linear scan.
            for probe in (0..b).step_by(7) {
                let want = all.segments().iter().find(|s| s.contains(probe) && probe >= all.log_start_offset().unwrap_or(0));
                prop_assert_eq!(all.find_offset(probe), want);
            }
            for ts in (0..1000).step_by(37) {
                let want = all.segments().iter().position(|s| s.max_timestamp >= ts).map(|i| &all.segments()[i]);
                prop_assert_eq!(all.find_timestamp(ts), want);
            }
        }
    }
}
