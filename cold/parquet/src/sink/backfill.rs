//! Backfill: converting segments that lie below where a partition's files start,
//! continuing the manifest's backfill cursor.

use std::ops::Range;

use strata_proto::ids::{Offset, PartitionId};

use crate::source::{ByteSource, SliceSource};
use crate::stream;
use crate::txn::TxnMarker;

use super::{BackfillCursor, ParquetSink, SinkError, WrittenFile};

impl ParquetSink {
    /// Backfill: converts a segment that lies below where the partition's files start
    /// (offloaded before parquet.enable was set), continuing the backfill's cursor. Only
    /// the batches below the files' start are converted; a segment wholly behind the
    /// cursor is skipped (a retry). When the cursor reaches the start, the manifest's
    /// start moves down to where the backfill began. Returns the file written, if any,
    /// and whether the backfill is complete.
    pub async fn write_backfill(
        &self,
        topic: &str,
        partition: PartitionId,
        batches: &[u8],
    ) -> Result<(Option<WrittenFile>, bool), SinkError> {
        let src = SliceSource(batches);
        self.backfill(topic, partition, &src, 0..src.len(), None)
            .await
    }

    pub(super) async fn backfill(
        &self,
        topic: &str,
        partition: PartitionId,
        src: &dyn ByteSource,
        range: Range<u64>,
        later_markers: Option<&[TxnMarker]>,
    ) -> Result<(Option<WrittenFile>, bool), SinkError> {
        let manifest_key = self.layout.manifest_key(topic, partition);
        let (mut manifest, version) = self.load(topic, partition).await?;
        let Some(start) = manifest.covered_start() else {
            return Err(SinkError::BadManifest {
                key: manifest_key,
                reason: "a backfill needs converted files to fill in below".into(),
            });
        };
        // Only whole batches below the start (the first pass stops there).
        let scan = stream::scan(src, range.clone(), self.options.verify_crc, Some(start)).await?;
        if let Some(got) = scan.straddle {
            return Err(SinkError::NotContiguous {
                expected: start,
                got,
            });
        }
        let Some((first, last)) = scan.offsets else {
            return Ok((None, manifest.backfill.is_none()));
        };
        let below = range.start..range.start + scan.end;
        let from = match manifest.backfill {
            Some(c) if last < c.next => return Ok((None, false)),
            Some(c) if first != c.next => {
                return Err(SinkError::NotContiguous {
                    expected: c.next,
                    got: first,
                });
            }
            Some(c) => c.from,
            None => first,
        };
        let written = self
            .put_file(topic, partition, src, below, scan, later_markers)
            .await?;
        if let Some(w) = &written {
            let at = manifest
                .files
                .partition_point(|f| f.first_offset < w.first_offset);
            manifest
                .files
                .insert(at, w.entry(self.schema_fingerprint()));
        }
        let done = last + 1 >= start;
        if done {
            manifest.start_offset = Some(from);
            manifest.backfill = None;
        } else {
            manifest.backfill = Some(BackfillCursor {
                from,
                next: last + 1,
            });
        }
        self.commit(&manifest_key, &manifest, version).await?;
        Ok((written, done))
    }

    /// Restarts a backfill's cursor at `offset`: the records below it expired before the
    /// backfill reached them, so no file can hold them.
    pub async fn restart_backfill(
        &self,
        topic: &str,
        partition: PartitionId,
        offset: Offset,
    ) -> Result<(), SinkError> {
        let manifest_key = self.layout.manifest_key(topic, partition);
        let (mut manifest, version) = self.load(topic, partition).await?;
        if manifest.backfill.is_some_and(|c| c.next >= offset) {
            return Ok(());
        }
        if manifest.covered_start().is_some_and(|s| offset >= s) {
            manifest.backfill = None;
            manifest.start_offset = Some(offset);
        } else {
            manifest.backfill = Some(BackfillCursor {
                from: offset,
                next: offset,
            });
        }
        self.commit(&manifest_key, &manifest, version).await
    }
}
