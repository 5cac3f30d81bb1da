//! Converting a segment and writing its file: the two passes over the input, the upload
//! under the file's deterministic key, then the manifest update.

use std::ops::Range;

use strata_proto::ids::{Offset, PartitionId};

use crate::error::ConvertError;
use crate::schema::writer_properties;
use crate::source::{ByteSource, SliceSource};
use crate::stream::{self, Scan};
use crate::txn::TxnMarker;

use super::{DeadLetterFile, ManifestEntry, ParquetSink, SinkError};

/// A file [`ParquetSink::write_segment`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WrittenFile {
    pub key: String,
    pub first_offset: Offset,
    pub last_offset: Offset,
    pub min_timestamp: i64,
    pub max_timestamp: i64,
    pub rows: u64,
    pub bytes: u64,
    /// Values that did not fit the JSON value schema, kept whole in `_raw`.
    pub raw_fallbacks: u64,
    /// Those rows again, in dead-letter files (raw value and reason).
    pub dead_letter_files: Vec<DeadLetterFile>,
}

impl WrittenFile {
    pub(super) fn entry(&self, schema: u64) -> ManifestEntry {
        ManifestEntry {
            key: self.key.clone(),
            first_offset: self.first_offset,
            last_offset: self.last_offset,
            min_timestamp: self.min_timestamp,
            max_timestamp: self.max_timestamp,
            rows: self.rows,
            bytes: self.bytes,
            compacted_from: 0,
            schema: Some(schema),
            dead_letter_files: self.dead_letter_files.clone(),
        }
    }
}

impl ParquetSink {
    /// Converts a sealed segment (its raw v2 batches) and writes it, at most once per
    /// offset range. Returns the file, or `None` when nothing was written: the segment was
    /// already done (skipped), or it has no data rows (its range still counts as done).
    ///
    /// A transaction still open at the segment's end fails with the retryable
    /// [`ConvertError::PendingTransaction`] under the default [`crate::PendingTxnPolicy`];
    /// [`write_segment_with_markers`](Self::write_segment_with_markers) passes the markers
    /// of the following segments.
    pub async fn write_segment(
        &self,
        topic: &str,
        partition: PartitionId,
        batches: &[u8],
    ) -> Result<Option<WrittenFile>, SinkError> {
        let src = SliceSource(batches);
        self.write(topic, partition, &src, 0..src.len(), None).await
    }

    /// [`write_segment`](Self::write_segment) from a [`ByteSource`], read a few MiB at
    /// a time: the streaming form the archiver uses (see [`crate::stream`]).
    pub async fn write_source(
        &self,
        topic: &str,
        partition: PartitionId,
        src: &dyn ByteSource,
    ) -> Result<Option<WrittenFile>, SinkError> {
        self.write(topic, partition, src, 0..src.len(), None).await
    }

    /// [`write_segment`](Self::write_segment) with the transaction markers that follow the
    /// segment (from [`crate::scan_markers`] over the next segments), which settle the
    /// transactions open at its end. They replace the options' `later_markers`.
    pub async fn write_segment_with_markers(
        &self,
        topic: &str,
        partition: PartitionId,
        batches: &[u8],
        later_markers: &[TxnMarker],
    ) -> Result<Option<WrittenFile>, SinkError> {
        let src = SliceSource(batches);
        self.write(topic, partition, &src, 0..src.len(), Some(later_markers))
            .await
    }

    pub(super) async fn write(
        &self,
        topic: &str,
        partition: PartitionId,
        src: &dyn ByteSource,
        range: Range<u64>,
        later_markers: Option<&[TxnMarker]>,
    ) -> Result<Option<WrittenFile>, SinkError> {
        // The first pass: framing, checks and fates, without writing (see `stream`).
        let scan = stream::scan(src, range.clone(), self.options.verify_crc, None).await?;
        let (first, last) = scan.offsets.ok_or(ConvertError::Empty)?;
        let manifest_key = self.layout.manifest_key(topic, partition);
        let (mut manifest, version) = self.load(topic, partition).await?;
        if let Some(end) = manifest.next_offset {
            if last < end {
                tracing::debug!(
                    topic,
                    partition,
                    first,
                    last,
                    "Parquet: segment already written, skipped"
                );
                return Ok(None);
            }
            if first != end {
                return Err(SinkError::NotContiguous {
                    expected: end,
                    got: first,
                });
            }
        }

        let written = self
            .put_file(topic, partition, src, range, scan, later_markers)
            .await?;

        if let Some(w) = &written {
            manifest.files.push(w.entry(self.schema_fingerprint()));
        }
        if manifest.next_offset.is_none() {
            manifest.start_offset = Some(first);
        }
        manifest.next_offset = Some(last + 1);
        self.commit(&manifest_key, &manifest, version).await?;
        Ok(written)
    }

    /// The second pass over `range` (which `scan` went through): converts it and
    /// uploads the file under its deterministic key as it is written; `None` when the
    /// batches hold no data rows. Errors of the first pass other than framing come out
    /// here, after the caller's manifest checks, as they did from the in-memory
    /// conversion.
    pub(super) async fn put_file(
        &self,
        topic: &str,
        partition: PartitionId,
        src: &dyn ByteSource,
        range: Range<u64>,
        mut scan: Scan,
        later_markers: Option<&[TxnMarker]>,
    ) -> Result<Option<WrittenFile>, SinkError> {
        let mut opts = self.options.clone();
        opts.topic = topic.to_string();
        opts.partition = partition;
        if let Some(markers) = later_markers {
            opts.later_markers = markers.to_vec();
        }
        let props = writer_properties(&opts)?;
        if let Some(e) = scan.problem.take() {
            return Err(e.into());
        }
        let Some((first, last)) = scan.offsets else {
            return Err(ConvertError::Empty.into());
        };
        // The key is a function of the segment's bytes (the first row's date, the
        // offsets), so a retry after a crash before the manifest update overwrites the
        // same object.
        let key = |first_ts: i64| {
            self.layout
                .file_key(topic, partition, first_ts, first, last)
        };
        let dead_letters = self.layout.dead_letters();
        let dead_letter_key = |first_ts: i64, first: Offset, last: Offset| {
            dead_letters.file_key(topic, partition, first_ts, first, last)
        };
        let streamed = stream::convert_and_upload(
            src,
            range,
            scan,
            &opts,
            props,
            self.store.as_ref(),
            self.part_size(),
            &key,
            &dead_letter_key,
        )
        .await?;
        Ok(streamed.and_then(|f| {
            let s = f.summary;
            let (min_timestamp, max_timestamp) = (s.min_timestamp?, s.max_timestamp?);
            Some(WrittenFile {
                key: f.key,
                first_offset: s.first_offset,
                last_offset: s.last_offset,
                min_timestamp,
                max_timestamp,
                rows: s.rows,
                bytes: f.bytes,
                raw_fallbacks: s.raw_fallbacks,
                dead_letter_files: f.dead_letter_files,
            })
        }))
    }
}
