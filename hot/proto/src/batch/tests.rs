//! Tests of the batch view: parsing, CRC, rewrites and record iteration, on batches
//! built by [`super::build`].

use super::build::{NewRecord, ProducerFields, batch};
use super::*;
use bytes::Bytes;

fn sample(n: usize) -> Vec<NewRecord> {
    (0..n)
        .map(|i| NewRecord {
            key: if i % 3 == 0 {
                None
            } else {
                Some(Bytes::from(format!("key-{i}")))
            },
            value: if i % 5 == 4 {
                None
            } else {
                Some(Bytes::from(vec![i as u8; i * 7]))
            },
            headers: (0..i % 3)
                .map(|h| {
                    (
                        format!("h{h}"),
                        if h == 1 { None } else { Some(Bytes::from("v")) },
                    )
                })
                .collect(),
            timestamp: 1_700_000_000_000 + (i as i64) * 13,
        })
        .collect()
}

#[test]
fn compression_names_round_trip() {
    for c in Compression::ALL {
        assert_eq!(c.to_string(), c.name());
        assert_eq!(c.name().parse::<Compression>(), Ok(c));
        assert_eq!(Compression::from_attributes(c.id()).ok(), Some(c));
    }
    assert_eq!(
        Compression::ALL.map(Compression::name),
        ["none", "gzip", "snappy", "lz4", "zstd"]
    );
    assert!("GZIP".parse::<Compression>().is_err());
    assert!("".parse::<Compression>().is_err());
}

/// Fuzzing found it (fuzz/corpus/record_batch/regress-base-offset-i64-max): the
/// base offset is not CRC-covered, and one near i64::MAX made last_offset() overflow.
#[test]
fn offsets_that_overflow_are_refused() {
    let mut b = batch(&sample(2), Compression::None, None).to_vec();
    set_base_offset(&mut b, i64::MAX);
    assert_eq!(
        parse_header(&b).map(|_| ()),
        Err(BatchError::InvalidRecord("batch offsets overflow"))
    );
    assert!(RecordBatch::parse(&b).is_err());
    // Two records: offsets MAX-2 and MAX-1, and the next offset MAX still fits.
    set_base_offset(&mut b, i64::MAX - 2);
    let (rb, _) = RecordBatch::parse(&b).expect("the last offset fits");
    assert_eq!(rb.next_offset(), i64::MAX);
}

const CODECS: [Compression; 5] = [
    Compression::None,
    Compression::Gzip,
    Compression::Snappy,
    Compression::Lz4,
    Compression::Zstd,
];

#[test]
fn parses_every_codec_the_kafka_protocol_crate_writes() {
    let records = sample(40);
    for codec in CODECS {
        let bytes = batch(
            &records,
            codec,
            Some(ProducerFields {
                producer_id: 7,
                producer_epoch: 2,
                base_sequence: 100,
            }),
        );
        let (b, rest) = RecordBatch::parse(&bytes).unwrap();
        assert!(rest.is_empty());
        b.validate_for_append().unwrap();
        assert_eq!(b.compression().unwrap(), codec);
        let h = b.header();
        assert_eq!(h.record_count, 40);
        assert_eq!(h.last_offset_delta, 39);
        assert_eq!(h.producer_id, 7);
        assert_eq!(h.producer_epoch, 2);
        assert_eq!(h.base_sequence, 100);
        assert_eq!(h.last_sequence(), 139);
        assert_eq!(h.max_timestamp, 1_700_000_000_000 + 39 * 13);
        let recs = b.records().unwrap();
        let got: Vec<_> = recs.iter().collect::<Result<_, _>>().unwrap();
        assert_eq!(got.len(), records.len());
        for (i, (g, want)) in got.iter().zip(&records).enumerate() {
            assert_eq!(g.offset, i as i64);
            assert_eq!(g.timestamp, want.timestamp);
            assert_eq!(g.key, want.key.as_deref());
            assert_eq!(g.value, want.value.as_deref());
            let want_headers: Vec<_> = want
                .headers
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_deref()))
                .collect();
            assert_eq!(g.headers, want_headers);
        }
    }
}

#[test]
fn rewriting_offset_and_epoch_keeps_the_crc_valid() {
    let mut bytes = batch(&sample(3), Compression::None, None).to_vec();
    set_base_offset(&mut bytes, 1234);
    set_partition_leader_epoch(&mut bytes, 9);
    let (b, _) = RecordBatch::parse(&bytes).unwrap();
    b.validate_crc().unwrap();
    assert_eq!(b.base_offset(), 1234);
    assert_eq!(b.last_offset(), 1236);
    assert_eq!(b.header().partition_leader_epoch, 9);
    let offsets: Vec<i64> = b
        .records()
        .unwrap()
        .iter()
        .map(|r| r.unwrap().offset)
        .collect();
    assert_eq!(offsets, vec![1234, 1235, 1236]);
}

#[test]
fn log_append_time_rewrites_timestamps_and_crc() {
    let mut bytes = batch(&sample(3), Compression::Lz4, None).to_vec();
    set_log_append_time(&mut bytes, 42);
    let (b, _) = RecordBatch::parse(&bytes).unwrap();
    b.validate_crc().unwrap();
    assert_eq!(b.header().timestamp_type(), TimestampType::LogAppendTime);
    assert!(
        b.records()
            .unwrap()
            .iter()
            .all(|r| r.unwrap().timestamp == 42)
    );
}

#[test]
fn every_single_bit_flip_in_the_covered_region_fails_the_crc() {
    let bytes = batch(&sample(2), Compression::None, None).to_vec();
    for i in CRC_START..bytes.len() {
        let mut b = bytes.clone();
        b[i] ^= 0x10;
        let Ok((rb, _)) = RecordBatch::parse(&b) else {
            continue;
        };
        assert!(rb.validate_crc().is_err(), "flip at {i} went unnoticed");
    }
}

#[test]
fn framing_errors_are_typed() {
    let bytes = batch(&sample(2), Compression::None, None).to_vec();
    assert!(matches!(
        RecordBatch::parse(&bytes[..30]),
        Err(BatchError::Truncated {
            need: HEADER_LEN,
            ..
        })
    ));
    assert!(matches!(
        RecordBatch::parse(&bytes[..bytes.len() - 1]),
        Err(BatchError::Truncated { .. })
    ));
    let mut bad = bytes.clone();
    bad[16] = 1;
    assert_eq!(
        RecordBatch::parse(&bad).unwrap_err(),
        BatchError::BadMagic(1)
    );
    assert_eq!(
        BatchError::BadMagic(1).error_code(),
        ErrorCode::UnsupportedForMessageFormat
    );
    let mut bad = bytes.clone();
    bad[8..12].copy_from_slice(&3i32.to_be_bytes());
    assert_eq!(
        RecordBatch::parse(&bad).unwrap_err(),
        BatchError::BadLength(3)
    );
    let mut bad = bytes.clone();
    bad[30] ^= 1;
    let (b, _) = RecordBatch::parse(&bad).unwrap();
    assert_eq!(
        b.validate_for_append().unwrap_err().error_code(),
        ErrorCode::CorruptMessage
    );
}

#[test]
fn batches_splits_concatenated_batches_and_reports_a_torn_tail() {
    let one = batch(&sample(2), Compression::None, None);
    let two = batch(&sample(5), Compression::Zstd, None);
    let mut all = one.to_vec();
    all.extend_from_slice(&two);
    let got: Vec<_> = batches(&all).collect::<Result<_, _>>().unwrap();
    assert_eq!(got.len(), 2);
    assert_eq!(got[1].header().record_count, 5);
    all.truncate(all.len() - 3);
    let got: Vec<_> = batches(&all).collect();
    assert!(got[0].is_ok());
    assert!(matches!(got[1], Err(BatchError::Truncated { .. })));
}

proptest::proptest! {
    #[test]
    fn garbage_never_panics(data in proptest::collection::vec(proptest::num::u8::ANY, 0..300)) {
        for b in batches(&data).flatten() {
            let _ = b.validate_for_append();
            if let Ok(recs) = b.records() {
                for r in recs.iter() { let _ = r; }
            }
        }
    }

    #[test]
    fn corrupting_a_valid_batch_never_panics(
        pos in 0usize..2000, val in proptest::num::u8::ANY, codec in 0usize..5
    ) {
        let bytes = batch(&sample(6), CODECS[codec], None);
        let mut b = bytes.to_vec();
        let p = pos % b.len();
        b[p] = val;
        if let Ok((rb, _)) = RecordBatch::parse(&b) {
            let _ = rb.validate_for_append();
            if let Ok(recs) = rb.records() { for r in recs.iter() { let _ = r; } }
        }
    }
}
