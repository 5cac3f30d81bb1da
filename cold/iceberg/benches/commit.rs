//! What a snapshot commit costs as a table grows (issue 20's figure: flat to 100,000
//! files, thanks to manifest merging). A topic of 100 partitions publishing one file per
//! partition per interval: each commit adds 100 files, into an in-memory store (so the
//! figure is the commit's own work: reading the manifest list and the manifests it
//! merges, Avro, the metadata JSON), with old snapshots expired every 60 commits as the
//! broker's publisher does. Prints, at each checkpoint, the mean and max milliseconds of
//! the last 10 commits and the most manifests one of them read and wrote.
//!
//! `cargo bench -p strata-iceberg --bench commit` (`FILES=20000` for a shorter run).

use std::collections::BTreeMap;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use strata_iceberg::bounds::long_bytes;
use strata_iceberg::catalog::Operation;
use strata_iceberg::{Catalog, DataFile, IcebergSchema};
use strata_parquet::{ValueFormat, file_schema};
use strata_store::ObjectBackend;

const PARTITIONS: usize = 100;
const RECORDS_PER_FILE: i64 = 10_000;

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

fn main() {
    let total: usize = std::env::var("FILES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    rt.block_on(async {
        let catalog = Catalog::new(ObjectBackend::memory().into_dyn(), "memory:///", "bench");
        let arrow = file_schema(&ValueFormat::Binary);
        let schema = IcebergSchema::from_arrow(&arrow, 0).expect("schema");
        let mut table = catalog.create_table("t", &arrow).await.expect("create");
        let mut next = vec![0i64; PARTITIONS];
        let day = (now_ms() / 86_400_000) as i32;
        let mut window: Vec<(f64, usize, usize)> = Vec::new();
        let checkpoints = [1_000, 10_000, 25_000, 50_000, 100_000, 200_000];
        println!("files in table | ms per commit, mean (max) of the last 10 | manifests read / written (max)");
        for commit in 1..=total / PARTITIONS {
            let files: Vec<DataFile> = (0..PARTITIONS)
                .map(|p| {
                    let first = next[p];
                    let last = first + RECORDS_PER_FILE - 1;
                    next[p] = last + 1;
                    DataFile {
                        location: format!("memory:///bench/parquet/t/partition={p}/{first:020}-{last:020}.parquet"),
                        file_size_in_bytes: 8 << 20,
                        record_count: RECORDS_PER_FILE as u64,
                        partition: p as i32,
                        day: Some(day),
                        first_offset: first,
                        last_offset: last,
                        column_sizes: BTreeMap::from([(1, 40_000), (2, 80_000), (5, 8_000_000)]),
                        value_counts: BTreeMap::from([(1, RECORDS_PER_FILE), (2, RECORDS_PER_FILE)]),
                        null_value_counts: BTreeMap::from([(4, 0), (5, 0)]),
                        lower_bounds: BTreeMap::from([(2, long_bytes(first))]),
                        upper_bounds: BTreeMap::from([(2, long_bytes(last))]),
                        split_offsets: vec![4],
                        schema: schema.clone(),
                    }
                })
                .collect();
            let t0 = Instant::now();
            table
                .commit(files, &[], Operation::Append)
                .await
                .expect("commit");
            let ms = t0.elapsed().as_secs_f64() * 1000.0;
            let stats = table.last_commit_stats();
            window.push((ms, stats.manifests_read, stats.manifests_written));
            if window.len() > 10 {
                window.remove(0);
            }
            if commit % 60 == 0 {
                table
                    .expire_snapshots(now_ms() + 1, 10)
                    .await
                    .expect("expire");
            }
            let files_now = commit * PARTITIONS;
            if checkpoints.contains(&files_now) || files_now == total {
                let mean = window.iter().map(|w| w.0).sum::<f64>() / window.len() as f64;
                let max = window.iter().map(|w| w.0).fold(0.0, f64::max);
                let read = window.iter().map(|w| w.1).max().unwrap_or(0);
                let written = window.iter().map(|w| w.2).max().unwrap_or(0);
                println!("{files_now:>14} | {mean:>8.1} ({max:.1}) | {read} / {written}");
            }
        }
    });
}
