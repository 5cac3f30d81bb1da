//! The controller's log store and state machine against openraft's storage suite, plus
//! what the suite does not cover: reopening a directory, torn tails, snapshots on disk.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs::OpenOptions;
use std::io::Write;

use openraft::storage::{RaftLogStorage, RaftStateMachine};
use openraft::testing::{StoreBuilder, Suite, log_id};
use openraft::{Entry, EntryPayload, RaftLogReader, RaftSnapshotBuilder, StorageError, Vote};
use strata_controller::store::{LogStore, StateMachineStore};
use strata_controller::{Command, CommandOutput, TypeConfig};
use tempfile::TempDir;

struct DirBuilder {
    segment_bytes: u64,
}

impl StoreBuilder<TypeConfig, LogStore, StateMachineStore, TempDir> for DirBuilder {
    async fn build(&self) -> Result<(TempDir, LogStore, StateMachineStore), StorageError<u64>> {
        let dir = tempfile::tempdir().expect("temp dir");
        let (log, sm) =
            strata_controller::store::open(dir.path(), self.segment_bytes).expect("open store");
        Ok((dir, log, sm))
    }
}

#[test]
fn openraft_storage_suite() {
    Suite::test_all(DirBuilder {
        segment_bytes: 8 << 20,
    })
    .unwrap();
}

/// The same suite with tiny segments: every few entries start a new file, so purge and
/// truncate cross segment boundaries.
#[test]
fn openraft_storage_suite_with_tiny_segments() {
    Suite::test_all(DirBuilder { segment_bytes: 200 }).unwrap();
}

fn cmd_entry(term: u64, index: u64, count: i64) -> Entry<TypeConfig> {
    Entry {
        log_id: log_id(term, 1, index),
        payload: EntryPayload::Normal(Command::AllocateProducerIds { count }),
    }
}

async fn append(log: &mut LogStore, entries: Vec<Entry<TypeConfig>>) {
    // LogFlushed cannot be built outside openraft; RaftLogStorageExt does it for us.
    use openraft::storage::RaftLogStorageExt;
    log.blocking_append(entries).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reopened_log_keeps_vote_entries_truncation_and_purge() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut log = LogStore::open(dir.path(), 150).unwrap();
        log.save_vote(&Vote::new(3, 1)).await.unwrap();
        append(&mut log, (1..=20).map(|i| cmd_entry(1, i, 1)).collect()).await;
        log.truncate(log_id(1, 1, 15)).await.unwrap();
        append(&mut log, (15..=17).map(|i| cmd_entry(2, i, 1)).collect()).await;
        log.purge(log_id(1, 1, 6)).await.unwrap();
        log.save_committed(Some(log_id(2, 1, 16))).await.unwrap();
    }
    let mut log = LogStore::open(dir.path(), 150).unwrap();
    assert_eq!(log.read_vote().await.unwrap(), Some(Vote::new(3, 1)));
    assert_eq!(log.read_committed().await.unwrap(), Some(log_id(2, 1, 16)));
    let state = log.get_log_state().await.unwrap();
    assert_eq!(state.last_purged_log_id, Some(log_id(1, 1, 6)));
    assert_eq!(state.last_log_id, Some(log_id(2, 1, 17)));
    let entries = log.try_get_log_entries(0..100).await.unwrap();
    let ids: Vec<_> = entries
        .iter()
        .map(|e| (e.log_id.leader_id.term, e.log_id.index))
        .collect();
    let mut want: Vec<_> = (7..=14).map(|i| (1, i)).collect();
    want.extend((15..=17).map(|i| (2, i)));
    assert_eq!(ids, want);
    // Purged segments are gone from the directory.
    let files = std::fs::read_dir(dir.path().join("log")).unwrap().count();
    assert!(files < 10, "{files} segment files left");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_torn_tail_is_cut_off_and_appends_continue() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut log = LogStore::open(dir.path(), 1 << 20).unwrap();
        append(&mut log, (1..=5).map(|i| cmd_entry(1, i, 1)).collect()).await;
    }
    // A crash mid-append: half a frame at the end of the only segment.
    let seg = std::fs::read_dir(dir.path().join("log"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let mut f = OpenOptions::new().append(true).open(&seg).unwrap();
    f.write_all(&[40, 0, 0, 0, 1, 2, 3, 4, b'{']).unwrap();
    drop(f);
    let mut log = LogStore::open(dir.path(), 1 << 20).unwrap();
    assert_eq!(
        log.get_log_state().await.unwrap().last_log_id,
        Some(log_id(1, 1, 5))
    );
    append(&mut log, vec![cmd_entry(1, 6, 1)]).await;
    drop(log);
    let mut log = LogStore::open(dir.path(), 1 << 20).unwrap();
    assert_eq!(log.try_get_log_entries(1..).await.unwrap().len(), 6);

    // Damage before the tail is not a crash artefact: the voter refuses to start rather
    // than drop entries it may have acknowledged.
    let mut bytes = std::fs::read(&seg).unwrap();
    bytes[12] ^= 0xff;
    std::fs::write(&seg, &bytes).unwrap();
    let err = LogStore::open(dir.path(), 1 << 20).unwrap_err();
    assert!(err.to_string().contains("CRC"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshots_survive_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let built = {
        let mut sm = StateMachineStore::open(dir.path()).unwrap();
        let out = sm
            .apply(vec![cmd_entry(1, 1, 10), cmd_entry(1, 2, 5)])
            .await
            .unwrap();
        assert_eq!(
            out[1],
            Ok(CommandOutput::ProducerIds {
                first: 1010,
                count: 5
            })
        );
        sm.get_snapshot_builder()
            .await
            .build_snapshot()
            .await
            .unwrap()
    };
    let mut sm = StateMachineStore::open(dir.path()).unwrap();
    let (applied, _) = sm.applied_state().await.unwrap();
    assert_eq!(applied, Some(log_id(1, 1, 2)));
    assert_eq!(sm.metadata().next_producer_id, 1015);
    assert_eq!(sm.metadata().version, 2);
    let current = sm.get_current_snapshot().await.unwrap().unwrap();
    assert_eq!(current.meta, built.meta);
}
