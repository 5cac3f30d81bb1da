//! One copy in the bucket (topic config `remote.storage.format=parquet`, issue 20 part
//! 5): the sealed log lives in the bucket only as the partition's Parquet files, and a
//! Kafka fetch below the local log start is answered by re-encoding record batches from
//! them ([`strata_parquet::reencode_from`]), read through the chunk cache like a
//! segment.
//!
//! [`ParquetReads`] keeps the partition's file list (the Parquet manifest: the archiver
//! hands it every version it writes or reads, and a read that misses a file loads it
//! again, so a reader never waits on the archiver) and the footers of the files read
//! lately (each parsed once, with its page indexes, so a read decodes only the pages
//! holding the offsets it wants).
//!
//! What a re-encoded batch does not keep, and why a consumer cannot tell, is in
//! `strata_parquet::reencode`: the producer's batch boundaries and codec (a consumer
//! reads records, not batches), the producer epoch, the timestamp type, and control and
//! aborted records (their offsets are gaps, as after compaction).

use std::collections::HashMap;
use std::io::Read;
use std::sync::{Arc, Mutex, RwLock};

use bytes::Bytes;
use parquet::arrow::arrow_reader::ArrowReaderMetadata;
use parquet::file::reader::{ChunkReader, Length};
use strata_cache::{ChunkCache, ReaderId};
use strata_parquet::{Manifest, ManifestEntry, ParquetLayout, ReencodeOptions};
use strata_proto::Offset;
use strata_store::BlobStore;

use crate::error::TierError;

/// File footers kept in memory per partition.
const FOOTER_CACHE_ENTRIES: usize = 16;
/// The largest re-encoded batch.
const MAX_BATCH_BYTES: usize = 1 << 20;
/// Bytes a `get_read` stream fetches at a time (page headers without an offset index).
const STREAM_STEP: u64 = 256 << 10;

/// A partition's Parquet files as a fetch reads them.
#[derive(Debug)]
pub struct ParquetReads {
    store: Arc<dyn BlobStore>,
    cache: Arc<ChunkCache>,
    layout: ParquetLayout,
    topic: String,
    partition: i32,
    files: RwLock<Arc<Files>>,
    footers: Mutex<HashMap<String, ArrowReaderMetadata>>,
}

/// What the manifest says about the files, as last read.
#[derive(Debug, Default)]
struct Files {
    entries: Vec<ManifestEntry>,
    /// Where the files start covering the log contiguously (`None`: nothing yet).
    start: Option<Offset>,
    /// The first offset not in a file (`None`: nothing yet).
    next: Option<Offset>,
}

impl ParquetReads {
    pub fn new(
        store: Arc<dyn BlobStore>,
        cache: Arc<ChunkCache>,
        cluster_id: &str,
        topic: &str,
        partition: i32,
    ) -> ParquetReads {
        ParquetReads {
            store,
            cache,
            layout: ParquetLayout::new(cluster_id),
            topic: topic.to_string(),
            partition,
            files: RwLock::new(Arc::new(Files::default())),
            footers: Mutex::new(HashMap::new()),
        }
    }

    fn files(&self) -> Arc<Files> {
        self.files.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Takes a version of the manifest (the archiver's, after it wrote or read one).
    pub fn set_manifest(&self, m: &Manifest) {
        let files = Files {
            entries: m.files.clone(),
            start: m.covered_start(),
            next: m.next_offset,
        };
        *self.files.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(files);
    }

    /// Reads the manifest from the store again.
    pub async fn reload(&self) -> Result<(), TierError> {
        let m = strata_parquet::read_manifest(
            self.store.as_ref(),
            &self.layout,
            &self.topic,
            self.partition,
        )
        .await
        .map_err(|e| TierError::Corrupt {
            key: self.layout.manifest_key(&self.topic, self.partition),
            reason: e.to_string(),
        })?;
        self.set_manifest(&m);
        Ok(())
    }

    /// The first offset the files hold (`None` when there are none).
    pub fn start(&self) -> Option<Offset> {
        let f = self.files();
        f.start.filter(|s| f.next.is_some_and(|n| *s < n))
    }

    /// The first offset not in a file (`None` when nothing was converted).
    pub fn end(&self) -> Option<Offset> {
        self.files().next
    }

    /// The largest record timestamp in the files (-1 when none).
    pub fn max_timestamp(&self) -> i64 {
        self.files()
            .entries
            .iter()
            .map(|f| f.max_timestamp)
            .max()
            .unwrap_or(-1)
    }

    /// How many files lie wholly below `offset`.
    pub fn files_below(&self, offset: Offset) -> usize {
        self.files()
            .entries
            .iter()
            .filter(|f| f.last_offset < offset)
            .count()
    }

    /// The files' bytes.
    pub fn bytes(&self) -> u64 {
        self.files().entries.iter().map(|f| f.bytes).sum()
    }

    /// Remote retention over the files (retention.ms by each file's newest record,
    /// retention.bytes by the files' bytes plus `local_bytes_beyond`, the local bytes
    /// not in a file yet), as for raw segments: the offset the log start moves to, past
    /// the last file that goes, if any does. The files are smaller than the segments
    /// they came from (Parquet compresses by column), so a retention.bytes keeps more
    /// records than it would of raw segments.
    pub fn retention_bound(
        &self,
        now_ms: i64,
        retention_ms: Option<i64>,
        retention_bytes: Option<u64>,
        local_bytes_beyond: u64,
    ) -> Option<Offset> {
        let files = self.files();
        let mut total = files.entries.iter().map(|f| f.bytes).sum::<u64>() + local_bytes_beyond;
        let mut bound = None;
        for f in &files.entries {
            let by_time = retention_ms.is_some_and(|ms| now_ms - f.max_timestamp > ms);
            let by_size = retention_bytes.is_some_and(|b| total.saturating_sub(f.bytes) >= b);
            if !(by_time || by_size) {
                break;
            }
            total -= f.bytes;
            bound = Some(f.last_offset + 1);
        }
        bound
    }

    /// Record batches of the rows at or after `offset` and below `below` (the local
    /// start: what is above is read from disk), up to about `max_bytes` (at least one
    /// batch), from the first file holding such a row. `None` when no file does (the
    /// offsets up to `below` are gaps: aborted transactions, markers, dead letters).
    pub async fn read(
        &self,
        offset: Offset,
        max_bytes: usize,
        below: Offset,
        reader: ReaderId,
    ) -> Result<Option<Bytes>, TierError> {
        let mut reloaded = false;
        let mut at = offset;
        loop {
            let files = self.files();
            // A list that ends below what is asked for is older than the files: the
            // archiver converted more since (or this broker just became leader).
            if !reloaded && files.next.is_none_or(|n| n <= at) && at < below {
                self.reload().await?;
                reloaded = true;
                continue;
            }
            let Some(entry) = files
                .entries
                .iter()
                .find(|f| f.last_offset >= at && f.first_offset < below)
                .cloned()
            else {
                return Ok(None);
            };
            match self
                .read_file(&entry, at.max(entry.first_offset), max_bytes, reader)
                .await
            {
                Ok(Some(data)) => return Ok(Some(data)),
                // Nothing at or after `at` in this file (it ends in a gap): the next.
                Ok(None) => at = entry.last_offset + 1,
                // Gone: small-file compaction or retention replaced it since the list
                // was read.
                Err(e) if !reloaded => {
                    tracing::debug!(topic = %self.topic, partition = self.partition, key = %entry.key, error = %e, "parquet read failed; reading the manifest again");
                    self.reload().await?;
                    reloaded = true;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// One file's records from `from`, or `None` if it has no row at or after it.
    async fn read_file(
        &self,
        entry: &ManifestEntry,
        from: Offset,
        max_bytes: usize,
        reader: ReaderId,
    ) -> Result<Option<Bytes>, TierError> {
        let file = self.open(entry, reader);
        let meta = self.footer(&file).await?;
        let key = entry.key.clone();
        let out = tokio::task::spawn_blocking(move || {
            // Batches of at most the fetch's limit, so that a full answer stays within
            // it (only a first batch may be larger, KIP-74).
            let options = ReencodeOptions {
                max_batch_bytes: max_bytes.clamp(1, MAX_BATCH_BYTES),
                ..ReencodeOptions::default()
            };
            strata_parquet::reencode_from(file, &meta, from, max_bytes.max(1), &options)
        })
        .await
        .map_err(|e| TierError::Corrupt {
            key: key.clone(),
            reason: format!("the re-encoding task failed: {e}"),
        })?
        .map_err(|e| corrupt(&key, e))?;
        metrics::counter!("strata_tier_parquet_reencoded_bytes_total")
            .increment(out.batches.len() as u64);
        Ok((out.records > 0).then_some(out.batches))
    }

    /// The first record at or after `timestamp` in the files below `below`: its offset
    /// and timestamp.
    pub async fn offset_for_timestamp(
        &self,
        timestamp: i64,
        below: Offset,
        reader: ReaderId,
    ) -> Result<Option<(Offset, i64)>, TierError> {
        let files = self.files();
        for entry in files
            .entries
            .iter()
            .filter(|f| f.max_timestamp >= timestamp && f.first_offset < below)
        {
            let file = self.open(entry, reader);
            let meta = self.footer(&file).await?;
            let key = entry.key.clone();
            let found = tokio::task::spawn_blocking(move || {
                strata_parquet::first_at_or_after(file, &meta, timestamp)
            })
            .await
            .map_err(|e| TierError::Corrupt {
                key: key.clone(),
                reason: format!("the lookup task failed: {e}"),
            })?
            .map_err(|e| corrupt(&key, e))?;
            if let Some((o, ts)) = found
                && o < below
            {
                return Ok(Some((o, ts)));
            }
        }
        Ok(None)
    }

    fn open(&self, entry: &ManifestEntry, reader: ReaderId) -> CachedFile {
        CachedFile {
            cache: self.cache.clone(),
            key: entry.key.as_str().into(),
            size: entry.bytes,
            reader,
            rt: tokio::runtime::Handle::current(),
        }
    }

    /// The file's footer and page indexes, parsed once and kept.
    async fn footer(&self, file: &CachedFile) -> Result<ArrowReaderMetadata, TierError> {
        if let Some(m) = self
            .footers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&*file.key)
        {
            return Ok(m.clone());
        }
        let f = file.clone();
        let meta = tokio::task::spawn_blocking(move || strata_parquet::reader_metadata(&f))
            .await
            .map_err(|e| TierError::Corrupt {
                key: file.key.to_string(),
                reason: format!("the footer task failed: {e}"),
            })?
            .map_err(|e| corrupt(&file.key, e))?;
        let mut g = self.footers.lock().unwrap_or_else(|e| e.into_inner());
        if g.len() >= FOOTER_CACHE_ENTRIES
            && let Some(k) = g.keys().next().cloned()
        {
            g.remove(&k);
        }
        g.insert(file.key.to_string(), meta.clone());
        Ok(meta)
    }
}

fn corrupt(key: &str, e: strata_parquet::ConvertError) -> TierError {
    TierError::Corrupt {
        key: key.to_string(),
        reason: e.to_string(),
    }
}

/// A Parquet object read through the chunk cache, for the Parquet reader on a blocking
/// thread: each read waits on the runtime for the cache (memory, disk, else a ranged
/// GET, with read-ahead of the next chunks for this reader).
#[derive(Clone)]
struct CachedFile {
    cache: Arc<ChunkCache>,
    key: Arc<str>,
    size: u64,
    reader: ReaderId,
    rt: tokio::runtime::Handle,
}

impl CachedFile {
    fn bytes(&self, start: u64, end: u64) -> parquet::errors::Result<Bytes> {
        let end = end.min(self.size);
        if start > end {
            return Err(parquet::errors::ParquetError::EOF(format!(
                "{}: byte {start} is past the end ({})",
                self.key, self.size
            )));
        }
        self.rt
            .block_on(
                self.cache
                    .read(&self.key, self.size, start..end, self.reader),
            )
            .map_err(|e| parquet::errors::ParquetError::External(Box::new(e)))
    }
}

impl Length for CachedFile {
    fn len(&self) -> u64 {
        self.size
    }
}

impl ChunkReader for CachedFile {
    type T = Stream;

    fn get_read(&self, start: u64) -> parquet::errors::Result<Stream> {
        Ok(Stream {
            file: self.clone(),
            at: start,
            buf: Bytes::new(),
        })
    }

    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<Bytes> {
        let data = self.bytes(start, start.saturating_add(length as u64))?;
        if data.len() != length {
            return Err(parquet::errors::ParquetError::EOF(format!(
                "{}: {length} bytes at {start} run past the end ({})",
                self.key, self.size
            )));
        }
        Ok(data)
    }
}

/// A [`Read`] from a byte of a [`CachedFile`] on, fetching [`STREAM_STEP`] at a time.
struct Stream {
    file: CachedFile,
    at: u64,
    buf: Bytes,
}

impl Read for Stream {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        if self.buf.is_empty() {
            if self.at >= self.file.size {
                return Ok(0);
            }
            let want = STREAM_STEP.max(out.len() as u64);
            self.buf = self
                .file
                .bytes(self.at, self.at.saturating_add(want))
                .map_err(std::io::Error::other)?;
            self.at += self.buf.len() as u64;
        }
        let n = out.len().min(self.buf.len());
        out[..n].copy_from_slice(&self.buf[..n]);
        bytes::Buf::advance(&mut self.buf, n);
        Ok(n)
    }
}
