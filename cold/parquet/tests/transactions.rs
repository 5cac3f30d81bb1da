//! Control batches and aborted transactional records never become rows.
#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use strata_parquet::{
    ConvertError, ConvertOptions, MarkerKind, PendingTxnPolicy, TxnMarker, convert_segment,
    scan_markers,
};
use strata_proto::Compression;
use strata_proto::batch::build::NewRecord;

fn values(bytes: &[u8]) -> Vec<String> {
    rows(bytes)
        .into_iter()
        .map(|r| String::from_utf8(r.value.unwrap()).unwrap())
        .collect()
}

fn plain(v: &str) -> Vec<NewRecord> {
    vec![NewRecord::value(v.to_string(), 1_700_000_000_000)]
}

#[test]
fn control_batches_and_aborted_transactions_are_not_rows() {
    let mut seg = SegmentBuilder::starting_at(100);
    // Producer 10 commits, producer 11 aborts, interleaved with each other and with
    // non-transactional data; every codec for the transactional batches.
    seg.append_records(&plain("plain-0"), Compression::None, None);
    seg.append(&txn_batch(10, 0, &["c-1", "c-2"], Compression::Gzip));
    seg.append(&txn_batch(11, 0, &["a-1"], Compression::Snappy));
    seg.append_records(&plain("plain-1"), Compression::Lz4, None);
    seg.append(&txn_batch(11, 1, &["a-2", "a-3"], Compression::Zstd));
    seg.append(&txn_batch(10, 2, &["c-3"], Compression::None));
    seg.append(&control_batch(11, ABORT));
    seg.append(&control_batch(10, COMMIT));
    // A second transaction of producer 11, committed this time.
    seg.append(&txn_batch(11, 3, &["c-4"], Compression::Lz4));
    seg.append(&control_batch(11, COMMIT));
    seg.append_records(&plain("plain-2"), Compression::None, None);
    let last = seg.next_offset - 1;

    let file = convert_segment(&seg.bytes, &ConvertOptions::new("t", 0)).unwrap();
    assert_eq!(
        values(&file.bytes),
        ["plain-0", "c-1", "c-2", "plain-1", "c-3", "c-4", "plain-2"]
    );
    let s = &file.summary;
    assert_eq!(s.rows, 7);
    assert_eq!(s.control_records, 3);
    assert_eq!(s.aborted_records, 3);
    // The file still covers every offset of the input.
    assert_eq!((s.first_offset, s.last_offset), (100, last));
    // Transactional rows carry their producer and sequence.
    let r = rows(&file.bytes);
    assert_eq!((r[2].producer_id, r[2].sequence), (Some(10), Some(1)));
    assert_eq!((r[0].producer_id, r[0].sequence), (None, None));
}

#[test]
fn a_transaction_open_at_the_end_needs_a_later_marker_or_a_policy() {
    let mut seg = SegmentBuilder::starting_at(0);
    seg.append_records(&plain("plain"), Compression::None, None);
    seg.append(&txn_batch(20, 0, &["t-1", "t-2"], Compression::None));
    let opts = ConvertOptions::new("t", 0);

    // Default: refuse, retryably, naming the transaction.
    let e = convert_segment(&seg.bytes, &opts).unwrap_err();
    assert!(
        matches!(
            e,
            ConvertError::PendingTransaction {
                producer_id: 20,
                first_offset: 1
            }
        ),
        "{e}"
    );
    assert!(e.is_retryable());

    // The next segment's markers settle it.
    let mut next = SegmentBuilder::starting_at(seg.next_offset);
    next.append_records(&plain("later"), Compression::None, None);
    next.append(&control_batch(21, COMMIT));
    next.append(&control_batch(20, ABORT));
    let markers = scan_markers(&next.bytes).unwrap();
    assert_eq!(
        markers,
        [
            TxnMarker {
                producer_id: 21,
                offset: 4,
                kind: MarkerKind::Commit
            },
            TxnMarker {
                producer_id: 20,
                offset: 5,
                kind: MarkerKind::Abort
            },
        ]
    );
    let mut o = opts.clone();
    o.later_markers = markers;
    let file = convert_segment(&seg.bytes, &o).unwrap();
    assert_eq!(values(&file.bytes), ["plain"]);
    assert_eq!(file.summary.aborted_records, 2);

    o.later_markers = vec![TxnMarker {
        producer_id: 20,
        offset: 9,
        kind: MarkerKind::Commit,
    }];
    assert_eq!(
        values(&convert_segment(&seg.bytes, &o).unwrap().bytes),
        ["plain", "t-1", "t-2"]
    );

    // Or a policy decides.
    let mut o = opts.clone();
    o.pending_transactions = PendingTxnPolicy::Include;
    assert_eq!(
        values(&convert_segment(&seg.bytes, &o).unwrap().bytes),
        ["plain", "t-1", "t-2"]
    );
    o.pending_transactions = PendingTxnPolicy::Exclude;
    assert_eq!(
        values(&convert_segment(&seg.bytes, &o).unwrap().bytes),
        ["plain"]
    );
}

#[test]
fn markers_without_data_and_other_control_records_change_nothing() {
    let mut seg = SegmentBuilder::starting_at(50);
    // The abort of a transaction whose data was in an earlier segment.
    seg.append(&control_batch(30, ABORT));
    seg.append(&txn_batch(31, 0, &["x"], Compression::None));
    // A control record that is not a transaction marker (KRaft's LEADER_CHANGE is 2):
    // skipped, and it does not end producer 31's transaction.
    seg.append(&control_batch(31, 2));
    seg.append(&control_batch(31, COMMIT));
    let file = convert_segment(&seg.bytes, &ConvertOptions::new("t", 0)).unwrap();
    assert_eq!(values(&file.bytes), ["x"]);
    assert_eq!(file.summary.control_records, 3);

    // A file of nothing but markers is still a valid, empty file covering its offsets.
    let mut only = SegmentBuilder::starting_at(7);
    only.append(&control_batch(30, COMMIT));
    let file = convert_segment(&only.bytes, &ConvertOptions::new("t", 0)).unwrap();
    assert_eq!(file.summary.rows, 0);
    assert_eq!(
        (file.summary.first_offset, file.summary.last_offset),
        (7, 7)
    );
    assert_eq!(file.summary.min_timestamp, None);
    let (batches, meta) = read(&file.bytes);
    assert!(batches.iter().all(|b| b.num_rows() == 0));
    assert_eq!(meta.file_metadata().num_rows(), 0);
}
