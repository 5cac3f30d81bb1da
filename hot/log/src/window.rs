//! The batch-window walk of a read, over bytes of a segment: from a batch boundary at or
//! before the wanted offset (an offset-index position), find the batch holding the
//! offset and the whole batches after it that fit the read. Pure: the caller reads the
//! bytes (from a local segment file, [`crate::Log::read`], or from object storage, the
//! remote tier) and acts on the answer, so both reads return the same bytes for the same
//! segment.

use strata_proto::Offset;
use strata_proto::batch::{self, BatchError, HEADER_LEN};

/// Where a read's window lies in bytes that start at a batch boundary: see
/// [`find_window`].
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Window {
    /// The window is `data[start..end]`: the batch holding the offset, then whole
    /// batches while the window stays within `max_bytes` and none ends past
    /// `max_offset`. `next_offset` is the offset after its last batch.
    Found {
        start: usize,
        end: usize,
        next_offset: Offset,
    },
    /// No batch that starts in the bytes holds the offset: the walk goes on at
    /// `data[skip..]`, a batch boundary (past the end of the bytes when the last batch
    /// walked over ends there).
    NotFound { skip: usize },
    /// The batch holding the offset starts at `data[start]` and is `len` bytes long,
    /// more than the bytes hold from there: the window is that batch alone (KIP-74: the
    /// first batch whole, even past `max_bytes`), `len` bytes read at `start`, ending
    /// at `next_offset`.
    Incomplete {
        start: usize,
        len: usize,
        next_offset: Offset,
    },
    /// The batch holding the offset ends past `max_offset`: the window is empty.
    PastMaxOffset,
}

/// A batch header that does not parse, `at` bytes into the data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WindowError {
    pub at: usize,
    pub error: BatchError,
}

/// The window of a read of `offset` with `max_bytes` and `max_offset` (the read returns
/// no batch that ends past it) in `data`, bytes of a segment starting at a batch
/// boundary at or before the batch holding `offset`: walks batch headers to the first
/// batch that ends after `offset`, then takes whole batches after it within
/// `max_bytes` (counted from the first's start; the first is always taken whole, as
/// Kafka does since KIP-74). The caller continues on [`Window::NotFound`] and reads the
/// first batch whole on [`Window::Incomplete`].
pub fn find_window(
    data: &[u8],
    offset: Offset,
    max_bytes: usize,
    max_offset: Option<Offset>,
) -> Result<Window, WindowError> {
    let header =
        |at: usize| batch::parse_header(&data[at..]).map_err(|error| WindowError { at, error });
    // Find the batch containing `offset`.
    let mut start = 0usize;
    let first = loop {
        if start + HEADER_LEN > data.len() {
            return Ok(Window::NotFound { skip: start });
        }
        let h = header(start)?;
        if h.next_offset() > offset {
            break h;
        }
        start += h.total_size();
    };
    if max_offset.is_some_and(|m| first.next_offset() > m) {
        return Ok(Window::PastMaxOffset);
    }
    let first_size = first.total_size();
    if start + first_size > data.len() {
        return Ok(Window::Incomplete {
            start,
            len: first_size,
            next_offset: first.next_offset(),
        });
    }
    // Whole batches from `start`, within max_bytes (after the first), none past
    // max_offset.
    let mut end = start + first_size;
    let mut next_offset = first.next_offset();
    while data.len() - end >= HEADER_LEN {
        let h = header(end)?;
        let size = h.total_size();
        if end + size > data.len()
            || end + size - start > max_bytes
            || max_offset.is_some_and(|m| h.next_offset() > m)
        {
            break;
        }
        end += size;
        next_offset = h.next_offset();
    }
    Ok(Window::Found {
        start,
        end,
        next_offset,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use strata_proto::Compression;
    use strata_proto::batch::build::{NewRecord, batch};

    use super::*;

    /// Batches of (records, value bytes) at offsets from 0; returns their bytes back to
    /// back and each batch's (start, len, next offset).
    fn batches(counts: &[(usize, usize)]) -> (Vec<u8>, Vec<(usize, usize, Offset)>) {
        let mut data = Vec::new();
        let mut spans = Vec::new();
        let mut next = 0i64;
        for &(records, value_len) in counts {
            let recs: Vec<NewRecord> = (0..records)
                .map(|_| NewRecord::value(vec![7u8; value_len], 1000))
                .collect();
            let mut b = batch(&recs, Compression::None, None).to_vec();
            batch::set_base_offset(&mut b, next);
            next += records as i64;
            spans.push((data.len(), b.len(), next));
            data.extend_from_slice(&b);
        }
        (data, spans)
    }

    #[test]
    fn finds_the_batch_holding_the_offset_and_the_whole_batches_within_max_bytes() {
        let (data, s) = batches(&[(2, 100), (3, 100), (1, 100), (4, 100)]);
        // Offset 3 is in the second batch; max_bytes takes it and the third.
        let max = s[1].1 + s[2].1;
        assert_eq!(
            find_window(&data, 3, max, None).unwrap(),
            Window::Found {
                start: s[1].0,
                end: s[2].0 + s[2].1,
                next_offset: s[2].2,
            }
        );
        // max_bytes below the first batch: the first alone, whole.
        assert_eq!(
            find_window(&data, 0, 1, None).unwrap(),
            Window::Found {
                start: 0,
                end: s[0].1,
                next_offset: s[0].2,
            }
        );
        // max_offset stops the window, and refuses a first batch ending past it.
        assert_eq!(
            find_window(&data, 0, usize::MAX, Some(s[1].2)).unwrap(),
            Window::Found {
                start: 0,
                end: s[1].0 + s[1].1,
                next_offset: s[1].2,
            }
        );
        assert_eq!(
            find_window(&data, 2, usize::MAX, Some(3)).unwrap(),
            Window::PastMaxOffset
        );
        // A partial batch at the end of the bytes is left out.
        let cut = &data[..s[3].0 + 70];
        assert_eq!(
            find_window(cut, 3, usize::MAX, None).unwrap(),
            Window::Found {
                start: s[1].0,
                end: s[2].0 + s[2].1,
                next_offset: s[2].2,
            }
        );
    }

    #[test]
    fn asks_for_more_bytes_when_the_walk_or_the_first_batch_runs_past_them() {
        let (data, s) = batches(&[(2, 100), (3, 2000), (1, 100)]);
        // The first batch holding offset 3 starts in the bytes but does not fit.
        assert_eq!(
            find_window(&data[..s[1].0 + 100], 3, 10, None).unwrap(),
            Window::Incomplete {
                start: s[1].0,
                len: s[1].1,
                next_offset: s[1].2,
            }
        );
        // The walk passed every batch starting in the bytes: go on where the next
        // starts, even past the end of the bytes.
        assert_eq!(
            find_window(&data[..s[1].0 + 10], 5, 10, None).unwrap(),
            Window::NotFound { skip: s[1].0 }
        );
        assert_eq!(
            find_window(&data[..s[1].0 + 100], 5, 10, None).unwrap(),
            Window::NotFound { skip: s[2].0 }
        );
        assert_eq!(
            find_window(&[], 0, 10, None).unwrap(),
            Window::NotFound { skip: 0 }
        );
    }

    #[test]
    fn a_header_that_does_not_parse_is_an_error_at_its_position() {
        let (mut data, s) = batches(&[(2, 100), (3, 100)]);
        // Magic byte of the second batch.
        data[s[1].0 + 16] = 9;
        let e = find_window(&data, 3, usize::MAX, None).unwrap_err();
        assert_eq!(e.at, s[1].0);
        let e = find_window(&data, 0, usize::MAX, None).unwrap_err();
        assert_eq!(e.at, s[1].0);
    }
}
