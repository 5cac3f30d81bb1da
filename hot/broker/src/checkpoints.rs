//! One checkpoint file for every partition hosted here (Kafka's
//! `recovery-point-offset-checkpoint` and `replication-offset-checkpoint`, in one file):
//! each partition's recovery point (below it the log trusts its segments at open) and
//! high-water mark (where a restarted replica starts serving from). Written at every
//! checkpoint interval and at a clean shutdown: with 10,000 partitions one file and one
//! fsync, instead of two per partition that moved.
//!
//! Lines are keyed by the partition's directory name and its topic id, so an entry of a
//! deleted topic never applies to a new one of the same name. Both values are lower
//! bounds, and the log keeps its own recovery-point file where its point moves back (a
//! truncation); it takes the lower of the two (`strata_log::RecoveryCheckpoint`).
//!
//! ```text
//! strata-partition-checkpoints 1
//! 2
//! orders-0 5f0c…e1 1200 1187
//! orders-1 5f0c…e1 1340 1340
//! end
//! ```

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;

use strata_proto::{Offset, TopicId};

/// The file, in the data directory.
pub const FILE: &str = "partition-checkpoints";
const HEADER: &str = "strata-partition-checkpoints 1";

/// What the file holds for one partition.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Entry {
    pub topic_id: TopicId,
    pub recovery_point: Offset,
    pub high_watermark: Offset,
}

/// What the checkpoint file held for a partition at start, and whether the broker had
/// stopped cleanly before ([`take_clean_shutdown`]).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Saved {
    pub entry: Entry,
    pub clean_stop: bool,
}

/// The clean-shutdown marker, in the data directory (Kafka's `.kafka_cleanshutdown`):
/// written at the end of a clean stop, after every partition was readied for it
/// (`strata_log::Log::prepare_shutdown`) and this file written; removed, durably, at
/// start before any partition opens. While it is there, every log is exactly as the
/// checkpoint file describes it, active segments' indexes included, so an open scans
/// only the active segment's last index interval.
pub const CLEAN_SHUTDOWN: &str = "clean-shutdown";

/// Writes the clean-shutdown marker (fsynced, with its directory entry).
pub fn write_clean_shutdown(data_dir: &Path) -> std::io::Result<()> {
    let path = data_dir.join(CLEAN_SHUTDOWN);
    let mut f = std::fs::File::create(&path)?;
    f.write_all(b"strata clean shutdown\n")?;
    f.sync_all()?;
    std::fs::File::open(data_dir)?.sync_all()
}

/// Whether the last stop was clean (the marker is there), removing the marker for good
/// first: from here on the logs change, and a crash must not find it. A marker that
/// cannot be removed durably counts as absent (every open then scans its tail).
pub fn take_clean_shutdown(data_dir: &Path) -> bool {
    let path = data_dir.join(CLEAN_SHUTDOWN);
    match std::fs::remove_file(&path) {
        Ok(()) => match std::fs::File::open(data_dir).and_then(|d| d.sync_all()) {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(dir = %data_dir.display(), error = %e, "cannot fsync the data directory: partitions scan their active segments whole");
                false
            }
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
        Err(e) => {
            tracing::warn!(file = %path.display(), error = %e, "cannot remove the clean-shutdown marker: partitions scan their active segments whole");
            false
        }
    }
}

/// The entries of the file in `data_dir`, by partition directory name; empty if it is
/// absent, torn or of an unknown version (every value in it is a lower bound that is
/// safe to lose: partitions then rescan their sealed segments).
pub fn read(data_dir: &Path) -> HashMap<String, Entry> {
    let path = data_dir.join(FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => parse(&text).unwrap_or_else(|| {
            tracing::warn!(file = %path.display(), "partition checkpoint file is damaged: partitions rescan their sealed segments");
            HashMap::new()
        }),
        Err(_) => HashMap::new(),
    }
}

fn parse(text: &str) -> Option<HashMap<String, Entry>> {
    let mut lines = text.lines();
    if lines.next()? != HEADER {
        return None;
    }
    let count: usize = lines.next()?.trim().parse().ok()?;
    // Bounded by what the file holds, not by what its count line says.
    let mut out = HashMap::with_capacity(count.min(text.len() / 8));
    for _ in 0..count {
        let mut f = lines.next()?.split(' ');
        let name = f.next()?.to_string();
        let entry = Entry {
            topic_id: f.next()?.parse().ok()?,
            recovery_point: f.next()?.parse().ok()?,
            high_watermark: f.next()?.parse().ok()?,
        };
        if f.next().is_some() {
            return None;
        }
        out.insert(name, entry);
    }
    // The trailing "end" line proves the write was complete.
    (lines.next()? == "end" && lines.next().is_none()).then_some(out)
}

/// Replaces the file in `data_dir` with `entries`: temp file, fsync, rename, directory
/// fsync (once this returns, the values hold across a crash).
pub fn write(data_dir: &Path, entries: &[(String, Entry)]) -> std::io::Result<()> {
    let mut text = String::with_capacity(64 + entries.len() * 64);
    text.push_str(HEADER);
    text.push('\n');
    text.push_str(&format!("{}\n", entries.len()));
    for (name, e) in entries {
        text.push_str(&format!(
            "{name} {} {} {}\n",
            e.topic_id, e.recovery_point, e.high_watermark
        ));
    }
    text.push_str("end\n");
    let path = data_dir.join(FILE);
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(text.as_bytes())?;
    f.sync_all()?;
    std::fs::rename(&tmp, &path)?;
    std::fs::File::open(data_dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(rp: Offset, hw: Offset) -> Entry {
        Entry {
            topic_id: "000000000000000000000000000000ab".parse().unwrap(),
            recovery_point: rp,
            high_watermark: hw,
        }
    }

    #[test]
    fn what_is_written_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        assert!(read(dir.path()).is_empty(), "absent: empty");
        let entries = vec![
            ("orders-0".to_string(), entry(1200, 1187)),
            ("a-b-c-17".to_string(), entry(0, 0)),
        ];
        write(dir.path(), &entries).unwrap();
        let got = read(dir.path());
        assert_eq!(got.len(), 2);
        assert_eq!(got["orders-0"], entry(1200, 1187));
        assert_eq!(got["a-b-c-17"], entry(0, 0));
        write(dir.path(), &[]).unwrap();
        assert!(read(dir.path()).is_empty());
    }

    #[test]
    fn the_clean_shutdown_marker_is_taken_once() {
        let dir = tempfile::tempdir().unwrap();
        assert!(!take_clean_shutdown(dir.path()), "never written");
        write_clean_shutdown(dir.path()).unwrap();
        assert!(take_clean_shutdown(dir.path()));
        assert!(!dir.path().join(CLEAN_SHUTDOWN).exists());
        assert!(
            !take_clean_shutdown(dir.path()),
            "a second start after a crash"
        );
    }

    #[test]
    fn a_torn_or_damaged_file_reads_as_empty() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), &[("t-0".to_string(), entry(5, 4))]).unwrap();
        let whole = std::fs::read_to_string(dir.path().join(FILE)).unwrap();
        // (Cut only before the final newline, it is whole.)
        for cut in 0..whole.len() - 1 {
            std::fs::write(dir.path().join(FILE), &whole[..cut]).unwrap();
            assert!(
                read(dir.path()).is_empty(),
                "cut at {cut}: {:?}",
                &whole[..cut]
            );
        }
        for bad in [
            whole.replace("1\n", "9\n"),
            whole.replace(" 5 ", " x "),
            whole.replace(
                "strata-partition-checkpoints 1",
                "strata-partition-checkpoints 2",
            ),
            format!("{whole}extra\n"),
            // A count far beyond what the file holds allocates nothing for it.
            whole.replace("\n1\n", "\n18446744073709551615\n"),
        ] {
            std::fs::write(dir.path().join(FILE), &bad).unwrap();
            assert!(read(dir.path()).is_empty(), "{bad:?}");
        }
    }
}
