//! The per-batch checks behind dead letters: which batches of a segment frame, which of
//! them the converter would fail on, and the transaction markers of the good ones.

use strata_proto::BatchHeader;
use strata_proto::batch::{BatchError, RecordBatch};
use strata_proto::ids::Offset;

use crate::error::ConvertError;
use crate::source::{BatchReader, ByteSource, ReadError, SourceError};
use crate::txn::{TxnMarker, control_marker};

use super::SinkError;

/// One framed batch of a segment: its header and where its bytes are (from the start
/// of the range salvaged).
#[derive(Debug, Clone, Copy)]
pub(super) struct View {
    pub(super) header: BatchHeader,
    pub(super) start: u64,
    pub(super) end: u64,
}

impl View {
    pub(super) fn base_offset(&self) -> Offset {
        self.header.base_offset
    }

    pub(super) fn last_offset(&self) -> Offset {
        self.header.last_offset()
    }
}

/// The batches that frame, with their byte ranges, and the framing error that stopped
/// them, if one did. Keeps a header per batch, not the bytes.
pub(super) async fn frame(
    src: &dyn ByteSource,
) -> Result<(Vec<View>, Option<ConvertError>), SourceError> {
    let mut views = Vec::new();
    let mut reader = BatchReader::new(src, 0..src.len());
    while let Some(framed) = reader.next().await {
        let framed = match framed {
            Ok(f) => f,
            Err(ReadError::Convert(e)) => return Ok((views, Some(e))),
            Err(ReadError::Source(e)) => return Err(e),
        };
        match framed.batch() {
            Ok(b) => views.push(View {
                header: *b.header(),
                start: framed.start,
                end: framed.end,
            }),
            Err(e) => return Ok((views, Some(e))),
        }
    }
    Ok((views, None))
}

/// Marks (with the reason) each batch the converter would fail on, checked on its own;
/// from the first batch out of offset order on, every batch. Reads the batches of
/// `views` (contiguous, in order) once more.
pub(super) async fn check_batches(
    src: &dyn ByteSource,
    views: &[View],
    verify_crc: bool,
    bad: &mut [Option<String>],
) -> Result<(), SinkError> {
    let (Some(first), Some(last)) = (views.first(), views.last()) else {
        return Ok(());
    };
    let mut reader = BatchReader::new(src, first.start..last.end);
    let mut previous: Option<Offset> = None;
    for (i, v) in views.iter().enumerate() {
        let h = v.header;
        if let Some(p) = previous
            && h.base_offset <= p
        {
            let reason = ConvertError::OutOfOrder {
                base_offset: h.base_offset,
                previous_last_offset: p,
            }
            .to_string();
            for b in &mut bad[i..] {
                b.get_or_insert_with(|| reason.clone());
            }
            return Ok(());
        }
        previous = Some(h.last_offset());
        let framed = match reader.next().await {
            Some(Ok(f)) => f,
            Some(Err(e)) => return Err(e.into()),
            None => return Err(ConvertError::Empty.into()),
        };
        if let Err(e) = framed.batch().and_then(|b| check_batch(&b, verify_crc)) {
            bad[i] = Some(e.to_string());
        }
    }
    Ok(())
}

/// What the converter checks of one batch: its record count, CRC, control record, and
/// records (decompressed under the process-wide cap, each parsed, offsets in order).
fn check_batch(b: &RecordBatch<'_>, verify_crc: bool) -> Result<(), ConvertError> {
    let h = *b.header();
    let err = |source| ConvertError::Batch {
        base_offset: h.base_offset,
        source,
    };
    if h.last_offset_delta < 0 {
        return Err(err(BatchError::BadRecordCount {
            count: h.record_count,
            last_offset_delta: h.last_offset_delta,
        }));
    }
    if verify_crc {
        b.validate_crc().map_err(err)?;
    }
    if h.is_control() {
        return control_marker(b).map(|_| ());
    }
    let records = b.records().map_err(err)?;
    let mut last: Option<Offset> = None;
    for r in records.iter() {
        let r = r.map_err(err)?;
        if r.offset < h.base_offset
            || r.offset > h.last_offset()
            || last.is_some_and(|l| r.offset <= l)
        {
            return Err(err(BatchError::InvalidRecord(
                "record offsets out of order or outside the batch",
            )));
        }
        last = Some(r.offset);
    }
    Ok(())
}

/// Marks what `error`, from converting `views[from..to]`, puts at fault: the batch it
/// names, everything from a batch out of order on, or else all of `from..to`. Marks at
/// least one batch of `from..to`.
pub(super) fn mark_bad(
    error: &ConvertError,
    views: &[View],
    from: usize,
    to: usize,
    bad: &mut [Option<String>],
) {
    let reason = error.to_string();
    let named = error
        .batch_offset()
        .and_then(|o| (from..to).find(|&i| views[i].base_offset() == o));
    let out_of_order = matches!(error, ConvertError::OutOfOrder { .. })
        .then(|| (from + 1..to).find(|&i| views[i].base_offset() <= views[i - 1].last_offset()))
        .flatten();
    let marked = match (named, out_of_order) {
        (Some(i), _) => i..i + 1,
        (None, Some(i)) => i..views.len(),
        (None, None) => from..to,
    };
    for b in &mut bad[marked] {
        b.get_or_insert_with(|| reason.clone());
    }
}

/// The transaction markers of the good control batches among `views` (read again, one
/// by one: control batches are small).
pub(super) async fn good_markers(
    src: &dyn ByteSource,
    views: &[View],
    bad: &[Option<String>],
) -> Result<Vec<TxnMarker>, SourceError> {
    let mut out = Vec::new();
    for (v, _) in views
        .iter()
        .zip(bad)
        .filter(|(v, b)| b.is_none() && v.header.is_control())
    {
        let bytes = src.read_at(v.start, (v.end - v.start) as usize).await?;
        let Ok((b, _)) = RecordBatch::parse(&bytes) else {
            continue;
        };
        if let Ok(Some(kind)) = control_marker(&b) {
            out.push(TxnMarker {
                producer_id: v.header.producer_id,
                offset: v.header.base_offset,
                kind,
            });
        }
    }
    Ok(out)
}
