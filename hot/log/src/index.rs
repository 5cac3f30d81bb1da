//! Sparse offset and time indexes of one segment: their file formats, the decoder, the
//! lookups, and the builder that places entries. [`Indexes`] is public so that a
//! segment's index files read back from elsewhere (the remote tier downloads them) are
//! decoded and searched by this code, not by a copy of it.
//!
//! Offset index entry (8 bytes): offset relative to the segment base (u32), byte position
//! of the batch starting at that offset (u32). An entry is added for the first batch
//! after at least `index.interval.bytes` since the previous entry, so a lookup walks at
//! most that many bytes of batch headers.
//!
//! Time index entry (12 bytes): a timestamp T (i64) and a relative offset O (u32),
//! meaning "every record below O has a timestamp <= T". Entries are added together with
//! offset-index entries when T grew, so O always has an offset-index entry, and once more
//! when the segment is sealed (T is then the segment's max timestamp and O its next
//! offset). To find the first record at or after time t, start at the last entry with
//! T < t: nothing before it can qualify.

use strata_proto::Offset;

/// Bytes of one offset-index entry (`.index`).
pub const OFFSET_ENTRY: usize = 8;
/// Bytes of one time-index entry (`.timeindex`).
pub const TIME_ENTRY: usize = 12;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct OffsetEntry {
    pub rel: u32,
    pub pos: u32,
}

impl OffsetEntry {
    /// Decodes one entry: relative offset (u32), position (u32), big-endian.
    pub(crate) fn decode(c: &[u8; OFFSET_ENTRY]) -> OffsetEntry {
        OffsetEntry {
            rel: u32::from_be_bytes([c[0], c[1], c[2], c[3]]),
            pos: u32::from_be_bytes([c[4], c[5], c[6], c[7]]),
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct TimeEntry {
    pub ts: i64,
    pub rel: u32,
}

impl TimeEntry {
    /// Decodes one entry: timestamp (i64), relative offset (u32), big-endian.
    pub(crate) fn decode(c: &[u8; TIME_ENTRY]) -> TimeEntry {
        let mut tsb = [0u8; 8];
        tsb.copy_from_slice(&c[0..8]);
        TimeEntry {
            ts: i64::from_be_bytes(tsb),
            rel: u32::from_be_bytes([c[8], c[9], c[10], c[11]]),
        }
    }
}

/// A segment's indexes, in memory: its offset index and its time index, decoded.
#[derive(Clone, Default, Debug)]
pub struct Indexes {
    pub(crate) offsets: Vec<OffsetEntry>,
    pub(crate) times: Vec<TimeEntry>,
}

impl Indexes {
    /// Decodes the bytes of a segment's `.index` and `.timeindex` files, checking only
    /// that each holds whole entries (the error says which does not). For index files
    /// read back from elsewhere, which the caller trusts as much as the segment's data
    /// (a bad entry surfaces as a batch header that does not parse where it points).
    pub fn decode(offsets: &[u8], times: &[u8]) -> Result<Indexes, String> {
        if !offsets.len().is_multiple_of(OFFSET_ENTRY) {
            return Err(format!(
                "offset index length {} is not a multiple of 8",
                offsets.len()
            ));
        }
        if !times.len().is_multiple_of(TIME_ENTRY) {
            return Err(format!(
                "time index length {} is not a multiple of 12",
                times.len()
            ));
        }
        Ok(Indexes {
            offsets: offsets
                .as_chunks::<OFFSET_ENTRY>()
                .0
                .iter()
                .map(OffsetEntry::decode)
                .collect(),
            times: times
                .as_chunks::<TIME_ENTRY>()
                .0
                .iter()
                .map(TimeEntry::decode)
                .collect(),
        })
    }

    /// The position of the last indexed batch starting at or before `rel` (an offset
    /// relative to the segment base), or 0: where a walk of batch headers looking for
    /// the batch holding `rel` starts.
    pub fn position_for(&self, rel: u32) -> u32 {
        let i = self.offsets.partition_point(|e| e.rel <= rel);
        if i == 0 { 0 } else { self.offsets[i - 1].pos }
    }

    /// The relative offset to start a timestamp search from: the last entry whose
    /// timestamp is strictly below `ts`, or 0.
    pub fn start_for_timestamp(&self, ts: i64) -> u32 {
        let i = self.times.partition_point(|e| e.ts < ts);
        if i == 0 { 0 } else { self.times[i - 1].rel }
    }

    /// The bytes of the `.index` and `.timeindex` files holding these indexes.
    pub fn encode(&self) -> (Vec<u8>, Vec<u8>) {
        (
            Self::encode_offsets(&self.offsets),
            Self::encode_times(&self.times),
        )
    }

    pub(crate) fn encode_offsets(entries: &[OffsetEntry]) -> Vec<u8> {
        let mut out = Vec::with_capacity(entries.len() * OFFSET_ENTRY);
        for e in entries {
            out.extend_from_slice(&e.rel.to_be_bytes());
            out.extend_from_slice(&e.pos.to_be_bytes());
        }
        out
    }

    pub(crate) fn encode_times(entries: &[TimeEntry]) -> Vec<u8> {
        let mut out = Vec::with_capacity(entries.len() * TIME_ENTRY);
        for e in entries {
            out.extend_from_slice(&e.ts.to_be_bytes());
            out.extend_from_slice(&e.rel.to_be_bytes());
        }
        out
    }

    /// Decodes index files and checks they are plausible for a segment of `log_size`
    /// bytes holding offsets `[0, next_rel)` relative to its base: whole entries,
    /// strictly increasing offsets and positions, positions inside the file,
    /// non-decreasing timestamps. A damaged index gives `Err` and is rebuilt by the
    /// caller. (Whether each position really starts a batch is checked where it matters:
    /// the first read through an entry validates the batch header it lands on.)
    pub(crate) fn decode_checked(
        offsets: &[u8],
        times: &[u8],
        log_size: u64,
        next_rel: u64,
    ) -> Result<Indexes, String> {
        let idx = Indexes::decode(offsets, times)?;
        for (i, e) in idx.offsets.iter().enumerate() {
            let (rel, pos) = (e.rel, e.pos);
            if let Some(prev) = i.checked_sub(1).map(|p| idx.offsets[p])
                && (rel <= prev.rel || pos <= prev.pos)
            {
                return Err(format!("offset index not increasing at entry {i}"));
            }
            if pos as u64 >= log_size || rel as u64 >= next_rel {
                return Err(format!(
                    "offset index entry ({rel}, {pos}) outside the segment"
                ));
            }
        }
        for (i, e) in idx.times.iter().enumerate() {
            let (ts, rel) = (e.ts, e.rel);
            if let Some(prev) = i.checked_sub(1).map(|p| idx.times[p])
                && (ts < prev.ts || rel < prev.rel)
            {
                return Err(format!("time index not increasing at entry {i}"));
            }
            if rel as u64 > next_rel {
                return Err(format!(
                    "time index entry ({ts}, {rel}) outside the segment"
                ));
            }
            // A non-final entry must point at an indexed batch start.
            if (rel as u64) < next_rel
                && idx.offsets.binary_search_by_key(&rel, |e| e.rel).is_err()
                && rel != 0
            {
                return Err(format!(
                    "time index entry ({ts}, {rel}) has no offset index entry"
                ));
            }
        }
        Ok(idx)
    }
}

/// The builder that decides where entries go, shared by append and recovery so that a
/// rebuilt index equals the one written during appends.
#[derive(Clone, Debug)]
pub(crate) struct IndexBuilder {
    interval: u64,
    bytes_since_entry: u64,
    max_ts: i64,
    pub idx: Indexes,
}

impl IndexBuilder {
    pub fn new(interval: u64) -> Self {
        IndexBuilder {
            interval,
            bytes_since_entry: 0,
            max_ts: -1,
            idx: Indexes::default(),
        }
    }

    /// Records a batch at `pos` with offsets starting at `rel`. Call in log order.
    pub fn on_batch(&mut self, rel: u32, pos: u32, size: u64, max_ts: i64) {
        // The first batch of a segment needs no entry: position 0 is the default.
        if pos > 0 && self.bytes_since_entry >= self.interval {
            self.idx.offsets.push(OffsetEntry { rel, pos });
            self.bytes_since_entry = 0;
            let last_ts = self.idx.times.last().map_or(i64::MIN, |e| e.ts);
            if self.max_ts > last_ts {
                self.idx.times.push(TimeEntry {
                    ts: self.max_ts,
                    rel,
                });
            }
        }
        self.bytes_since_entry += size;
        self.max_ts = self.max_ts.max(max_ts);
    }

    /// A builder holding what `idx` (built by a builder with this `interval`, sealed or
    /// not) held for the batches before relative offset `cut_rel`, except those after
    /// its last offset-index entry below `cut_rel`: returns it and the byte position of
    /// that entry's batch (0 if none), from which the caller replays the remaining
    /// batches with [`Self::on_batch`] to get exactly the builder that appending only
    /// the batches before `cut_rel` would have produced. Used to cut a segment.
    pub fn rewind(idx: &Indexes, interval: u64, cut_rel: u32) -> (IndexBuilder, u32) {
        let k = idx.offsets.partition_point(|e| e.rel < cut_rel);
        let Some(last) = k.checked_sub(1).map(|i| idx.offsets[i]) else {
            return (IndexBuilder::new(interval), 0);
        };
        // The state just before the batch at `last` was added. Its entry was placed
        // because at least `interval` bytes had passed; the max timestamp before it is
        // the newest time entry at or before it (one is always added with the first
        // offset entry, and later ones whenever the max grew).
        let max_ts = idx
            .times
            .iter()
            .take_while(|t| t.rel <= last.rel)
            .last()
            .map_or(-1, |t| t.ts);
        let builder = IndexBuilder {
            interval,
            bytes_since_entry: interval,
            max_ts,
            idx: Indexes {
                offsets: idx.offsets[..k - 1].to_vec(),
                times: idx
                    .times
                    .iter()
                    .copied()
                    .take_while(|t| t.rel < last.rel)
                    .collect(),
            },
        };
        (builder, last.pos)
    }

    pub fn interval(&self) -> u64 {
        self.interval
    }

    /// The greatest timestamp seen, or -1.
    pub fn max_timestamp(&self) -> i64 {
        self.max_ts
    }

    /// Adds the sealing entry (max timestamp, next offset) if it says anything new.
    pub fn seal(&mut self, next_rel: u32) {
        let last = self.idx.times.last().copied();
        if self.max_ts >= 0 && last.is_none_or(|e| e.ts < self.max_ts || e.rel < next_rel) {
            let ts = last.map_or(self.max_ts, |e| e.ts.max(self.max_ts));
            self.idx.times.push(TimeEntry { ts, rel: next_rel });
        }
    }
}

/// Relative offset of `offset` in a segment based at `base`.
pub(crate) fn rel(base: Offset, offset: Offset) -> u32 {
    debug_assert!(offset >= base && offset - base <= u32::MAX as i64);
    (offset - base).clamp(0, u32::MAX as i64) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builder_places_entries_every_interval_and_round_trips() {
        let mut b = IndexBuilder::new(100);
        let mut pos = 0u32;
        for i in 0..10u32 {
            b.on_batch(i * 5, pos, 60, 1000 + i as i64);
            pos += 60;
        }
        b.seal(50);
        let idx = b.idx.clone();
        assert_eq!(
            idx.offsets.iter().map(|e| e.rel).collect::<Vec<_>>(),
            vec![10, 20, 30, 40]
        );
        assert_eq!(idx.position_for(0), 0);
        assert_eq!(idx.position_for(12), 120);
        assert_eq!(idx.position_for(49), 480);
        assert_eq!(idx.times.last().unwrap(), &TimeEntry { ts: 1009, rel: 50 });
        // Start for ts 1003: last entry with ts < 1003 is (1001 at rel 10)
        assert_eq!(idx.start_for_timestamp(1003), 10);
        assert_eq!(idx.start_for_timestamp(5), 0);
        let back = Indexes::decode_checked(
            &Indexes::encode_offsets(&idx.offsets),
            &Indexes::encode_times(&idx.times),
            600,
            50,
        )
        .unwrap();
        assert_eq!(back.offsets, idx.offsets);
        assert_eq!(back.times, idx.times);
    }

    /// Rewinding to any batch boundary and replaying the batches from the returned
    /// position gives the builder that only those batches would have built.
    #[test]
    fn rewind_then_replay_equals_building_the_prefix() {
        // (rel, pos, size, max_ts): sizes and timestamps that move irregularly.
        let mut batches = Vec::new();
        let (mut rel, mut pos) = (0u32, 0u32);
        for i in 0..60u32 {
            let size = 20 + (i * 37) % 90;
            let ts = if i % 7 == 3 {
                5
            } else {
                1000 + (i as i64 * 13) % 50
            };
            batches.push((rel, pos, size as u64, ts));
            rel += 1 + i % 3;
            pos += size;
        }
        for interval in [0, 1, 64, 150, 10_000] {
            let mut full = IndexBuilder::new(interval);
            for &(r, p, s, t) in &batches {
                full.on_batch(r, p, s, t);
            }
            for sealed in [false, true] {
                let mut idx_source = full.clone();
                if sealed {
                    idx_source.seal(rel);
                }
                for cut in 0..batches.len() {
                    let cut_rel = batches[cut].0;
                    let mut want = IndexBuilder::new(interval);
                    for &(r, p, s, t) in &batches[..cut] {
                        want.on_batch(r, p, s, t);
                    }
                    let (mut got, from) = IndexBuilder::rewind(&idx_source.idx, interval, cut_rel);
                    for &(r, p, s, t) in batches[..cut].iter().filter(|b| b.1 >= from) {
                        got.on_batch(r, p, s, t);
                    }
                    assert_eq!(
                        got.idx.offsets, want.idx.offsets,
                        "interval {interval} cut {cut}"
                    );
                    assert_eq!(
                        got.idx.times, want.idx.times,
                        "interval {interval} cut {cut}"
                    );
                    assert_eq!(got.max_ts, want.max_ts);
                    assert_eq!(got.bytes_since_entry, want.bytes_since_entry);
                }
            }
        }
    }

    #[test]
    fn damaged_indexes_are_refused() {
        let good = Indexes::encode_offsets(&[
            OffsetEntry { rel: 3, pos: 100 },
            OffsetEntry { rel: 9, pos: 300 },
        ]);
        assert!(Indexes::decode_checked(&good, &[], 400, 10).is_ok());
        assert!(Indexes::decode_checked(&good[..7], &[], 400, 10).is_err());
        assert!(Indexes::decode_checked(&good, &[], 300, 10).is_err());
        assert!(Indexes::decode_checked(&good, &[], 400, 9).is_err());
        let mut swapped = good[8..].to_vec();
        swapped.extend_from_slice(&good[..8]);
        assert!(Indexes::decode_checked(&swapped, &[], 400, 10).is_err());
    }
}
