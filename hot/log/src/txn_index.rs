//! The aborted-transaction index of a segment (Kafka's `.txnindex`): one entry per
//! transaction whose ABORT marker is in the segment, so a read_committed fetch can tell
//! its consumer which producers' batches in a range to drop without reading them.
//!
//! The file is Kafka's format, entries of 34 bytes, big-endian: version (i16, 0),
//! producer id (i64), first offset (i64), last offset (i64: the marker's), last stable
//! offset (i64: where the last stable offset stood once the marker was written; a
//! search from a fetch offset may stop at the first entry whose last stable offset is
//! at or past the fetch's upper bound). Entries are in marker order. A torn last entry
//! (a crash while appending) is dropped on load; the producer-state replay of the
//! segment's batches after the newest snapshot puts back any entry the file lost.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use strata_proto::{Offset, ProducerId};

use crate::error::LogError;
use crate::segment::file_stem;

/// Bytes of one entry.
pub const ENTRY_LEN: usize = 34;

/// One aborted transaction, as a read_committed fetch returns it (producer id and
/// first offset) plus what the index needs to search.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct AbortedTxn {
    pub producer_id: ProducerId,
    pub first_offset: Offset,
    /// The ABORT marker's offset.
    pub last_offset: Offset,
    pub last_stable_offset: Offset,
}

pub(crate) fn path(dir: &Path, base: Offset) -> PathBuf {
    dir.join(format!("{}.txnindex", file_stem(base)))
}

/// Encodes entries in Kafka's layout.
pub fn encode(entries: &[AbortedTxn]) -> Vec<u8> {
    let mut out = Vec::with_capacity(entries.len() * ENTRY_LEN);
    for e in entries {
        out.extend_from_slice(&0i16.to_be_bytes());
        out.extend_from_slice(&e.producer_id.to_be_bytes());
        out.extend_from_slice(&e.first_offset.to_be_bytes());
        out.extend_from_slice(&e.last_offset.to_be_bytes());
        out.extend_from_slice(&e.last_stable_offset.to_be_bytes());
    }
    out
}

/// Why an index file does not decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TxnIndexError {
    #[error("aborted-transaction entry {entry}: unknown version {version}")]
    Version { entry: usize, version: i16 },
    #[error("aborted-transaction entry {entry}: {reason}")]
    Invalid { entry: usize, reason: &'static str },
}

/// Decodes whole entries; a partial entry at the end (a torn append) is ignored.
pub fn decode(bytes: &[u8]) -> Result<Vec<AbortedTxn>, TxnIndexError> {
    let mut out = Vec::with_capacity(bytes.len() / ENTRY_LEN);
    for (entry, e) in bytes.chunks_exact(ENTRY_LEN).enumerate() {
        let i16_at = |at: usize| i16::from_be_bytes([e[at], e[at + 1]]);
        let i64_at = |at: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&e[at..at + 8]);
            i64::from_be_bytes(a)
        };
        let version = i16_at(0);
        if version != 0 {
            return Err(TxnIndexError::Version { entry, version });
        }
        let t = AbortedTxn {
            producer_id: i64_at(2),
            first_offset: i64_at(10),
            last_offset: i64_at(18),
            last_stable_offset: i64_at(26),
        };
        if t.producer_id < 0 || t.first_offset < 0 || t.last_offset < t.first_offset {
            return Err(TxnIndexError::Invalid {
                entry,
                reason: "offsets out of order or negative",
            });
        }
        out.push(t);
    }
    Ok(out)
}

/// Loads a segment's entries (none when it has no file) that end below `end`.
pub(crate) fn load(dir: &Path, base: Offset, end: Offset) -> Result<Vec<AbortedTxn>, LogError> {
    let p = path(dir, base);
    let bytes = match fs::read(&p) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(LogError::io("read", &p)(e)),
    };
    let mut entries = decode(&bytes).map_err(|e| LogError::Corrupt {
        path: p.clone(),
        position: 0,
        reason: e.to_string(),
    })?;
    entries.retain(|e| e.last_offset < end);
    Ok(entries)
}

/// Appends one entry to the segment's file (creating it). Durable with the segment's
/// next fsync ([`sync`]).
pub(crate) fn append(dir: &Path, base: Offset, entry: &AbortedTxn) -> Result<(), LogError> {
    let p = path(dir, base);
    let mut f = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&p)
        .map_err(LogError::io("open", &p))?;
    // A torn entry from a crash is at the end: cut it so this one starts aligned.
    let len = f.metadata().map_err(LogError::io("stat", &p))?.len();
    if len % ENTRY_LEN as u64 != 0 {
        f.set_len(len - len % ENTRY_LEN as u64)
            .map_err(LogError::io("truncate", &p))?;
    }
    f.write_all(&encode(std::slice::from_ref(entry)))
        .map_err(LogError::io("write", &p))
}

/// Replaces the segment's file with `entries` (removing it when there are none).
pub(crate) fn rewrite(dir: &Path, base: Offset, entries: &[AbortedTxn]) -> Result<(), LogError> {
    let p = path(dir, base);
    if entries.is_empty() {
        return match fs::remove_file(&p) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(LogError::io("remove", &p)(e)),
        };
    }
    let tmp = p.with_extension("txnindex.tmp");
    fs::write(&tmp, encode(entries)).map_err(LogError::io("write", &tmp))?;
    let f = fs::File::open(&tmp).map_err(LogError::io("open", &tmp))?;
    f.sync_all().map_err(LogError::io("fsync", &tmp))?;
    fs::rename(&tmp, &p).map_err(LogError::io("rename", &p))
}

/// Makes the segment's file durable, if it has one.
pub(crate) fn sync(dir: &Path, base: Offset) -> Result<(), LogError> {
    let p = path(dir, base);
    match fs::File::open(&p) {
        Ok(f) => f.sync_all().map_err(LogError::io("fsync", &p)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(LogError::io("open", &p)(e)),
    }
}

/// The entries of a log's segments that a read_committed
/// fetch of `[from, upper)` must return: aborted transactions whose marker is at or
/// after `from` and whose first offset is below `upper`, as Kafka's
/// `collectAbortedTransactions` finds them, stopping at the first entry whose last
/// stable offset reaches `upper` (no later marker can belong to a transaction that
/// started below it).
///
/// `entries` are the segments' entries in log order. Returns whether the search
/// reached such an entry (nothing after it can matter).
pub fn collect<'a>(
    entries: impl IntoIterator<Item = &'a AbortedTxn>,
    from: Offset,
    upper: Offset,
    out: &mut Vec<AbortedTxn>,
) -> bool {
    for e in entries {
        if e.last_offset >= from && e.first_offset < upper {
            out.push(*e);
        }
        if e.last_stable_offset >= upper {
            return true;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn t(pid: i64, first: i64, last: i64, lso: i64) -> AbortedTxn {
        AbortedTxn {
            producer_id: pid,
            first_offset: first,
            last_offset: last,
            last_stable_offset: lso,
        }
    }

    #[test]
    fn entries_round_trip_and_a_torn_tail_is_dropped() {
        let e = vec![t(1, 0, 10, 11), t(2, 5, 20, 21)];
        let bytes = encode(&e);
        assert_eq!(bytes.len(), 2 * ENTRY_LEN);
        assert_eq!(decode(&bytes).unwrap(), e);
        assert_eq!(decode(&bytes[..ENTRY_LEN + 7]).unwrap(), e[..1]);
        let mut bad = bytes.clone();
        bad[1] = 1;
        assert!(decode(&bad).is_err());
    }

    #[test]
    fn append_load_rewrite_on_disk() {
        let dir = tempfile::tempdir().unwrap();
        append(dir.path(), 0, &t(1, 0, 10, 11)).unwrap();
        // A torn entry, then another append: the torn bytes are cut first.
        let p = path(dir.path(), 0);
        let mut f = OpenOptions::new().append(true).open(&p).unwrap();
        f.write_all(&[0, 0, 1]).unwrap();
        append(dir.path(), 0, &t(2, 12, 30, 31)).unwrap();
        assert_eq!(
            load(dir.path(), 0, 100).unwrap(),
            vec![t(1, 0, 10, 11), t(2, 12, 30, 31)]
        );
        assert_eq!(load(dir.path(), 0, 30).unwrap(), vec![t(1, 0, 10, 11)]);
        rewrite(dir.path(), 0, &[t(1, 0, 10, 11)]).unwrap();
        assert_eq!(load(dir.path(), 0, 100).unwrap(), vec![t(1, 0, 10, 11)]);
        rewrite(dir.path(), 0, &[]).unwrap();
        assert!(!p.exists());
        assert_eq!(load(dir.path(), 0, 100).unwrap(), vec![]);
    }

    #[test]
    fn collect_finds_what_overlaps_and_stops_at_the_upper_bound() {
        let s1 = [t(1, 0, 10, 11), t(2, 3, 15, 16)];
        let s2 = [t(3, 12, 40, 41), t(4, 50, 60, 61)];
        let mut out = Vec::new();
        let done = collect(s1.iter().chain(&s2), 11, 45, &mut out);
        assert!(done);
        assert_eq!(out, vec![t(2, 3, 15, 16), t(3, 12, 40, 41)]);
        out.clear();
        assert!(!collect(s1.iter().chain(&s2), 0, 100, &mut out));
        assert_eq!(out.len(), 4);
    }
}
