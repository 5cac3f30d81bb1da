//! The catalog's tests: commits and their conflicts on either store, loading, deletes,
//! replaces, manifest merging, the metadata log, expiry and what a REST commit asks.

use std::collections::BTreeSet;

use bytes::Bytes;
use strata_parquet::{ValueFormat, file_schema};
use strata_store::{ErrorKind, ObjectBackend, PutMode};

use super::rest_diff::rest_changes;
use super::*;
use crate::manifest::tests::file;
use crate::manifest::{
    ManifestEntry, ManifestFile, STATUS_ADDED, STATUS_DELETED, STATUS_EXISTING, read_manifest,
    read_manifest_list,
};
use crate::metadata::{Snapshot, summary_keys};

/// A new, empty table `t` of binary-valued files in `c`.
async fn table(c: &Catalog) -> Table {
    c.create_table("t", &file_schema(&ValueFormat::Binary))
        .await
        .unwrap()
}

fn catalog() -> Catalog {
    Catalog::new(ObjectBackend::memory().into_dyn(), "memory:///", "root")
}

/// What a REST catalog is asked: the snapshot a commit adds and `main` moved to it,
/// only if `main` is still where the table was loaded; an expiry's removed snapshots.
#[tokio::test]
async fn rest_commits_ask_for_the_change_under_the_loaded_branch() {
    let c = catalog();
    let mut t = table(&c).await;
    t.append(vec![file(0, Some(1), 0, 9)]).await.unwrap();
    let loaded = t.metadata().clone();
    let first = loaded.current_snapshot_id.unwrap();
    t.append(vec![file(0, Some(1), 10, 19)]).await.unwrap();
    let second = t.metadata().current_snapshot_id.unwrap();
    let (requirements, updates) = rest_changes(&loaded, t.metadata());
    assert!(
        requirements.contains(&json!({"type": "assert-ref-snapshot-id",
        "ref": "main", "snapshot-id": first}))
    );
    assert!(requirements.contains(&json!({"type": "assert-table-uuid",
        "uuid": loaded.table_uuid})));
    let actions: Vec<&str> = updates
        .iter()
        .map(|u| u["action"].as_str().unwrap())
        .collect();
    assert_eq!(actions, ["add-snapshot", "set-snapshot-ref"]);
    assert_eq!(updates[0]["snapshot"]["snapshot-id"], json!(second));
    assert_eq!(updates[0]["snapshot"]["parent-snapshot-id"], json!(first));
    assert_eq!(updates[1]["snapshot-id"], json!(second));
    // Before the first snapshot, `main` must not exist yet.
    let (requirements, _) = rest_changes(&table(&catalog()).await.metadata, &loaded);
    assert!(
        requirements.contains(&json!({"type": "assert-ref-snapshot-id",
        "ref": "main", "snapshot-id": null}))
    );

    let before = t.metadata().clone();
    t.expire_snapshots(i64::MAX, 1).await.unwrap();
    let (_, updates) = rest_changes(&before, t.metadata());
    assert_eq!(
        updates,
        [json!({"action": "remove-snapshots", "snapshot-ids": [first]})]
    );
}

#[tokio::test]
async fn concurrent_commits_to_one_version_conflict() {
    let c = catalog();
    let schema = file_schema(&ValueFormat::Binary);
    c.create_table("orders", &schema).await.unwrap();
    assert!(matches!(
        c.create_table("orders", &schema).await,
        Err(IcebergError::TableExists { .. })
    ));
    let mut a = c.load_table("orders").await.unwrap();
    let mut b = c.load_table("orders").await.unwrap();
    assert_eq!((a.version(), b.version()), (1, 1));
    a.append(vec![file(0, Some(1), 0, 9)]).await.unwrap();
    assert_eq!(a.version(), 2);
    let e = b.append(vec![file(1, Some(1), 0, 4)]).await.unwrap_err();
    assert!(
        matches!(e, IcebergError::CommitConflict { version: 2, .. }),
        "{e}"
    );
    assert!(e.to_string().contains("reload"), "{e}");
    // The loser's table is unchanged; after a reload it commits on top.
    assert_eq!(b.version(), 1);
    let mut b = c.load_table("orders").await.unwrap();
    assert_eq!(b.last_committed_offsets(), BTreeMap::from([(0, 9)]));
    b.append(vec![file(1, Some(1), 0, 4)]).await.unwrap();
    let t = c.load_table("orders").await.unwrap();
    assert_eq!(t.version(), 3);
    assert_eq!(t.last_committed_offsets(), BTreeMap::from([(0, 9), (1, 4)]));
    let s = t.metadata().current_snapshot().unwrap();
    assert_eq!(s.summary["total-data-files"], "2");
    assert_eq!(s.summary["total-records"], "15");
    assert_eq!(s.summary["added-records"], "5");
    assert_eq!(s.summary[&summary_keys::first_offset(1)], "0");
    assert_eq!(s.summary[&summary_keys::last_offset(1)], "4");
    // Partition 0 was not added to here, but its committed offset is carried.
    assert!(!s.summary.contains_key(&summary_keys::first_offset(0)));
    assert_eq!(s.summary[&summary_keys::committed_offset(0)], "9");
    assert_eq!(t.metadata().metadata_log.len(), 2);
    assert_eq!(t.metadata().refs["main"].snapshot_id, s.snapshot_id);
}

/// Two handles of one table, loaded at the same version, commit at the same time
/// through one store wrapped as the broker holds it (retries, timeouts, metrics), in
/// memory and in a local directory: exactly one wins, the other gets
/// `CommitConflict` and changes nothing. After reloading, the loser sees the
/// winner's offsets: its own files overlap them and are refused, files above them
/// commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_handles_over_one_blob_store_have_exactly_one_winner() {
    let dir = tempfile::tempdir().unwrap();
    let schema = file_schema(&ValueFormat::Binary);
    for round in 0..16 {
        let (backend, uri) = if round % 2 == 0 {
            (ObjectBackend::memory().into_dyn(), "memory:///".to_string())
        } else {
            let d = dir.path().join(format!("r{round}"));
            let uri = format!("file://{}", d.display());
            (ObjectBackend::local(&d).unwrap().into_dyn(), uri)
        };
        let store = strata_store::layered(backend, strata_store::LayerConfig::default());
        let c = Catalog::new(store, &uri, "root");
        c.create_table("t", &schema).await.unwrap();
        let a = c.load_table("t").await.unwrap();
        let b = c.load_table("t").await.unwrap();
        // Two publishers of partition 0 that both read "nothing committed yet".
        let files = [file(0, Some(1), 0, 9), file(0, Some(1), 0, 14)];
        let start = Arc::new(tokio::sync::Barrier::new(2));
        let race = |mut t: Table, f: DataFile| {
            let start = start.clone();
            tokio::spawn(async move {
                start.wait().await;
                let r = t.append(vec![f]).await;
                (t, r)
            })
        };
        let (ja, jb) = (race(a, files[0].clone()), race(b, files[1].clone()));
        let (ra, rb) = (ja.await.unwrap(), jb.await.unwrap());
        // (the winner's table, its file's index, the loser's table, its index, error)
        let (won, w, mut lost_table, l, e) = match (ra, rb) {
            ((wt, Ok(_)), (lt, Err(e))) => (wt, 0, lt, 1, e),
            ((lt, Err(e)), (wt, Ok(_))) => (wt, 1, lt, 0, e),
            (a, b) => panic!("round {round}: not one winner: {:?} {:?}", a.1, b.1),
        };
        assert!(
            matches!(e, IcebergError::CommitConflict { version: 2, .. }),
            "round {round}: {e}"
        );
        assert_eq!((won.version(), lost_table.version()), (2, 1));
        assert!(lost_table.last_committed_offsets().is_empty());
        let committed = files[w].last_offset;

        // The store holds the winner's version 2, and no version 3.
        let loaded = c.load_table("t").await.unwrap();
        assert_eq!(loaded.version(), 2);
        assert_eq!(loaded.metadata(), won.metadata());
        assert_eq!(live(&loaded).await, BTreeSet::from([loc(&files[w])]));

        // The loser reloads: the winner's offsets are committed, so its own file
        // (overlapping them) is refused and files above them go in.
        lost_table = c.load_table("t").await.unwrap();
        assert_eq!(
            lost_table.last_committed_offsets(),
            BTreeMap::from([(0, committed)])
        );
        assert!(matches!(
            lost_table.append(vec![files[l].clone()]).await,
            Err(IcebergError::OffsetsAlreadyCommitted { .. })
        ));
        let next = file(0, Some(1), committed + 1, committed + 10);
        lost_table.append(vec![next.clone()]).await.unwrap();
        assert_eq!(lost_table.version(), 3);
        let t = c.load_table("t").await.unwrap();
        assert_eq!(t.version(), 3);
        assert_eq!(
            t.last_committed_offsets(),
            BTreeMap::from([(0, committed + 10)])
        );
        assert_eq!(live(&t).await, BTreeSet::from([loc(&files[w]), loc(&next)]));
    }
}

/// A create of the next version that the store applied but whose answer was lost
/// (a timeout after the fact) is retried by the store wrapper, which finds its own
/// bytes there and reports success. When it cannot tell (its read-back fails too),
/// the commit is a `CommitConflict`; reloading finds the commit in place and its
/// files are not added twice.
#[tokio::test]
async fn a_commit_whose_answer_was_lost_is_never_applied_twice() {
    use std::time::Duration;
    use strata_store::{Fault, FaultStore, LayerConfig, Op, RetryConfig};

    let faults = FaultStore::new(ObjectBackend::memory().into_dyn());
    let handle = faults.handle();
    let config = LayerConfig {
        retry: RetryConfig {
            initial_backoff: Duration::from_millis(1),
            max_backoff: Duration::from_millis(5),
            seed: Some(7),
            ..RetryConfig::default()
        },
        ..LayerConfig::default()
    };
    let store = strata_store::layered(Arc::new(faults), config);
    let c = Catalog::new(store, "memory:///", "root");
    let mut t = table(&c).await;
    let lost_answer = |version: u64| {
        Fault::new(ErrorKind::Timeout)
            .op(Op::Put)
            .prefix(format!("root/iceberg/t/metadata/v{version}.metadata.json"))
            .after_call()
    };

    // The retry finds its own version 2: success.
    handle.inject(lost_answer(2));
    let a = file(0, Some(1), 0, 9);
    t.append(vec![a.clone()]).await.unwrap();
    assert_eq!(handle.injected(), 1);
    assert_eq!(t.version(), 2);
    assert_eq!(c.load_table("t").await.unwrap().metadata(), t.metadata());

    // The read-back fails as well: a conflict, although version 3 is ours.
    handle.inject(lost_answer(3));
    handle.inject(
        Fault::new(ErrorKind::Permanent)
            .op(Op::Get)
            .prefix("root/iceberg/t/metadata/v3.metadata.json"),
    );
    let b = file(0, Some(1), 10, 19);
    let e = t.append(vec![b.clone()]).await.unwrap_err();
    assert!(
        matches!(e, IcebergError::CommitConflict { version: 3, .. }),
        "{e}"
    );
    assert_eq!(handle.injected(), 3);
    let mut t = c.load_table("t").await.unwrap();
    assert_eq!(t.version(), 3);
    assert_eq!(t.last_committed_offsets(), BTreeMap::from([(0, 19)]));
    assert!(matches!(
        t.append(vec![b.clone()]).await,
        Err(IcebergError::OffsetsAlreadyCommitted { committed: 19, .. })
    ));
    assert_eq!(live(&t).await, BTreeSet::from([loc(&a), loc(&b)]));
}

#[tokio::test]
async fn a_local_file_system_refuses_the_second_commit_too() {
    let dir = tempfile::tempdir().unwrap();
    let store = ObjectBackend::local(dir.path()).unwrap().into_dyn();
    let c = Catalog::new(store, &format!("file://{}", dir.path().display()), "");
    let schema = file_schema(&ValueFormat::Binary);
    let mut a = c.create_table("t", &schema).await.unwrap();
    let mut b = c.load_table("t").await.unwrap();
    a.append(vec![file(0, Some(1), 0, 9)]).await.unwrap();
    let e = b.append(vec![file(0, Some(1), 0, 9)]).await.unwrap_err();
    assert!(
        matches!(e, IcebergError::CommitConflict { version: 2, .. }),
        "{e}"
    );
    assert!(
        dir.path()
            .join("iceberg/t/metadata/v2.metadata.json")
            .exists()
    );
    let hint =
        std::fs::read_to_string(dir.path().join("iceberg/t/metadata/version-hint.text")).unwrap();
    assert_eq!(hint, "2");
    assert!(matches!(
        c.create_table("t", &schema).await,
        Err(IcebergError::TableExists { .. })
    ));
}

#[tokio::test]
async fn offsets_already_in_the_table_are_refused() {
    let c = catalog();
    let mut t = table(&c).await;
    t.append(vec![file(0, Some(1), 0, 9), file(0, Some(1), 10, 19)])
        .await
        .unwrap();
    assert_eq!(t.last_committed_offsets(), BTreeMap::from([(0, 19)]));
    let e = t.append(vec![file(0, Some(2), 15, 30)]).await.unwrap_err();
    assert!(
        matches!(
            e,
            IcebergError::OffsetsAlreadyCommitted { committed: 19, .. }
        ),
        "{e}"
    );
    // Two files of one append may not overlap either.
    let e = t
        .append(vec![file(0, Some(2), 20, 30), file(0, Some(2), 25, 40)])
        .await
        .unwrap_err();
    assert!(
        matches!(
            e,
            IcebergError::OffsetsAlreadyCommitted { committed: 30, .. }
        ),
        "{e}"
    );
    assert_eq!(t.version(), 2);
    t.append(vec![file(0, Some(2), 20, 30)]).await.unwrap();
    assert_eq!(t.last_committed_offsets(), BTreeMap::from([(0, 30)]));
}

#[tokio::test]
async fn snapshots_carry_earlier_manifests_forward() {
    let c = catalog();
    let mut t = table(&c).await;
    let s1 = t.append(vec![file(0, Some(1), 0, 9)]).await.unwrap();
    // A file spanning days goes to spec 1: two new manifests.
    let s2 = t
        .append(vec![file(0, Some(2), 10, 19), file(1, None, 0, 5)])
        .await
        .unwrap();
    let list1 = read_manifest_list(&t.read_uri(&s1.manifest_list).await.unwrap(), "1").unwrap();
    let list2 = read_manifest_list(&t.read_uri(&s2.manifest_list).await.unwrap(), "2").unwrap();
    assert_eq!(list1.len(), 1);
    assert_eq!(list2.len(), 3);
    assert_eq!(list2[2], list1[0], "the old manifest is listed as it was");
    assert_eq!(
        list2
            .iter()
            .map(|m| m.partition_spec_id)
            .collect::<Vec<_>>(),
        [0, 1, 0]
    );
    assert_eq!(list2[0].sequence_number, 2);
    assert_eq!(s2.parent_snapshot_id, Some(s1.snapshot_id));
    assert_eq!(s2.sequence_number, 2);
}

#[tokio::test]
async fn loading_follows_a_lagging_or_missing_hint() {
    let c = catalog();
    let mut t = table(&c).await;
    t.append(vec![file(0, Some(1), 0, 9)]).await.unwrap();
    t.append(vec![file(0, Some(1), 10, 19)]).await.unwrap();
    let hint = "root/iceberg/t/metadata/version-hint.text";
    // A crash between the commit and the hint: the hint says 2, v3 exists.
    c.store
        .put(hint, Bytes::from_static(b"2"), PutMode::Overwrite)
        .await
        .unwrap();
    let loaded = c.load_table("t").await.unwrap();
    assert_eq!(loaded.version(), 3);
    assert_eq!(loaded.metadata(), t.metadata());
    c.store.delete(hint).await.unwrap();
    assert_eq!(c.load_table("t").await.unwrap().version(), 3);
    assert!(matches!(
        c.load_table("other").await,
        Err(IcebergError::NoSuchTable { .. })
    ));
    assert_eq!(
        loaded.metadata_location(),
        "memory:///root/iceberg/t/metadata/v3.metadata.json"
    );
}

/// Every entry of every manifest of `s`, with the manifest it is in.
async fn entries(t: &Table, s: &Snapshot) -> Vec<(ManifestFile, ManifestEntry)> {
    let list = read_manifest_list(&t.read_uri(&s.manifest_list).await.unwrap(), "l").unwrap();
    let mut out = Vec::new();
    for m in list {
        let bytes = t.read_uri(&m.manifest_path).await.unwrap();
        for e in read_manifest(&bytes, &m.manifest_path).unwrap() {
            out.push((m.clone(), e));
        }
    }
    out
}

/// The locations of the live files of the current snapshot.
async fn live(t: &Table) -> BTreeSet<String> {
    let s = t.metadata().current_snapshot().unwrap().clone();
    entries(t, &s)
        .await
        .into_iter()
        .filter(|(_, e)| e.is_live())
        .map(|(_, e)| e.file.location)
        .collect()
}

async fn exists(c: &Catalog, uri: &str) -> bool {
    let rel = uri.strip_prefix("memory:///").unwrap();
    c.store.head(rel).await.is_ok()
}

fn loc(f: &DataFile) -> String {
    f.location.clone()
}

#[tokio::test]
async fn a_delete_rewrites_the_manifest_and_keeps_every_committed_offset() {
    let c = catalog();
    let mut t = table(&c).await;
    let (a, b, p1) = (
        file(0, Some(1), 0, 9),
        file(0, Some(1), 10, 19),
        file(1, Some(1), 0, 4),
    );
    let s1 = t.append(vec![a.clone(), b.clone()]).await.unwrap();
    let s2 = t.append(vec![p1.clone()]).await.unwrap();
    let s3 = t
        .commit(vec![], &[loc(&b)], Operation::Delete)
        .await
        .unwrap();
    assert_eq!(s3.summary["operation"], "delete");
    assert_eq!(s3.summary["deleted-data-files"], "1");
    assert_eq!(s3.summary["deleted-records"], "10");
    assert_eq!(s3.summary["total-data-files"], "2");
    assert_eq!(s3.summary["total-records"], "15");
    assert!(!s3.summary.contains_key("added-data-files"));
    assert!(!s3.summary.contains_key(&summary_keys::first_offset(0)));
    // The delete does not make the table forget where either partition is.
    assert_eq!(s3.committed_offsets(), BTreeMap::from([(0, 19), (1, 4)]));
    assert_eq!(
        c.load_table("t").await.unwrap().last_committed_offsets(),
        BTreeMap::from([(0, 19), (1, 4)])
    );
    assert_eq!(live(&t).await, BTreeSet::from([loc(&a), loc(&p1)]));
    assert_eq!(
        t.last_commit_stats(),
        CommitStats {
            manifests_read: 2,
            manifests_written: 1
        }
    );

    let got = entries(&t, &s3).await;
    let of = |f: &DataFile| {
        got.iter()
            .find(|(_, e)| e.file.location == f.location)
            .unwrap()
    };
    // a: EXISTING, still with the snapshot and sequence number that added it.
    let (m, ea) = of(&a);
    assert_eq!(
        (
            ea.status,
            ea.snapshot_id,
            ea.sequence_number,
            ea.file_sequence_number
        ),
        (STATUS_EXISTING, s1.snapshot_id, 1, 1)
    );
    // b: DELETED by the delete snapshot, its data sequence number kept.
    let (mb, eb) = of(&b);
    assert_eq!(
        (eb.status, eb.snapshot_id, eb.sequence_number),
        (STATUS_DELETED, s3.snapshot_id, 1)
    );
    assert_eq!(m, mb, "one rewritten manifest");
    assert_eq!(
        (
            m.added_snapshot_id,
            m.sequence_number,
            m.min_sequence_number,
            m.added_files_count,
            m.existing_files_count,
            m.deleted_files_count,
            m.existing_rows_count,
            m.deleted_rows_count
        ),
        (s3.snapshot_id, 3, 1, 0, 1, 1, 10, 10)
    );
    // Partition 1's manifest is carried as it was.
    let (m1, e1) = of(&p1);
    assert_eq!(
        (m1.added_snapshot_id, e1.status),
        (s2.snapshot_id, STATUS_ADDED)
    );

    // Removing what the table does not hold (any more) is an error naming it.
    for missing in [loc(&b), "file:///nowhere.parquet".to_string()] {
        let e = t
            .commit(vec![], &[loc(&a), missing.clone()], Operation::Delete)
            .await
            .unwrap_err();
        assert!(
            matches!(&e, IcebergError::NoSuchDataFile { location, .. } if *location == missing),
            "{e}"
        );
        assert!(e.to_string().contains(&missing), "{e}");
    }
    assert_eq!(t.version(), 4);

    // The next rewrite drops b's DELETED entry from the earlier snapshot.
    let s4 = t
        .commit(vec![], &[loc(&a)], Operation::Delete)
        .await
        .unwrap();
    let got = entries(&t, &s4).await;
    assert_eq!(got.len(), 2, "{got:?}");
    assert!(got.iter().all(|(_, e)| e.file.location != b.location));
    assert_eq!(s4.summary["total-data-files"], "1");
    assert_eq!(s4.committed_offsets(), BTreeMap::from([(0, 19), (1, 4)]));
    // Appends resume after the committed offset, not after what is left.
    assert!(matches!(
        t.append(vec![file(0, Some(1), 15, 25)]).await,
        Err(IcebergError::OffsetsAlreadyCommitted { committed: 19, .. })
    ));
    t.append(vec![file(0, Some(1), 20, 25)]).await.unwrap();
    assert_eq!(
        t.last_committed_offsets(),
        BTreeMap::from([(0, 25), (1, 4)])
    );
}

#[tokio::test]
async fn replace_keeps_offsets_and_overwrite_advances_only_for_new_ones() {
    let c = catalog();
    let mut t = table(&c).await;
    let (a, b, p1) = (
        file(0, Some(1), 0, 9),
        file(0, Some(1), 10, 19),
        file(1, None, 0, 4),
    );
    t.append(vec![a.clone()]).await.unwrap();
    t.append(vec![b.clone(), p1.clone()]).await.unwrap();
    let ab = file(0, Some(1), 0, 19);
    // Operations must match what the commit does.
    for (add, remove, op) in [
        (vec![ab.clone()], vec![loc(&a)], Operation::Append),
        (vec![ab.clone()], vec![loc(&a)], Operation::Delete),
        (vec![], vec![], Operation::Delete),
        (vec![ab.clone()], vec![], Operation::Replace),
        (vec![], vec![loc(&a)], Operation::Overwrite),
        // Not the same rows.
        (vec![ab.clone()], vec![loc(&a)], Operation::Replace),
        // Offsets beyond the committed ones are not a rewrite.
        (
            vec![file(0, Some(1), 0, 29)],
            vec![loc(&a), loc(&b)],
            Operation::Replace,
        ),
    ] {
        let e = t.commit(add, &remove, op).await.unwrap_err();
        assert!(
            matches!(e, IcebergError::InvalidCommit { .. }),
            "{op:?}: {e}"
        );
    }
    assert_eq!(t.version(), 3);

    let s = t
        .commit(vec![ab.clone()], &[loc(&a), loc(&b)], Operation::Replace)
        .await
        .unwrap();
    assert_eq!(s.summary["operation"], "replace");
    assert_eq!(s.summary["added-data-files"], "1");
    assert_eq!(s.summary["deleted-data-files"], "2");
    assert_eq!(s.summary["total-data-files"], "2");
    assert_eq!(s.summary["total-records"], "25");
    assert!(!s.summary.contains_key(&summary_keys::first_offset(0)));
    assert_eq!(
        t.last_committed_offsets(),
        BTreeMap::from([(0, 19), (1, 4)])
    );
    assert_eq!(live(&t).await, BTreeSet::from([loc(&ab), loc(&p1)]));
    let got = entries(&t, &s).await;
    let added: Vec<_> = got
        .iter()
        .filter(|(_, e)| e.status == STATUS_ADDED && e.snapshot_id == s.snapshot_id)
        .collect();
    assert_eq!(added.len(), 1);
    assert_eq!(added[0].1.file.location, ab.location);
    assert_eq!(added[0].1.sequence_number, 3);
    assert_eq!(
        got.iter()
            .filter(|(_, e)| e.status == STATUS_DELETED)
            .count(),
        2
    );

    // An overwrite: ab's rows rewritten (fewer), and new offsets of partition 0.
    let fewer = file(0, Some(1), 0, 14);
    let new = file(0, Some(2), 20, 25);
    let s = t
        .commit(
            vec![fewer.clone(), new.clone()],
            &[loc(&ab)],
            Operation::Overwrite,
        )
        .await
        .unwrap();
    assert_eq!(s.summary["operation"], "overwrite");
    assert_eq!(s.summary[&summary_keys::first_offset(0)], "20");
    assert_eq!(s.summary[&summary_keys::last_offset(0)], "25");
    assert_eq!(s.summary["total-records"], "26");
    assert_eq!(
        t.last_committed_offsets(),
        BTreeMap::from([(0, 25), (1, 4)])
    );
    assert_eq!(
        live(&t).await,
        BTreeSet::from([loc(&fewer), loc(&new), loc(&p1)])
    );
    // A file straddling the committed offset is neither.
    assert!(matches!(
        t.commit(
            vec![file(0, Some(2), 20, 30)],
            &[loc(&new)],
            Operation::Overwrite
        )
        .await,
        Err(IcebergError::OffsetsAlreadyCommitted { .. })
    ));
}

#[tokio::test]
async fn manifests_stay_bounded_over_many_commits() {
    let c = catalog();
    let mut t = table(&c).await;
    let mut all = BTreeSet::new();
    let mut most = CommitStats::default();
    for i in 0..300i64 {
        // Two partitions, a file across midnight now and then (the other spec).
        let p = (i % 2) as i32;
        let day = (i % 7 != 0).then_some(1);
        let f = file(p, day, i * 10, i * 10 + 9);
        all.insert(loc(&f));
        t.append(vec![f]).await.unwrap();
        let s = t.metadata().current_snapshot().unwrap().clone();
        let list = read_manifest_list(&t.read_uri(&s.manifest_list).await.unwrap(), "l").unwrap();
        assert!(list.len() <= MAX_MANIFESTS, "commit {i}: {}", list.len());
        let st = t.last_commit_stats();
        most.manifests_read = most.manifests_read.max(st.manifests_read);
        most.manifests_written = most.manifests_written.max(st.manifests_written);
    }
    // Per commit: its own manifest, and at most one merge.
    assert_eq!(
        most,
        CommitStats {
            manifests_read: MERGE_AT_ONCE,
            manifests_written: 2
        }
    );
    assert_eq!(live(&t).await, all);
    let s = t.metadata().current_snapshot().unwrap().clone();
    let got = entries(&t, &s).await;
    assert_eq!(got.len(), 300, "each file once");
    // Merged manifests keep one spec each, and each file's own sequence number.
    for (m, e) in &got {
        assert_eq!(m.partition_spec_id, PartitionSpec::of(&e.file).id);
        let i = e.file.first_offset / 10;
        assert_eq!(e.sequence_number, i + 1);
    }
    assert_eq!(s.summary["total-data-files"], "300");
    // The metadata log stays at its default bound; older metadata files are gone.
    assert_eq!(
        t.metadata().metadata_log.len(),
        DEFAULT_PREVIOUS_VERSIONS_MAX
    );
    assert!(!exists(&c, "memory:///root/iceberg/t/metadata/v200.metadata.json").await);
    assert!(exists(&c, &t.metadata().metadata_log[0].metadata_file).await);
    let reloaded = c.load_table("t").await.unwrap();
    assert_eq!(reloaded.version(), 301);
}

#[tokio::test]
async fn metadata_log_keeps_previous_versions_max() {
    let c = catalog();
    let mut t = table(&c).await;
    assert_eq!(
        t.metadata().properties[DELETE_AFTER_COMMIT_PROPERTY],
        "true"
    );
    assert_eq!(
        t.metadata().properties[PREVIOUS_VERSIONS_MAX_PROPERTY],
        "100"
    );
    t.metadata
        .properties
        .insert(PREVIOUS_VERSIONS_MAX_PROPERTY.to_string(), "3".to_string());
    for i in 0..6 {
        t.append(vec![file(0, Some(1), i * 10, i * 10 + 9)])
            .await
            .unwrap();
    }
    assert_eq!(t.version(), 7);
    let log: Vec<&str> = t
        .metadata()
        .metadata_log
        .iter()
        .map(|e| e.metadata_file.as_str())
        .collect();
    let v = |n: u64| format!("memory:///root/iceberg/t/metadata/v{n}.metadata.json");
    assert_eq!(log, [v(4), v(5), v(6)]);
    for n in 1..=3 {
        assert!(!exists(&c, &v(n)).await, "v{n} deleted");
    }
    for n in 4..=7 {
        assert!(exists(&c, &v(n)).await, "v{n} kept");
    }
    // Without delete-after-commit the files stay (Iceberg's default).
    t.metadata.properties.insert(
        DELETE_AFTER_COMMIT_PROPERTY.to_string(),
        "false".to_string(),
    );
    t.append(vec![file(0, Some(1), 100, 109)]).await.unwrap();
    assert!(exists(&c, &v(4)).await);
    assert_eq!(t.metadata().metadata_log.len(), 3);
}

#[tokio::test]
async fn expiry_drops_old_snapshots_and_returns_what_they_alone_held() {
    let c = catalog();
    let mut t = table(&c).await;
    let (a, b, x) = (
        file(0, Some(1), 0, 9),
        file(1, Some(1), 0, 9),
        file(0, Some(1), 10, 19),
    );
    let s1 = t.append(vec![a.clone()]).await.unwrap();
    let s2 = t.append(vec![b.clone()]).await.unwrap();
    let s3 = t
        .commit(vec![], &[loc(&a)], Operation::Delete)
        .await
        .unwrap();
    let s4 = t.append(vec![x.clone()]).await.unwrap();
    let m1 = read_manifest_list(&t.read_uri(&s1.manifest_list).await.unwrap(), "l").unwrap();
    let stale = c.load_table("t").await.unwrap();

    // Nothing is old enough: nothing happens.
    let version = t.version();
    assert_eq!(t.expire_snapshots(0, 1).await.unwrap(), Expired::default());
    assert_eq!(t.version(), version);

    // All old enough, keep the newest two (s3, s4).
    let e = t.expire_snapshots(i64::MAX, 2).await.unwrap();
    assert_eq!(e.snapshot_ids, [s1.snapshot_id, s2.snapshot_id]);
    assert_eq!(
        e.manifest_lists,
        [s1.manifest_list.clone(), s2.manifest_list.clone()]
    );
    // s1's manifest (only a) was rewritten by the delete; s2's is still listed.
    assert_eq!(e.manifests, [m1[0].manifest_path.clone()]);
    assert_eq!(e.data_files, [loc(&a)], "a is in no kept snapshot");
    assert!(e.not_deleted.is_empty());
    for uri in e.manifest_lists.iter().chain(&e.manifests) {
        assert!(!exists(&c, uri).await, "{uri} deleted");
    }
    let loaded = c.load_table("t").await.unwrap();
    let ids: Vec<i64> = loaded
        .metadata()
        .snapshots
        .iter()
        .map(|s| s.snapshot_id)
        .collect();
    assert_eq!(ids, [s3.snapshot_id, s4.snapshot_id]);
    let log: Vec<i64> = loaded
        .metadata()
        .snapshot_log
        .iter()
        .map(|s| s.snapshot_id)
        .collect();
    assert_eq!(log, [s3.snapshot_id, s4.snapshot_id]);
    assert_eq!(loaded.metadata().current_snapshot_id, Some(s4.snapshot_id));
    assert_eq!(live(&loaded).await, BTreeSet::from([loc(&b), loc(&x)]));
    assert_eq!(
        loaded.last_committed_offsets(),
        BTreeMap::from([(0, 19), (1, 9)])
    );
    // Every kept snapshot still reads.
    for s in &loaded.metadata().snapshots {
        entries(&loaded, s).await;
    }

    // A writer that loaded before the expiry loses the race, deleting nothing.
    let mut stale = stale;
    let s4_list = s4.manifest_list.clone();
    assert!(matches!(
        stale.expire_snapshots(i64::MAX, 1).await,
        Err(IcebergError::CommitConflict { .. })
    ));
    assert!(exists(&c, &s4_list).await);
    assert!(exists(&c, &s3.manifest_list).await);

    // Never the current snapshot, even with retain_last 0.
    let e = t.expire_snapshots(i64::MAX, 0).await.unwrap();
    assert_eq!(e.snapshot_ids, [s3.snapshot_id]);
    // The delete that removed a is gone too, but a was already handed back.
    assert!(e.data_files.is_empty(), "{e:?}");
    assert_eq!(t.metadata().snapshots.len(), 1);
    assert_eq!(live(&t).await, BTreeSet::from([loc(&b), loc(&x)]));
    t.append(vec![file(0, Some(1), 20, 29)]).await.unwrap();
}
