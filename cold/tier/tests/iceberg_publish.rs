//! The Iceberg publisher over a local-directory store: small-file compaction of the
//! Parquet files reaches the table as a `replace` snapshot (same rows, fewer files), new
//! data and a compaction in one round as an `overwrite`, and snapshot expiry deletes the
//! replaced files once no kept snapshot names them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use strata_iceberg::Catalog;
use strata_parquet::{CompactPolicy, ConvertOptions, ExpiredObjects, ParquetLayout, ParquetSink};
use strata_proto::Compression;
use strata_proto::TopicConfig;
use strata_proto::batch::build::{NewRecord, batch};
use strata_proto::batch::set_base_offset;
use strata_store::{BlobStore, ObjectBackend};
use strata_tier::iceberg::{expire, publish, table_keys};

const TOPIC: &str = "events";
const CLUSTER: &str = "c1";
const TS0: i64 = 1_700_000_000_000;

struct Fixture {
    _dir: tempfile::TempDir,
    store: Arc<dyn BlobStore>,
    uri: String,
    config: TopicConfig,
    sink: ParquetSink,
    next: BTreeMap<i32, i64>,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let store = ObjectBackend::local(dir.path()).unwrap().into_dyn();
        let uri = format!("file://{}", dir.path().canonicalize().unwrap().display());
        let overrides: BTreeMap<String, String> = [
            ("remote.storage.enable", "true"),
            ("parquet.enable", "true"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let config = TopicConfig::resolve(&overrides).unwrap();
        let sink = ParquetSink::new(
            store.clone(),
            ParquetLayout::new(CLUSTER),
            ConvertOptions::from_topic_config(TOPIC, 0, &config).unwrap(),
        );
        Fixture {
            _dir: dir,
            store,
            uri,
            config,
            sink,
            next: BTreeMap::new(),
        }
    }

    /// `n` one-batch segments of four records each on `partition`.
    async fn segments(&mut self, partition: i32, n: usize) {
        for _ in 0..n {
            let base = *self.next.entry(partition).or_insert(0);
            self.sink
                .write_segment(TOPIC, partition, &segment(partition, base))
                .await
                .unwrap();
            self.next.insert(partition, base + 4);
        }
    }

    async fn publish(&self) -> Option<strata_tier::iceberg::Published> {
        publish(&self.catalog(), TOPIC, 2, &self.config)
            .await
            .unwrap()
    }

    /// An object at `key` that no manifest names (an upload whose manifest update never
    /// happened).
    async fn put_stray(&self, key: &str) {
        self.store
            .put(
                key,
                bytes::Bytes::from_static(b"PAR1"),
                strata_store::PutMode::Overwrite,
            )
            .await
            .unwrap();
    }

    fn catalog(&self) -> Catalog {
        Catalog::new(self.store.clone(), &self.uri, CLUSTER)
    }

    async fn table(&self) -> strata_iceberg::Table {
        self.catalog().load_table(TOPIC).await.unwrap()
    }

    /// The URIs of every file the Parquet manifests list.
    async fn listed(&self) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        for p in 0..2 {
            for f in self.sink.files(TOPIC, p).await.unwrap() {
                out.insert(format!("{}/{}", self.uri, f.key));
            }
        }
        out
    }

    async fn compact(&self, partition: i32) -> usize {
        let held = table_keys(&self.catalog(), TOPIC, partition).await.unwrap();
        let policy = CompactPolicy {
            force: true,
            only: Some(held),
            ..CompactPolicy::new(self.config.parquet_target_file_bytes, TS0)
        };
        self.sink
            .compact(TOPIC, partition, &policy, ExpiredObjects::Keep)
            .await
            .unwrap()
            .iter()
            .map(|c| c.replaced.len())
            .sum()
    }
}

/// A one-batch segment of four records from `base`.
fn segment(partition: i32, base: i64) -> Vec<u8> {
    let records: Vec<NewRecord> = (0..4)
        .map(|i| NewRecord::value(format!("p{partition}-{}", base + i), TS0 + base + i))
        .collect();
    let mut seg = batch(&records, Compression::None, None).to_vec();
    set_base_offset(&mut seg, base);
    seg
}

fn operation(table: &strata_iceberg::Table) -> String {
    table.metadata().current_snapshot().unwrap().summary["operation"].clone()
}

fn records(table: &strata_iceberg::Table) -> u64 {
    table
        .metadata()
        .current_snapshot()
        .unwrap()
        .count("total-records")
}

#[tokio::test]
async fn compaction_is_a_replace_snapshot_and_expiry_deletes_what_it_replaced() {
    let mut f = Fixture::new();
    f.segments(0, 30).await;
    f.segments(1, 30).await;
    let first = f.publish().await.unwrap();
    assert_eq!(first.added_files, 60);
    let table = f.table().await;
    assert_eq!(records(&table), 240);

    // Partition 0's files are compacted: the next round replaces them in the table.
    let replaced = f.compact(0).await;
    assert_eq!(replaced, 30);
    let round = f.publish().await.unwrap();
    assert_eq!((round.added_files, round.removed_files), (1, 30));
    let table = f.table().await;
    assert_eq!(operation(&table), "replace");
    assert_eq!(records(&table), 240);
    let live: BTreeSet<String> = table.live_files().await.unwrap().into_iter().collect();
    assert_eq!(live, f.listed().await);
    assert_eq!(table.last_committed_offsets()[&0], 119);
    // Nothing left to do.
    assert!(f.publish().await.is_none());

    // New data on partition 1 and its older files compacted, in one round.
    f.segments(1, 5).await;
    assert_eq!(f.compact(1).await, 30);
    let round = f.publish().await.unwrap();
    assert_eq!((round.added_files, round.removed_files), (6, 30));
    let table = f.table().await;
    assert_eq!(operation(&table), "overwrite");
    assert_eq!(records(&table), 260);
    assert_eq!(table.last_committed_offsets()[&1], 139);
    let live: BTreeSet<String> = table.live_files().await.unwrap().into_iter().collect();
    assert_eq!(live, f.listed().await);

    // The replaced objects are still there for the snapshots that name them, until
    // those expire.
    let root = format!("{}/", f.uri);
    let objects = |store: Arc<dyn BlobStore>| async move {
        store
            .list(&format!("{CLUSTER}/parquet"))
            .await
            .unwrap()
            .into_iter()
            .map(|m| m.path)
            .filter(|p| p.ends_with(".parquet"))
            .count()
    };
    assert_eq!(objects(f.store.clone()).await, 60 + 5 + 2);
    let mut table = f.table().await;
    let report = expire(&f.catalog(), &mut table, i64::MAX, 1).await.unwrap();
    assert_eq!(report.data_files, 60);
    assert_eq!(objects(f.store.clone()).await, 7);
    // Every file the table holds is still readable.
    for uri in f.table().await.live_files().await.unwrap() {
        let key = uri.strip_prefix(&root).unwrap();
        f.store.head(key).await.unwrap();
    }
}

#[test]
fn value_schema_changes_one_table_cannot_read_are_refused() {
    let config = |pairs: &[(&str, &str)]| {
        let overrides: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        TopicConfig::resolve(&overrides).unwrap()
    };
    let json = |schema: &str, parquet: &str| {
        config(&[
            ("remote.storage.enable", "true"),
            ("parquet.enable", parquet),
            ("parquet.value.format", "json"),
            ("parquet.value.schema", schema),
        ])
    };
    let v1 = r#"{"fields":[{"name":"a","type":"utf8"},{"name":"b","type":"int64"}]}"#;
    let grown = r#"{"fields":[{"name":"a","type":"utf8"},{"name":"b","type":"int64"},{"name":"c","type":"bool","nullable":true}]}"#;
    let required = r#"{"fields":[{"name":"a","type":"utf8"},{"name":"b","type":"int64"},{"name":"c","type":"bool"}]}"#;
    let reordered = r#"{"fields":[{"name":"b","type":"int64"},{"name":"a","type":"utf8"}]}"#;
    let fewer = r#"{"fields":[{"name":"a","type":"utf8"}]}"#;
    let binary = config(&[
        ("remote.storage.enable", "true"),
        ("parquet.enable", "true"),
    ]);
    let check = strata_tier::iceberg::check_config_change;

    assert_eq!(check(&json(v1, "true"), &json(grown, "true")), Ok(()));
    assert_eq!(check(&json(v1, "true"), &json(v1, "true")), Ok(()));
    for (to, why) in [
        (required, "must be nullable"),
        (reordered, "member 'a' became 'b'"),
        (fewer, "members cannot be removed"),
    ] {
        let e = check(&json(v1, "true"), &json(to, "true")).unwrap_err();
        assert!(e.contains(why), "{to}: {e}");
    }
    let e = check(&binary, &json(v1, "true")).unwrap_err();
    assert!(
        e.contains("from binary values to typed JSON columns"),
        "{e}"
    );
    assert!(check(&json(v1, "true"), &binary).is_err());
    // Before parquet.enable was ever on there are no files to keep readable.
    assert_eq!(check(&json(v1, "false"), &json(fewer, "true")), Ok(()));
}

/// A backfill (`strata tier parquet backfill`) that converts older offsets after the
/// table already holds later ones: the files below are appended, and the table's
/// committed offsets stay where they were.
#[tokio::test]
async fn a_backfill_below_the_table_is_appended() {
    let mut f = Fixture::new();
    f.next.insert(0, 40);
    f.segments(0, 5).await;
    f.segments(1, 2).await;
    f.publish().await.unwrap();
    let table = f.table().await;
    assert_eq!(records(&table), 28);
    let committed = table.last_committed_offsets();
    assert_eq!(committed[&0], 59);

    // Offsets 0..40 of partition 0, converted afterwards below the files' start.
    for base in (0..40).step_by(4) {
        f.sink
            .write_backfill(TOPIC, 0, &segment(0, base))
            .await
            .unwrap();
    }
    let round = f.publish().await.unwrap();
    assert_eq!((round.added_files, round.removed_files), (10, 0));
    let table = f.table().await;
    assert_eq!(operation(&table), "append");
    assert_eq!(records(&table), 68);
    assert_eq!(table.last_committed_offsets(), committed);
    let live: BTreeSet<String> = table.live_files().await.unwrap().into_iter().collect();
    assert_eq!(live, f.listed().await);
    assert!(f.publish().await.is_none());
}

/// The orphan sweep deletes the objects nothing names (files retention dropped before the
/// table ever took them, a stray upload) and keeps what a manifest lists or a kept
/// snapshot names (files compaction replaced stay for time travel until expiry).
#[tokio::test]
async fn orphans_go_and_what_a_snapshot_names_stays() {
    let mut f = Fixture::new();
    f.segments(0, 10).await;
    // Retention drops the first four files before the first commit (the publisher was
    // behind): no snapshot will ever name them.
    let dropped: Vec<String> = f.sink.files(TOPIC, 0).await.unwrap()[..4]
        .iter()
        .map(|e| e.key.clone())
        .collect();
    f.sink
        .expire_with(TOPIC, 0, 16, ExpiredObjects::Keep)
        .await
        .unwrap();
    f.publish().await.unwrap();
    // Compaction replaces the six the table holds; the table takes the rewrite.
    assert_eq!(f.compact(0).await, 6);
    f.publish().await.unwrap();
    // A stray upload no manifest names.
    let stray = format!(
        "{CLUSTER}/parquet/topic={TOPIC}/partition=0/date=2023-11-14/{:020}-{:020}.parquet",
        7, 9
    );
    f.put_stray(&stray).await;
    let exists = |key: String| {
        let store = f.store.clone();
        async move { store.head(&key).await.is_ok() }
    };

    // Nothing is old enough yet.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let swept = strata_tier::iceberg::remove_orphans(&f.catalog(), TOPIC, 2, now - 3_600_000)
        .await
        .unwrap();
    assert_eq!(swept, 0);
    let swept = strata_tier::iceberg::remove_orphans(&f.catalog(), TOPIC, 2, now + 60_000)
        .await
        .unwrap();
    assert_eq!(swept, 5, "four dropped files and the stray");
    for k in &dropped {
        assert!(!exists(k.clone()).await, "{k}");
    }
    assert!(!exists(stray).await);
    // The table's file, and the six it replaced (named by the snapshot before), stay.
    let table = f.table().await;
    let root = format!("{}/", f.uri);
    let referenced = table.referenced_files().await.unwrap();
    assert_eq!(referenced.len(), 7);
    for l in &referenced {
        assert!(
            exists(l.strip_prefix(&root).unwrap().to_string()).await,
            "{l}"
        );
    }
    // Once the old snapshots expire, expiry itself deletes the six.
    let mut table = f.table().await;
    let report = expire(&f.catalog(), &mut table, i64::MAX, 1).await.unwrap();
    assert_eq!(report.data_files, 6);
}

/// A topic with typed JSON values also gets a dead-letter table beside its own: the rows
/// whose value did not fit (raw value, reason) in their dead-letter files, committed in
/// the same round; they leave it as their files leave the manifest.
#[tokio::test]
async fn misfits_are_published_in_a_dead_letter_table() {
    let mut f = Fixture::new();
    let overrides: BTreeMap<String, String> = [
        ("remote.storage.enable", "true"),
        ("parquet.enable", "true"),
        ("parquet.value.format", "json"),
        (
            "parquet.value.schema",
            r#"{"fields":[{"name":"n","type":"int64"}]}"#,
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    f.config = TopicConfig::resolve(&overrides).unwrap();
    f.sink = ParquetSink::new(
        f.store.clone(),
        ParquetLayout::new(CLUSTER),
        ConvertOptions::from_topic_config(TOPIC, 0, &f.config).unwrap(),
    );
    // Ten segments of four values on partition 0; every fourth does not fit.
    for s in 0..10i64 {
        let records: Vec<NewRecord> = (0..4)
            .map(|i| {
                let o = s * 4 + i;
                let v = if i == 3 {
                    format!("bad-{o}")
                } else {
                    format!(r#"{{"n":{o}}}"#)
                };
                NewRecord::value(v, TS0 + o)
            })
            .collect();
        let mut seg = batch(&records, Compression::None, None).to_vec();
        set_base_offset(&mut seg, s * 4);
        f.sink.write_segment(TOPIC, 0, &seg).await.unwrap();
    }
    f.publish().await.unwrap();
    assert_eq!(
        records(&f.table().await),
        40,
        "every row in the topic's table"
    );
    let dead = strata_tier::iceberg::dead_letter_catalog(&f.catalog());
    let table = dead.load_table(TOPIC).await.unwrap();
    assert_eq!(records(&table), 10, "the misfits in the dead-letter table");
    let files = table.live_data_files().await.unwrap();
    assert_eq!(files.len(), 10);
    assert!(files.iter().all(|d| {
        d.location
            .contains(&format!("/{CLUSTER}/dead_letters/parquet/topic={TOPIC}/"))
    }));
    // Nothing new: no commit to either table.
    assert!(f.publish().await.is_none());
    // Retention drops the first five files: their dead-letter files leave the table.
    f.sink
        .expire_with(TOPIC, 0, 20, ExpiredObjects::Keep)
        .await
        .unwrap();
    f.publish().await.unwrap();
    let table = dead.load_table(TOPIC).await.unwrap();
    assert_eq!(records(&table), 5);
    assert_eq!(records(&f.table().await), 20);
    // Small-file compaction: the rewrite takes its inputs' dead-letter files, which stay
    // in the dead-letter table as they are.
    assert_eq!(f.compact(0).await, 5);
    let files = f.sink.files(TOPIC, 0).await.unwrap();
    assert_eq!(files.len(), 1);
    assert_eq!(files[0].dead_letter_files.len(), 5);
    f.publish().await.unwrap();
    assert_eq!(records(&f.table().await), 20);
    let table = dead.load_table(TOPIC).await.unwrap();
    assert_eq!(records(&table), 5);
    assert_eq!(table.live_data_files().await.unwrap().len(), 5);

    // The orphan sweep covers the dead-letter files too: a stray upload there goes, the
    // files a manifest lists or a kept snapshot names stay.
    let stray = format!(
        "{CLUSTER}/dead_letters/parquet/topic={TOPIC}/partition=0/date=2023-11-14/{:020}-{:020}.parquet",
        99, 99
    );
    f.put_stray(&stray).await;
    let later = i64::MAX / 2;
    let swept = strata_tier::iceberg::remove_orphans(&f.catalog(), TOPIC, 2, later)
        .await
        .unwrap();
    assert!(f.store.head(&stray).await.is_err(), "the stray is gone");
    let root = format!("{}/", f.uri);
    for d in table.referenced_files().await.unwrap() {
        let key = d.strip_prefix(&root).unwrap();
        assert!(f.store.head(key).await.is_ok(), "{key} stays");
    }
    for e in f.sink.files(TOPIC, 0).await.unwrap() {
        for d in &e.dead_letter_files {
            assert!(f.store.head(&d.key).await.is_ok(), "{} stays", d.key);
        }
    }
    assert_eq!(
        swept, 1,
        "only the stray: what compaction replaced a kept snapshot names"
    );
}
