//! `strata log`: offline tools over a partition directory.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use clap::Subcommand;
use strata_log::{Log, LogConfig, SystemClock};
use strata_proto::batch;

#[derive(Subcommand, Debug)]
pub enum LogCommand {
    /// Open (and so recover) a partition directory and print its segments and offsets.
    Inspect {
        /// The partition directory (holding 00000000000000000000.log and friends).
        dir: PathBuf,
    },
    /// Print the batches (and optionally records) of a partition directory.
    Dump {
        dir: PathBuf,
        /// First offset to print.
        #[arg(long, default_value_t = 0)]
        from: i64,
        /// Stop after this many batches.
        #[arg(long, default_value_t = u64::MAX)]
        max_batches: u64,
        /// Print each record's offset, timestamp, key and value size.
        #[arg(long)]
        records: bool,
    },
}

fn open(dir: &Path) -> anyhow::Result<(Log, strata_log::RecoveryReport)> {
    if !dir.is_dir() {
        anyhow::bail!(
            "{} is not a directory: pass a partition directory such as strata-data/orders-0",
            dir.display()
        );
    }
    Log::open(dir, LogConfig::default(), Arc::new(SystemClock))
        .with_context(|| format!("cannot open the log in {}", dir.display()))
}

pub fn run(cmd: LogCommand) -> anyhow::Result<()> {
    match cmd {
        LogCommand::Inspect { dir } => {
            let (log, report) = open(&dir)?;
            outln!("log start offset  {}", log.log_start_offset());
            outln!("log end offset    {}", log.log_end_offset());
            outln!("size on disk      {} bytes", log.size_bytes());
            for t in &report.truncations {
                outln!(
                    "recovery: truncated segment {} at byte {} ({} bytes removed): {}",
                    t.segment_base,
                    t.position,
                    t.bytes_removed,
                    t.reason
                );
            }
            for s in &report.deleted_segments {
                outln!("recovery: removed segment {s}");
            }
            for s in &report.rebuilt_indexes {
                outln!("recovery: rebuilt the index of segment {s}");
            }
            outln!(
                "{:>20}  {:>20}  {:>12}  {:>15}  state",
                "base offset",
                "next offset",
                "bytes",
                "max timestamp"
            );
            for s in log.segments() {
                outln!(
                    "{:>20}  {:>20}  {:>12}  {:>15}  {}",
                    s.base_offset,
                    s.next_offset,
                    s.size_bytes,
                    s.max_timestamp,
                    if s.sealed { "sealed" } else { "active" }
                );
            }
            Ok(())
        }
        LogCommand::Dump {
            dir,
            from,
            max_batches,
            records,
        } => {
            let (log, _) = open(&dir)?;
            let mut offset = from.max(log.log_start_offset());
            let mut printed = 0u64;
            // Where the next batch would start if offsets were dense: a later base is a
            // range compaction removed.
            let mut expected: Option<i64> = Some(offset);
            while offset < log.log_end_offset() && printed < max_batches {
                let r = log.read(offset, 1 << 20, None)?;
                for b in batch::batches(&r.data) {
                    let b = b?;
                    let h = b.header();
                    if let Some(e) = expected.filter(|&e| h.base_offset > e) {
                        outln!(
                            "gap {e}..{} ({} offsets removed by compaction)",
                            h.base_offset - 1,
                            h.base_offset - e
                        );
                    }
                    expected = Some(h.next_offset());
                    let horizon = h
                        .delete_horizon()
                        .map_or(String::new(), |t| format!(" deleteHorizon {t}"));
                    outln!(
                        "baseOffset {} lastOffset {} count {} epoch {} size {} compression {:?} producerId {} seq {} maxTimestamp {} crcValid {}{horizon}",
                        h.base_offset,
                        h.last_offset(),
                        h.record_count,
                        h.partition_leader_epoch,
                        b.len(),
                        b.compression()?,
                        h.producer_id,
                        h.base_sequence,
                        h.max_timestamp,
                        b.validate_crc().is_ok()
                    );
                    if records {
                        let mut next = h.base_offset;
                        for r in b.records()?.iter() {
                            let r = r?;
                            if r.offset > next {
                                outln!("  gap {next}..{}", r.offset - 1);
                            }
                            next = r.offset + 1;
                            outln!(
                                "  offset {} timestamp {} key {} value {} headers {}",
                                r.offset,
                                r.timestamp,
                                r.key
                                    .map_or("null".to_string(), |k| String::from_utf8_lossy(k)
                                        .into_owned()),
                                r.value.map_or("null (tombstone)".to_string(), |v| format!(
                                    "{} bytes",
                                    v.len()
                                )),
                                r.headers.len()
                            );
                        }
                        if next <= h.last_offset() {
                            outln!("  gap {next}..{}", h.last_offset());
                        }
                    }
                    printed += 1;
                    if printed >= max_batches {
                        break;
                    }
                }
                offset = r.next_offset;
            }
            Ok(())
        }
    }
}
