//! Strata's local partition log.
//!
//! The crate owns a partition's data on local disk: appends (as leader and as
//! follower), reads, rolls and flushes, recovery, retention and truncation,
//! compaction, the idempotent-producer and transaction state, and the leader-epoch
//! cache. The broker and the replica state machine drive it; it does no networking.
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
//! 00000000000000000000.txnindex    aborted transactions whose marker is in the segment (34-byte entries)
//! 00000000000000000000.snapshot    idempotent-producer state of every batch below this offset
//! recovery-point                   every byte below this offset is fsynced
//! log-start-offset                 the first offset readers may see
//! leader-epoch-checkpoint          the first offset of every leader epoch (KIP-101)
//! ```
//!
//! Public modules:
//! * [`epoch`]: the sans-IO leader-epoch cache and its checkpoint format.
//! * [`files`]: the process-wide bounded cache of segment file descriptors.
//! * [`index`]: sparse offset and time indexes, their lookups and public decoder.
//! * [`priority`]: background threads (the cleaner, Parquet) in the idle CPU and IO classes.
//! * [`producer`]: sans-IO idempotent-producer and transaction state, and its snapshot.
//! * [`read_cache`]: recently read segment bytes, shared by every log (direct mode).
//! * [`txn_index`]: a segment's aborted transactions (Kafka's `.txnindex`).
//! * [`window`]: the batch-window walk of a read (public so remote reads share it).
//!
//! Internal modules: `log` (the [`Log`]; its children append, read, roll and flush,
//! keep the recovery point and the epoch cache, open and recover it, apply retention
//! and truncation, and compact it), `segment` (one segment's files, scanning, header
//! walks), `tail` (direct writes through the aligned tail buffer, and reads from it),
//! `direct_read` (direct reads of the rest), `sealed` (what the offloader takes:
//! [`SealedSegment`], [`Log::recut`]), `snapshot` (producer snapshot files),
//! `checkpoint` (checkpoint files replaced atomically), `config`, `clock` and `error`.
//!
//! # IO modes
//!
//! [`LogConfig::io_mode`] chooses how the active segment is written. [`IoMode::Buffered`]
//! writes through the page cache, as Kafka does. [`IoMode::Direct`] (the default) writes
//! with `O_DIRECT` from an aligned in-memory tail buffer of the active segment, because
//! the page-cache copy and ext4's delayed allocation were most of the broker's CPU: each
//! append is written as whole 4 KiB blocks, the last one zero-padded, so the partial
//! last block is written again by the next append. The tail buffer (bounded by
//! [`LogConfig::tail_cache_bytes`]) also serves reads of the newest bytes from memory;
//! older bytes, of the active segment and of sealed ones, are read with `O_DIRECT` too
//! (`direct_read`): the block-aligned superset of the wanted range, into an aligned
//! buffer that the returned `Bytes` is a slice of, so that a consumer catching up
//! neither fills the page cache nor pays for its pages (most of a cold buffered read's
//! CPU). Recovery scans read with `O_DIRECT` as well. A segment has at most two fds:
//! its ordinary one and an `O_DIRECT` one (the active segment's append fd, which also
//! serves its reads, or one opened read-only for a sealed segment's reads), both taken
//! from the process-wide bounded cache ([`files`]) for the operation at hand. The file format is the
//! same in both modes, except that the active segment's file may end in up to 4095 zero
//! bytes of padding until it is sealed or the log closed; recovery cuts such padding
//! without counting it as lost data. A filesystem that refuses `O_DIRECT` (EINVAL at
//! open or at the first write) makes the log fall back to buffered writes and reads;
//! one that refuses only `O_DIRECT` reads (EINVAL at a read's open or at a read) makes
//! it read through the page cache; each with one warning. Buffered mode reads through
//! the page cache, as Kafka does.
//!
//! Direct writes pay a fixed kernel cost per write (about 30 µs of CPU in the VM this
//! was measured on), so they win for large appends (1 MiB batches) and lose for small
//! ones (16 KiB), where the page cache's copy is cheaper than a device write per
//! append; see `benches/benches/log.rs`.
//!
//! # Durability (flush policy)
//!
//! In buffered mode an append writes to the page cache; in direct mode it writes to the
//! device, whose volatile write cache may still hold it. Either way the bytes are in the
//! file when the append returns, so a killed process loses nothing it appended, and
//! either way they are durable only once fsynced (`fdatasync`, which also flushes the
//! device cache): `O_DIRECT` bypasses the page cache, not the device's. The log fsyncs
//! (a) when a segment rolls, before the sealed segment counts as sealed; (b) when
//! `flush.messages` records have been appended since the last fsync; (c) when the oldest
//! unflushed append is `flush.ms` old, checked on append and by [`Log::maybe_flush`],
//! which the owner calls periodically; (d) on [`Log::flush`] and [`Log::close`]. With
//! Kafka's defaults (both unbounded) durability comes from replication, as in Kafka: a
//! record acknowledged with acks=all lives in the page cache of every in-sync replica,
//! and survives the loss of any of them but not a simultaneous power loss of all
//! (KIP-966). Set `flush.messages=1` for fsync-per-append.
//!
//! # Idempotent producers
//!
//! The log deduplicates retries of idempotent producers as Kafka's
//! `ProducerStateManager` does (KIP-98): for each producer id it keeps the epoch and the
//! sequence ranges and offsets of the last five batches. [`Log::append`] checks a batch
//! with a producer id under the write lock before writing anything: a retry of one of
//! those five batches appends nothing and returns the original offsets
//! ([`AppendInfo::duplicate`]); a gap or a too-old retry is refused with
//! OUT_OF_ORDER_SEQUENCE_NUMBER, an old epoch with INVALID_PRODUCER_EPOCH. Such a batch
//! must be the only one in its append (produce v3+ sends one batch per partition).
//! Producers idle for `producer.id.expiration.ms` are forgotten; an unknown producer
//! may start at any sequence (its state may have expired).
//!
//! The state is rebuilt from the log, never trusted from elsewhere: on every roll (and
//! on close) it is written to `{offset}.snapshot` (CRC-32C, temp file, fsync, rename),
//! and [`Log::open`] loads the newest valid snapshot at or below the log end, deleting
//! damaged ones and ones past the log end (a truncation removed the batches they
//! describe), then replays the batch headers after it. The state outlives retention
//! (KIP-360): retention keeps the newest snapshot at or below the log start.
//!
//! # Replication support
//!
//! What a replica needs of its log, with Kafka's semantics (the state machine that
//! decides when to use it is `strata-replica`):
//!
//! - The leader-epoch cache ([`epoch`], Kafka's `LeaderEpochFileCache`, KIP-101 and
//!   KIP-279): the first offset of every leader epoch, kept in
//!   `leader-epoch-checkpoint` (written atomically, before the batches it describes,
//!   and fsynced before the recovery point passes them: an assignment does not wait
//!   for the device, as in Kafka since KAFKA-15046, and recovery puts back an entry
//!   a power loss took from the file from the batches above the recovery point)
//!   and consistent with the batches: [`Log::append`] starts an entry when its epoch is
//!   new, [`Log::assign_epoch_start`] when a replica becomes leader, truncation drops
//!   the entries at and above the cut, a moved log start moves the first entry.
//!   [`Log::end_offset_for_epoch`] answers OffsetsForLeaderEpoch.
//! - [`Log::append_replicated`]: a follower's append (Kafka's `appendAsFollower`) of
//!   batches that keep the leader's offsets and epochs; they must continue the log
//!   exactly. Producer state is updated from them without sequence checks.
//! - [`Log::truncate_to`] (to a batch boundary, durable before it returns) and
//!   [`Log::truncate_fully_and_start_at`]: how a follower drops what the leader does
//!   not have. Producer state and the epoch cache follow the cut.
//!
//! # Recovery
//!
//! [`Log::open`] rescans, CRC-checking every batch, each segment at or above the
//! recovery point, and always the last segment. A torn or corrupt tail is truncated at
//! the last valid batch; later segments are removed (offsets must stay dense); missing
//! or damaged indexes are rebuilt. Zeros after the last valid batch up to the next 4 KiB
//! boundary, where the file ends, are the padding of direct writes: cut, not reported.
//! Segments
//! below the recovery point are trusted, but their indexes are sanity-checked when
//! first used and rebuilt if damaged. The leader-epoch checkpoint is clipped to the log
//! and checked against the epochs of the rescanned batches; if it is missing, damaged
//! or disagrees, the cache is rebuilt from the headers of every batch (which a log
//! whose batches carry no epoch, -1, pays on every open).

mod checkpoint;
mod clock;
mod config;
mod direct_read;
pub mod epoch;
mod error;
pub mod files;
pub mod index;
mod log;
pub mod priority;
pub mod producer;
pub mod read_cache;
mod sealed;
mod segment;
mod snapshot;
mod tail;
pub mod txn_index;
pub mod window;

pub use clock::{Clock, ManualClock, SystemClock};
pub use config::{CompactionConfig, DEFAULT_TAIL_CACHE_BYTES, IoMode, LogConfig, RetentionLimits};
pub use epoch::{EpochEntry, LeaderEpochCache};
pub use error::LogError;
pub use index::Indexes;
pub use log::cleaner::filter::{
    BuiltSegment, Filter, FilterStats, SegmentBuilder, TxnCleaner, group_segments, map_keys,
};
pub use log::cleaner::{CleanOutcome, Cleanable, OffsetMap, SLOT_BYTES};
pub use log::{
    AppendInfo, Log, ReadResult, RecoveryCheckpoint, RecoveryReport, RetentionOutcome, SealedSpan,
    SegmentInfo, SharedRecoveryPoint, Truncation,
};
pub use producer::{ProducerEntry, ProducerError, ProducerState, SequenceCheck};
pub use sealed::{RecutSegment, RemoteEndState, SealedSegment};
pub use tail::budget as tail_budget;
pub use window::{Window, WindowError, find_window};
