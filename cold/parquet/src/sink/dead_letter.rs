//! Dead letters: setting aside the batches that can never be converted, writing the good
//! ones around them (see the `sink` module's "Dead letters").

use std::ops::Range;

use strata_proto::ids::{Offset, PartitionId};

use crate::error::ConvertError;
use crate::source::{ByteSource, SliceSource};
use crate::txn::TxnMarker;

use super::check::{check_batches, frame, good_markers, mark_bad};
use super::{BackfillCursor, DeadLetter, ParquetSink, SinkError, WrittenFile};

/// What [`ParquetSink::write_segment_or_dead_letter`] (or its backfill twin) did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SegmentOutcome {
    /// The files written, in offset order.
    pub files: Vec<WrittenFile>,
    /// The dead letters this call recorded, in offset order (one a retry finds recorded
    /// already is not reported again).
    pub dead_letters: Vec<DeadLetter>,
}

/// Where a salvaged segment's files and dead letters go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    /// Continuing `next_offset`.
    Log,
    /// Continuing the backfill's cursor below the files' start.
    Backfill,
}

impl ParquetSink {
    /// [`write_segment`](Self::write_segment), but a segment whose batches are bad data
    /// ([`ConvertError::is_bad_data`]) does not fail: its good batches are written as
    /// files and the bad ones recorded as dead letters (see the sink module's "Dead letters").
    /// `range` is the offsets the bytes stand for (from the first batch's base to the
    /// segment's next offset): batches that do not frame are set aside up to its end.
    /// Other errors (the store, a conflict, a gap, the options, a pending transaction)
    /// are returned as by `write_segment`, nothing set aside.
    pub async fn write_segment_or_dead_letter(
        &self,
        topic: &str,
        partition: PartitionId,
        batches: &[u8],
        range: Range<Offset>,
    ) -> Result<SegmentOutcome, SinkError> {
        self.write_source_or_dead_letter(topic, partition, &SliceSource(batches), range)
            .await
    }

    /// [`write_segment_or_dead_letter`](Self::write_segment_or_dead_letter) from a
    /// [`ByteSource`].
    pub async fn write_source_or_dead_letter(
        &self,
        topic: &str,
        partition: PartitionId,
        src: &dyn ByteSource,
        range: Range<Offset>,
    ) -> Result<SegmentOutcome, SinkError> {
        let (out, _) = self
            .convert_or_salvage(Target::Log, topic, partition, src, range)
            .await?;
        Ok(out)
    }

    /// [`write_backfill`](Self::write_backfill) that sets bad batches aside as
    /// [`write_segment_or_dead_letter`](Self::write_segment_or_dead_letter) does; the
    /// dead letters continue the backfill's cursor. Returns what it wrote and recorded,
    /// and whether the backfill is complete.
    pub async fn write_backfill_or_dead_letter(
        &self,
        topic: &str,
        partition: PartitionId,
        batches: &[u8],
        range: Range<Offset>,
    ) -> Result<(SegmentOutcome, bool), SinkError> {
        self.write_backfill_source_or_dead_letter(topic, partition, &SliceSource(batches), range)
            .await
    }

    /// [`write_backfill_or_dead_letter`](Self::write_backfill_or_dead_letter) from a
    /// [`ByteSource`].
    pub async fn write_backfill_source_or_dead_letter(
        &self,
        topic: &str,
        partition: PartitionId,
        src: &dyn ByteSource,
        range: Range<Offset>,
    ) -> Result<(SegmentOutcome, bool), SinkError> {
        self.convert_or_salvage(Target::Backfill, topic, partition, src, range)
            .await
    }

    /// Converts all of `src` to `target` ([`Self::write`] or [`Self::backfill`]); when
    /// that fails on bad data, salvages it ([`Self::salvage`]). Returns what it wrote and
    /// recorded, and whether a backfill is complete (always `true` for the log).
    async fn convert_or_salvage(
        &self,
        target: Target,
        topic: &str,
        partition: PartitionId,
        src: &dyn ByteSource,
        range: Range<Offset>,
    ) -> Result<(SegmentOutcome, bool), SinkError> {
        let converted = match target {
            Target::Log => self
                .write(topic, partition, src, 0..src.len(), None)
                .await
                .map(|file| (file, true)),
            Target::Backfill => {
                self.backfill(topic, partition, src, 0..src.len(), None)
                    .await
            }
        };
        match converted {
            Ok((file, done)) => Ok((
                SegmentOutcome {
                    files: file.into_iter().collect(),
                    dead_letters: Vec::new(),
                },
                done,
            )),
            Err(SinkError::Convert(e)) if e.is_bad_data() => {
                self.salvage(target, topic, partition, src, range, &e).await
            }
            Err(e) => Err(e),
        }
    }

    /// After a conversion of `bytes` failed on bad data (`error`): checks each batch on
    /// its own, writes the runs of good batches and records the runs of bad ones, in
    /// offset order. Returns, for a backfill, whether it is complete.
    async fn salvage(
        &self,
        target: Target,
        topic: &str,
        partition: PartitionId,
        src: &dyn ByteSource,
        mut range: Range<Offset>,
        error: &ConvertError,
    ) -> Result<(SegmentOutcome, bool), SinkError> {
        let (mut views, mut framing) = frame(src).await?;
        if target == Target::Backfill {
            // Only what lies below the files' start, as write_backfill converts.
            let (manifest, _) = self.load(topic, partition).await?;
            let Some(start) = manifest.covered_start() else {
                return Err(SinkError::BadManifest {
                    key: self.layout.manifest_key(topic, partition),
                    reason: "a backfill needs converted files to fill in below".into(),
                });
            };
            if let Some(at) = views.iter().position(|v| v.last_offset() >= start) {
                if views[at].base_offset() < start {
                    return Err(SinkError::NotContiguous {
                        expected: start,
                        got: views[at].base_offset(),
                    });
                }
                views.truncate(at);
                framing = None;
            }
            range.end = range.end.min(start);
        }
        let n = views.len();
        let mut bad: Vec<Option<String>> = vec![None; n];
        check_batches(src, &views, self.options.verify_crc, &mut bad).await?;
        if bad.iter().all(Option::is_none) && !matches!(error, ConvertError::Framing { .. }) {
            // Nothing a batch check finds (an Arrow or Parquet writer error): the error
            // names the batch, or the whole segment is set aside.
            mark_bad(error, &views, 0, n, &mut bad);
        }

        let mut out = SegmentOutcome::default();
        let mut done = false;
        // Where the files (and dead letters) end, as far as this segment goes.
        let mut pos = range.start;
        let mut cur = 0;
        while cur < n {
            let run_bad = bad[cur].is_some();
            let mut j = (cur..n).find(|&i| bad[i].is_some() != run_bad).unwrap_or(n);
            if run_bad {
                if pos >= range.end {
                    // Batches past the range the caller named: not this segment's.
                    break;
                }
                let mut next = views.get(j).map_or(range.end, |v| v.base_offset());
                if next <= pos {
                    // The next good batch's offsets go backwards: nothing after is trusted.
                    (next, j) = (range.end, n);
                }
                let next = next.min(range.end);
                let count = j - cur;
                let mut reason = bad[cur].clone().unwrap_or_default();
                if count > 1 {
                    reason.push_str(&format!(" (the first of {count} batches in a row)"));
                }
                let (recorded, d) = self
                    .set_aside(target, topic, partition, pos..next, &reason)
                    .await?;
                out.dead_letters.extend(recorded);
                done = d;
                pos = next;
                cur = j;
                continue;
            }
            let part = views[cur].start..views[j - 1].end;
            // Transactions open at the run's end may end in the good batches after it.
            let later: Option<Vec<TxnMarker>> = if j < n {
                let mut m = self.options.later_markers.clone();
                m.extend(good_markers(src, &views[j..], &bad[j..]).await?);
                Some(m)
            } else {
                None
            };
            let written = match target {
                Target::Log => self
                    .write(topic, partition, src, part, later.as_deref())
                    .await
                    .map(|f| (f, false)),
                Target::Backfill => {
                    self.backfill(topic, partition, src, part, later.as_deref())
                        .await
                }
            };
            match written {
                Ok((file, d)) => {
                    out.files.extend(file);
                    done = d;
                    pos = views[j - 1].last_offset() + 1;
                    cur = j;
                }
                // Something the batch checks missed: set it aside and go again.
                Err(SinkError::Convert(e)) if e.is_bad_data() => {
                    mark_bad(&e, &views, cur, j, &mut bad)
                }
                Err(e) => return Err(e),
            }
        }
        // The bytes after the last batch that frames, up to the segment's end.
        if let Some(e) = framing
            && pos < range.end
        {
            let (recorded, d) = self
                .set_aside(target, topic, partition, pos..range.end, &e.to_string())
                .await?;
            out.dead_letters.extend(recorded);
            done = d;
        }
        Ok((out, done))
    }

    /// Records `offsets` as a dead letter of `target`; for a backfill, also whether it
    /// is complete.
    async fn set_aside(
        &self,
        target: Target,
        topic: &str,
        partition: PartitionId,
        offsets: Range<Offset>,
        reason: &str,
    ) -> Result<(Option<DeadLetter>, bool), SinkError> {
        let (first, last) = (offsets.start, offsets.end - 1);
        match target {
            Target::Log => Ok((
                self.dead_letter(topic, partition, first, last, reason)
                    .await?,
                false,
            )),
            Target::Backfill => {
                self.dead_letter_backfill(topic, partition, first, last, reason)
                    .await
            }
        }
    }

    /// Records `[first, last]` as a dead letter (offsets no file will hold: their batches
    /// cannot be converted, for `reason`) and moves the next offset past it, under the
    /// rules of a file: it must start where the files end (else
    /// [`SinkError::NotContiguous`]), and a range already behind the next offset is
    /// skipped, so a retry after a crash records it once and skips nothing more. Returns
    /// the dead letter, or `None` when it was done already (or the range is empty).
    pub async fn dead_letter(
        &self,
        topic: &str,
        partition: PartitionId,
        first: Offset,
        last: Offset,
        reason: &str,
    ) -> Result<Option<DeadLetter>, SinkError> {
        if last < first {
            return Ok(None);
        }
        let manifest_key = self.layout.manifest_key(topic, partition);
        let (mut manifest, version) = self.load(topic, partition).await?;
        match manifest.next_offset {
            Some(end) if last < end => return Ok(None),
            Some(end) if first != end => {
                return Err(SinkError::NotContiguous {
                    expected: end,
                    got: first,
                });
            }
            Some(_) => {}
            None => manifest.start_offset = Some(first),
        }
        let letter = DeadLetter {
            first_offset: first,
            last_offset: last,
            reason: reason.to_string(),
            at_ms: now_ms(),
        };
        insert_dead_letter(&mut manifest.dead_letters, letter.clone());
        manifest.next_offset = Some(last + 1);
        self.commit(&manifest_key, &manifest, version).await?;
        Ok(Some(letter))
    }

    /// [`dead_letter`](Self::dead_letter) below the files' start, continuing the
    /// backfill's cursor as [`write_backfill`](Self::write_backfill) does; also returns
    /// whether the backfill is complete.
    async fn dead_letter_backfill(
        &self,
        topic: &str,
        partition: PartitionId,
        first: Offset,
        last: Offset,
        reason: &str,
    ) -> Result<(Option<DeadLetter>, bool), SinkError> {
        let manifest_key = self.layout.manifest_key(topic, partition);
        let (mut manifest, version) = self.load(topic, partition).await?;
        let Some(start) = manifest.covered_start() else {
            return Err(SinkError::BadManifest {
                key: manifest_key,
                reason: "a backfill needs converted files to fill in below".into(),
            });
        };
        if last < first || first >= start {
            return Ok((None, manifest.backfill.is_none()));
        }
        if last >= start {
            return Err(SinkError::NotContiguous {
                expected: start,
                got: first,
            });
        }
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
        let letter = DeadLetter {
            first_offset: first,
            last_offset: last,
            reason: reason.to_string(),
            at_ms: now_ms(),
        };
        insert_dead_letter(&mut manifest.dead_letters, letter.clone());
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
        Ok((Some(letter), done))
    }
}

/// Inserts `letter` in offset order.
fn insert_dead_letter(letters: &mut Vec<DeadLetter>, letter: DeadLetter) {
    let at = letters.partition_point(|d| d.first_offset < letter.first_offset);
    letters.insert(at, letter);
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
