//! The cleaner's dedupe buffer (Kafka's `SkimpyOffsetMap`): for every key in the dirty
//! part of a log, the offset of its latest record. Keys are not stored, only a 128-bit
//! hash of each (two independently keyed SipHash-1-3 hashes), so an entry is 24 bytes
//! whatever the key's size; a collision would make the cleaner drop a live record, and
//! at 128 bits the chance is about n² / 2¹²⁹ (1e-20 for a billion keys). The table is
//! open-addressed with linear probing and fills to at most 90% of its slots. It starts
//! small and doubles as keys come, up to the configured buffer size, and keeps what it
//! grew to for the next pass: a broker whose compacted partitions hold few keys (the
//! offsets topic of a quiet cluster) does not pay the whole buffer.

use std::hash::BuildHasher;

use strata_proto::Offset;

/// Bytes one slot takes: two 64-bit hash halves and an offset.
pub const SLOT_BYTES: usize = 24;
/// The share of slots a map fills before it counts as full.
const LOAD_FACTOR: f64 = 0.9;

#[derive(Clone, Copy, Debug, Default)]
struct Slot {
    h1: u64,
    h2: u64,
    /// `-1`: empty.
    offset: Offset,
}

const EMPTY: Slot = Slot {
    h1: 0,
    h2: 0,
    offset: -1,
};

/// The slots a map starts with (1.5 MiB).
const INITIAL_SLOTS: usize = 1 << 16;

/// Key hash → latest offset, of bounded memory.
#[derive(Debug)]
pub struct OffsetMap {
    slots: Vec<Slot>,
    /// The most slots it may grow to (the configured memory).
    max_slots: usize,
    /// At most this many entries (the load factor's share of `max_slots`).
    max_entries: usize,
    entries: usize,
    /// The largest offset put since the last clear.
    latest: Offset,
    k1: std::collections::hash_map::RandomState,
    k2: std::collections::hash_map::RandomState,
}

impl OffsetMap {
    /// A map of at most about `bytes` of memory (at least 16 slots).
    pub fn with_memory(bytes: usize) -> OffsetMap {
        let n = (bytes / SLOT_BYTES).max(16);
        OffsetMap {
            slots: vec![EMPTY; n.min(INITIAL_SLOTS)],
            max_slots: n,
            max_entries: ((n as f64) * LOAD_FACTOR) as usize,
            entries: 0,
            latest: -1,
            k1: Default::default(),
            k2: Default::default(),
        }
    }

    /// The memory its slots take now.
    pub fn memory_bytes(&self) -> usize {
        self.slots.len() * SLOT_BYTES
    }

    /// The most memory it may take.
    pub fn max_memory_bytes(&self) -> usize {
        self.max_slots * SLOT_BYTES
    }

    /// How many distinct keys it can hold.
    pub fn capacity(&self) -> usize {
        self.max_entries
    }

    pub fn len(&self) -> usize {
        self.entries
    }

    pub fn is_empty(&self) -> bool {
        self.entries == 0
    }

    pub fn is_full(&self) -> bool {
        self.entries >= self.max_entries
    }

    /// The largest offset put since the last clear, -1 if none.
    pub fn latest_offset(&self) -> Offset {
        self.latest
    }

    /// Empties it for the next pass (a fresh hash key too, so that a key that collides
    /// in one pass does not collide in the next).
    pub fn clear(&mut self) {
        self.slots.fill(EMPTY);
        self.entries = 0;
        self.latest = -1;
        self.k1 = Default::default();
        self.k2 = Default::default();
    }

    fn hash(&self, key: &[u8]) -> (u64, u64) {
        (self.k1.hash_one(key), self.k2.hash_one(key))
    }

    fn find(&self, h1: u64, h2: u64) -> usize {
        let n = self.slots.len();
        let mut i = (h1 as usize) % n;
        loop {
            let s = &self.slots[i];
            if s.offset < 0 || (s.h1 == h1 && s.h2 == h2) {
                return i;
            }
            i = (i + 1) % n;
        }
    }

    /// Records that `key`'s latest record (so far) is at `offset`. Returns false, and
    /// changes nothing, when the key is new and the map is full.
    pub fn put(&mut self, key: &[u8], offset: Offset) -> bool {
        let (h1, h2) = self.hash(key);
        let mut i = self.find(h1, h2);
        if self.slots[i].offset < 0 {
            if self.entries >= self.max_entries {
                return false;
            }
            if self.entries + 1 > (self.slots.len() as f64 * LOAD_FACTOR) as usize
                && self.slots.len() < self.max_slots
            {
                self.grow();
                i = self.find(h1, h2);
            }
        }
        let slot = &mut self.slots[i];
        if slot.offset < 0 {
            self.entries += 1;
            *slot = Slot { h1, h2, offset };
        } else {
            slot.offset = slot.offset.max(offset);
        }
        self.latest = self.latest.max(offset);
        true
    }

    /// Doubles the slots (at most to `max_slots`), placing every entry again.
    fn grow(&mut self) {
        let n = (self.slots.len() * 2).min(self.max_slots);
        let old = std::mem::replace(&mut self.slots, vec![EMPTY; n]);
        for s in old.into_iter().filter(|s| s.offset >= 0) {
            let i = self.find(s.h1, s.h2);
            self.slots[i] = s;
        }
    }

    /// The offset of `key`'s latest record, if the map has the key.
    pub fn get(&self, key: &[u8]) -> Option<Offset> {
        let (h1, h2) = self.hash(key);
        let s = &self.slots[self.find(h1, h2)];
        (s.offset >= 0).then_some(s.offset)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_latest_offset_per_key_until_full() {
        let mut m = OffsetMap::with_memory(SLOT_BYTES * 100);
        assert_eq!(m.capacity(), 90);
        for i in 0..90u32 {
            assert!(m.put(&i.to_be_bytes(), i as i64));
        }
        assert!(m.is_full());
        // A known key still updates; a new one is refused.
        assert!(m.put(&3u32.to_be_bytes(), 500));
        assert!(!m.put(&1000u32.to_be_bytes(), 501));
        assert_eq!(m.get(&3u32.to_be_bytes()), Some(500));
        assert_eq!(m.get(&4u32.to_be_bytes()), Some(4));
        assert_eq!(m.get(&1000u32.to_be_bytes()), None);
        assert_eq!(m.latest_offset(), 500);
        // An older offset never replaces a newer one.
        m.put(&3u32.to_be_bytes(), 7);
        assert_eq!(m.get(&3u32.to_be_bytes()), Some(500));
        m.clear();
        assert!(m.is_empty());
        assert_eq!(m.get(&3u32.to_be_bytes()), None);
        assert_eq!(m.latest_offset(), -1);
    }

    #[test]
    fn memory_grows_with_the_keys_up_to_what_was_asked_for() {
        let mut m = OffsetMap::with_memory(24 << 20);
        assert_eq!(m.max_memory_bytes(), 24 << 20);
        assert_eq!(m.memory_bytes(), INITIAL_SLOTS * SLOT_BYTES);
        // About 26.7 MiB per million distinct keys.
        assert_eq!(m.capacity(), ((1 << 20) as f64 * 0.9) as usize);
        let n = m.capacity() as u32;
        for i in 0..n {
            assert!(m.put(&i.to_le_bytes(), i as i64));
        }
        assert!(m.is_full());
        assert!(!m.put(&n.to_le_bytes(), 0));
        assert_eq!(m.memory_bytes(), 24 << 20);
        for i in (0..n).step_by(97) {
            assert_eq!(m.get(&i.to_le_bytes()), Some(i as i64));
        }
    }
}
