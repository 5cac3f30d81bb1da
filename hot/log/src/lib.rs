//! Strata's local partition log.
//!
//! A partition is a directory of segments. Each segment is a `.log` file holding Kafka
//! RecordBatch v2 bytes exactly as the producer sent them (only the base offset and the
//! partition leader epoch, which the CRC does not cover, are rewritten), plus a sparse
//! offset index (`.index`) and a time index (`.timeindex`). The names and entry formats
//! follow Kafka's, so the files are familiar to anyone who has debugged a Kafka log dir:
//!
//! ```text
//! 00000000000000000000.log         batches
//! 00000000000000000000.index       (relative offset u32, position u32) every index.interval.bytes
//! 00000000000000000000.timeindex   (max timestamp so far i64, relative offset u32)
//! recovery-point                   every byte below this offset is fsynced
//! log-start-offset                 the first offset readers may see
//! ```
//!
//! # Durability (flush policy)
//!
//! An append writes to the page cache; it is durable only once fsynced. The log fsyncs
//! (a) when a segment rolls, before the sealed segment counts as sealed; (b) when
//! `flush.messages` records have been appended since the last fsync; (c) when the oldest
//! unflushed append is `flush.ms` old, checked on append and by [`Log::maybe_flush`],
//! which the owner calls periodically; (d) on [`Log::flush`] and [`Log::close`]. With
//! Kafka's defaults (both unbounded) durability comes from replication, as in Kafka: a
//! record acknowledged with acks=all lives in the page cache of every in-sync replica,
//! and survives the loss of any of them but not a simultaneous power loss of all
//! (KIP-966). Set `flush.messages=1` for fsync-per-append.
//!
//! # Recovery
//!
//! [`Log::open`] rescans, CRC-checking every batch, each segment at or above the
//! recovery point, and always the last segment. A torn or corrupt tail is truncated at
//! the last valid batch; later segments are removed (offsets must stay dense); missing
//! or damaged indexes are rebuilt. Segments below the recovery point are trusted, but
//! their indexes are sanity-checked when first used and rebuilt if damaged.

mod checkpoint;
mod clock;
mod config;
mod error;
mod index;
mod log;
mod segment;

pub use clock::{Clock, ManualClock, SystemClock};
pub use config::{LogConfig, RetentionLimits};
pub use error::LogError;
pub use log::{
    AppendInfo, Log, ReadResult, RecoveryReport, RetentionOutcome, SegmentInfo, Truncation,
};
