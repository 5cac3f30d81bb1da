//! Per-partition traffic, so an operator can see skew (issue 19): produce and fetch
//! counters, their rates over the last sampling interval, and the partition's hottest
//! keys from a sampled Space-Saving sketch.
//!
//! Cost on the produce path: three atomic adds per append, and at most once per
//! [`KEY_SAMPLE_INTERVAL_MS`] per partition the keys of one request's batches are read
//! (decompressed if need be) into a sketch of [`SKETCH_KEYS`] entries. Memory: a few
//! atomics per partition, plus the sketch (at most `SKETCH_KEYS × (MAX_KEY_BYTES + 24)`
//! bytes) only for partitions that received keyed records.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// How often a partition's keys are sampled, at most.
pub const KEY_SAMPLE_INTERVAL_MS: i64 = 100;
/// How many keys the sketch tracks per partition.
pub const SKETCH_KEYS: usize = 32;
/// Keys are kept up to this many bytes (longer ones are tracked by their prefix).
pub const MAX_KEY_BYTES: usize = 64;

/// One partition's traffic.
#[derive(Debug, Default)]
pub struct Traffic {
    produce_bytes: AtomicU64,
    produce_records: AtomicU64,
    fetch_bytes: AtomicU64,
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    last_key_sample_ms: Option<i64>,
    keys: Option<KeySketch>,
    /// The counters at the last [`Traffic::sample`]: (time ms, produce bytes, records,
    /// fetch bytes).
    prev: Option<(i64, [u64; 3])>,
    rates: Rates,
}

/// Rates over the last sampling interval, per second.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct Rates {
    pub produce_bytes_per_sec: f64,
    pub produce_records_per_sec: f64,
    pub fetch_bytes_per_sec: f64,
}

/// A key's estimated share of the partition's sampled keyed records.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct HotKey {
    /// The key as text when it is UTF-8, else as hex (`0x...`); cut at
    /// [`MAX_KEY_BYTES`] bytes.
    pub key: String,
    /// Between 0 and 1; an upper bound (Space-Saving may overcount by `error_share`).
    pub share: f64,
    pub error_share: f64,
}

/// The counters since the partition was opened here.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Totals {
    pub produce_bytes: u64,
    pub produce_records: u64,
    pub fetch_bytes: u64,
}

impl Traffic {
    /// Counts an append of `records` (the request's batches for this partition, `count`
    /// records) and, if the partition's keys were not sampled in the last
    /// [`KEY_SAMPLE_INTERVAL_MS`], reads their keys into the sketch.
    pub fn on_produce(&self, records: &[u8], count: i64, now_ms: i64) {
        self.produce_bytes
            .fetch_add(records.len() as u64, Ordering::Relaxed);
        self.produce_records
            .fetch_add(count.max(0) as u64, Ordering::Relaxed);
        // Never wait: another append sampling this partition right now is enough.
        let Ok(mut inner) = self.inner.try_lock() else {
            return;
        };
        if inner
            .last_key_sample_ms
            .is_some_and(|t| now_ms - t < KEY_SAMPLE_INTERVAL_MS && now_ms >= t)
        {
            return;
        }
        inner.last_key_sample_ms = Some(now_ms);
        for batch in strata_proto::batch::batches(records) {
            let Ok(batch) = batch else { return };
            if batch.header().is_control() {
                continue;
            }
            let Ok(recs) = batch.records() else { return };
            for rec in recs.iter() {
                let Ok(rec) = rec else { return };
                if let Some(key) = rec.key {
                    inner.keys.get_or_insert_with(KeySketch::default).add(key);
                }
            }
        }
    }

    /// Counts `bytes` sent to a consumer.
    pub fn on_fetch(&self, bytes: usize) {
        self.fetch_bytes.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    pub fn totals(&self) -> Totals {
        Totals {
            produce_bytes: self.produce_bytes.load(Ordering::Relaxed),
            produce_records: self.produce_records.load(Ordering::Relaxed),
            fetch_bytes: self.fetch_bytes.load(Ordering::Relaxed),
        }
    }

    /// Updates the rates from the counters' change since the last call, and ages the
    /// key sketch (every count halves, so the hot keys are those of the last few
    /// intervals).
    pub fn sample(&self, now_ms: i64) {
        let t = self.totals();
        let now = [t.produce_bytes, t.produce_records, t.fetch_bytes];
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((then, before)) = inner.prev
            && now_ms > then
        {
            let secs = (now_ms - then) as f64 / 1000.0;
            let rate = |i: usize| now[i].saturating_sub(before[i]) as f64 / secs;
            inner.rates = Rates {
                produce_bytes_per_sec: rate(0),
                produce_records_per_sec: rate(1),
                fetch_bytes_per_sec: rate(2),
            };
        }
        inner.prev = Some((now_ms, now));
        if let Some(k) = &mut inner.keys {
            k.halve();
            if k.total == 0 {
                inner.keys = None;
            }
        }
    }

    pub fn rates(&self) -> Rates {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).rates
    }

    /// The `n` hottest keys, hottest first.
    pub fn hot_keys(&self, n: usize) -> Vec<HotKey> {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.keys.as_ref().map_or_else(Vec::new, |k| k.top(n))
    }
}

/// Space-Saving (Metwally et al.): `SKETCH_KEYS` counters; a key not tracked replaces the
/// smallest, inheriting its count as its possible overcount. Any key whose true share is
/// above `1 / SKETCH_KEYS` is tracked.
#[derive(Debug, Default)]
struct KeySketch {
    entries: Vec<Entry>,
    total: u64,
}

#[derive(Debug)]
struct Entry {
    key: Box<[u8]>,
    count: u64,
    error: u64,
}

impl KeySketch {
    fn add(&mut self, key: &[u8]) {
        let key = &key[..key.len().min(MAX_KEY_BYTES)];
        self.total += 1;
        if let Some(e) = self.entries.iter_mut().find(|e| &*e.key == key) {
            e.count += 1;
            return;
        }
        if self.entries.len() < SKETCH_KEYS {
            self.entries.push(Entry {
                key: key.into(),
                count: 1,
                error: 0,
            });
            return;
        }
        if let Some(min) = self.entries.iter_mut().min_by_key(|e| e.count) {
            min.error = min.count;
            min.count += 1;
            min.key = key.into();
        }
    }

    fn halve(&mut self) {
        self.total /= 2;
        for e in &mut self.entries {
            e.count /= 2;
            e.error /= 2;
        }
        self.entries.retain(|e| e.count > 0);
    }

    fn top(&self, n: usize) -> Vec<HotKey> {
        if self.total == 0 {
            return Vec::new();
        }
        let mut entries: Vec<&Entry> = self.entries.iter().collect();
        entries.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.key.cmp(&b.key)));
        let total = self.total as f64;
        entries
            .into_iter()
            .take(n)
            .map(|e| HotKey {
                key: printable(&e.key),
                share: (e.count as f64 / total).min(1.0),
                error_share: (e.error as f64 / total).min(1.0),
            })
            .collect()
    }
}

fn printable(key: &[u8]) -> String {
    match std::str::from_utf8(key) {
        Ok(s) if !s.chars().any(char::is_control) => s.to_string(),
        _ => {
            let mut out = String::from("0x");
            for b in key {
                out.push_str(&format!("{b:02x}"));
            }
            out
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_key_above_one_in_sketch_keys_is_found_with_its_share() {
        let mut s = KeySketch::default();
        // 40% one key, the rest spread over 1000 others.
        for i in 0..10_000u32 {
            if i % 5 < 2 {
                s.add(b"acct-42");
            } else {
                s.add(format!("k{}", i % 1000).as_bytes());
            }
        }
        let top = s.top(3);
        assert_eq!(top[0].key, "acct-42");
        assert!(top[0].share >= 0.4 && top[0].share - top[0].error_share <= 0.4);
        assert!(s.entries.len() <= SKETCH_KEYS);
        // Halving keeps the shares and drops what reaches zero.
        s.halve();
        assert_eq!(s.top(1)[0].key, "acct-42");
        assert_eq!(printable(&[0xff, 0x00]), "0xff00");
    }

    proptest! {
        /// Space-Saving's guarantee: every key whose count is above total / SKETCH_KEYS
        /// is tracked, and its count is never under-estimated.
        #[test]
        fn heavy_keys_are_never_missed(keys in proptest::collection::vec(0u8..80, 1..3000)) {
            let mut s = KeySketch::default();
            let mut truth = std::collections::HashMap::<u8, u64>::new();
            for k in &keys {
                s.add(&[*k]);
                *truth.entry(*k).or_default() += 1;
            }
            for (k, n) in truth {
                let tracked = s.entries.iter().find(|e| *e.key == [k]);
                if n * SKETCH_KEYS as u64 > keys.len() as u64 {
                    let e = tracked.expect("a heavy key is tracked");
                    prop_assert!(e.count >= n && e.count - e.error <= n);
                }
            }
        }
    }

    #[test]
    fn counters_rates_and_sampling_interval() {
        use strata_proto::Compression;
        use strata_proto::batch::build::{NewRecord, batch};
        let t = Traffic::default();
        let recs: Vec<NewRecord> = (0..10)
            .map(|i| NewRecord {
                key: Some(bytes::Bytes::from(if i < 7 { "hot" } else { "cold" })),
                ..NewRecord::value("v", 0)
            })
            .collect();
        let data = batch(&recs, Compression::Lz4, None);
        t.sample(0);
        t.on_produce(&data, 10, 0);
        // Within the interval: counted, keys not read again.
        t.on_produce(&data, 10, 50);
        t.on_fetch(100);
        let keys = t.hot_keys(5);
        assert_eq!(keys[0].key, "hot");
        assert!((keys[0].share - 0.7).abs() < 1e-9, "{keys:?}");
        t.sample(2_000);
        let r = t.rates();
        assert_eq!(r.produce_records_per_sec, 10.0);
        assert_eq!(r.produce_bytes_per_sec, data.len() as f64);
        assert_eq!(r.fetch_bytes_per_sec, 50.0);
        assert_eq!(t.totals().produce_records, 20);
        // Past the interval the keys are read again.
        t.on_produce(&data, 10, 200);
        assert_eq!(t.hot_keys(1)[0].key, "hot");
    }
}

/// How often the rates are taken and the key sketches aged.
pub const SAMPLE_INTERVAL: std::time::Duration = std::time::Duration::from_secs(5);

/// One partition led here, for `strata topic hot` (GET /v1/partitions/hot).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct HotPartition {
    pub topic: String,
    pub partition: i32,
    #[serde(flatten)]
    pub rates: Rates,
    pub produce_bytes_total: u64,
    pub produce_records_total: u64,
    pub fetch_bytes_total: u64,
    pub hot_keys: Vec<HotKey>,
}
