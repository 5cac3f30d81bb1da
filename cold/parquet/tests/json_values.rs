//! JSON values as typed columns; values that do not fit land in `_raw`.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;

use arrow::array::{Array, AsArray, RecordBatch, StructArray};
use arrow::datatypes::{DataType, Float64Type, Int64Type, TimestampMillisecondType};
use common::*;
use strata_parquet::{
    CHUNK_ROWS, ConvertOptions, ValueFormat, ValueSchema, convert_segment, metadata_keys,
};
use strata_proto::Compression;
use strata_proto::batch::build::NewRecord;
use strata_proto::config::TopicConfig;

const SCHEMA: &str = r#"{"fields":[
    {"name":"user","type":"utf8"},
    {"name":"amount","type":"float64","nullable":true},
    {"name":"n","type":"int64","nullable":true},
    {"name":"ok","type":"bool","nullable":true},
    {"name":"at","type":"timestamp_ms","nullable":true},
    {"name":"tags","type":"list","nullable":true,"items":{"type":"utf8"}},
    {"name":"geo","type":"struct","nullable":true,"fields":[
        {"name":"lat","type":"float64"},{"name":"lon","type":"float64"}]}
]}"#;

fn json_opts(schema: &str) -> ConvertOptions {
    let mut o = ConvertOptions::new("events", 2);
    o.value_format = ValueFormat::Json(ValueSchema::parse(schema).unwrap());
    o
}

fn segment(values: &[Option<&str>]) -> Vec<u8> {
    let records: Vec<NewRecord> = values
        .iter()
        .enumerate()
        .map(|(i, v)| NewRecord {
            value: v.map(|v| bytes::Bytes::from(v.to_string())),
            timestamp: 1_700_000_000_000 + i as i64,
            ..Default::default()
        })
        .collect();
    let mut seg = SegmentBuilder::default();
    for c in records.chunks(7) {
        seg.append_records(c, Compression::Zstd, None);
    }
    seg.bytes
}

fn one_batch(bytes: &[u8]) -> RecordBatch {
    let (batches, _) = read(bytes);
    arrow::compute::concat_batches(&batches[0].schema(), &batches).unwrap()
}

fn raw(b: &RecordBatch) -> Vec<Option<String>> {
    let raw = b.column_by_name("_raw").unwrap().as_binary::<i32>();
    (0..raw.len())
        .map(|i| (!raw.is_null(i)).then(|| String::from_utf8_lossy(raw.value(i)).into_owned()))
        .collect()
}

#[test]
fn typed_columns_round_trip() {
    let values = [
        Some(
            r#"{"user":"ann","amount":12.5,"n":-3,"ok":true,"at":1700000000123,"tags":["a","b"],"geo":{"lat":1.5,"lon":-2}}"#,
        ),
        Some(r#"{"user":"bob","at":"2024-01-02T03:04:05.678Z","extra":"ignored"}"#),
        Some(r#"  {"user":"", "amount":7, "tags":[], "n":9223372036854775807}  "#),
        None,
        Some(r#"{"user":"dé\u00e9\"q","geo":null,"ok":false}"#),
    ];
    let file = convert_segment(&segment(&values), &json_opts(SCHEMA)).unwrap();
    assert_eq!(file.summary.rows, 5);
    assert_eq!(file.summary.raw_fallbacks, 0);
    let b = one_batch(&file.bytes);
    assert!(b.column_by_name("value").unwrap().data_type().is_nested());
    let v: &StructArray = b.column_by_name("value").unwrap().as_struct();
    let user = v.column_by_name("user").unwrap().as_string::<i32>();
    let amount = v
        .column_by_name("amount")
        .unwrap()
        .as_primitive::<Float64Type>();
    let n = v.column_by_name("n").unwrap().as_primitive::<Int64Type>();
    let ok = v.column_by_name("ok").unwrap().as_boolean();
    let at = v
        .column_by_name("at")
        .unwrap()
        .as_primitive::<TimestampMillisecondType>();
    let tags = v.column_by_name("tags").unwrap().as_list::<i32>();
    let geo = v.column_by_name("geo").unwrap().as_struct();

    assert_eq!(user.value(0), "ann");
    assert_eq!(amount.value(0), 12.5);
    assert_eq!(n.value(0), -3);
    assert!(ok.value(0));
    assert_eq!(at.value(0), 1_700_000_000_123);
    let t0 = tags.value(0);
    let t0 = t0.as_string::<i32>();
    assert_eq!((t0.value(0), t0.value(1)), ("a", "b"));
    let lat = geo
        .column_by_name("lat")
        .unwrap()
        .as_primitive::<Float64Type>();
    let lon = geo
        .column_by_name("lon")
        .unwrap()
        .as_primitive::<Float64Type>();
    assert_eq!((lat.value(0), lon.value(0)), (1.5, -2.0));

    assert_eq!(user.value(1), "bob");
    assert!(amount.is_null(1) && n.is_null(1) && tags.is_null(1) && geo.is_null(1));
    assert_eq!(at.value(1), 1_704_164_645_678);

    assert_eq!(user.value(2), "");
    assert_eq!(amount.value(2), 7.0);
    assert_eq!(n.value(2), i64::MAX);
    assert_eq!(tags.value(2).len(), 0);
    assert!(!tags.is_null(2));

    // A null record value (a tombstone) is a null struct and no `_raw`.
    assert!(v.is_null(3));

    assert_eq!(user.value(4), "dé\u{e9}\"q");
    assert!(geo.is_null(4));
    assert!(!ok.value(4));

    assert_eq!(raw(&b), vec![None; 5]);
    // Arrow types as declared, UTC on timestamps; the declared nullability survives.
    let DataType::Struct(fields) = b
        .schema()
        .field_with_name("value")
        .unwrap()
        .data_type()
        .clone()
    else {
        panic!()
    };
    assert!(!fields[0].is_nullable());
    assert_eq!(
        fields[4].data_type(),
        &DataType::Timestamp(arrow::datatypes::TimeUnit::Millisecond, Some("UTC".into()))
    );
    let (_, meta) = read(&file.bytes);
    let kv = kv(&meta);
    assert_eq!(kv[metadata_keys::VALUE_FORMAT], "json");
    assert_eq!(kv[metadata_keys::VALUE_SCHEMA], SCHEMA.trim());
}

#[test]
fn values_that_do_not_fit_land_in_raw() {
    let good = r#"{"user":"ok"}"#;
    let bad = [
        r#"{"user":"#,                       // truncated JSON
        r#"not json"#,                       // not JSON
        r#"{"user":5}"#,                     // number for utf8
        r#"{"user":"x","n":"5"}"#,           // string for int64
        r#"{"user":"x","n":5.7}"#,           // float for int64 (no silent truncation)
        r#"{"user":"x","n":1e3}"#,           // exponent for int64
        r#"{"user":"x","amount":"1.5"}"#,    // string for float64
        r#"{"user":"x","ok":1}"#,            // number for bool
        r#"{"user":"x","at":"yesterday"}"#,  // not a date-time
        r#"{"user":"x","at":1.5}"#,          // fractional epoch millis
        r#"{"amount":1}"#,                   // required field missing
        r#"{"user":null}"#,                  // required field null
        r#"{"user":"x","tags":[1]}"#,        // wrong item type
        r#"{"user":"x","tags":["a",null]}"#, // null item in a non-nullable list
        r#"{"user":"x","geo":{"lat":1}}"#,   // required nested field missing
        r#"{"user":"x"}{"user":"y"}"#,       // two values in one
        r#"null"#,                           // JSON null, not an object
        r#"[{"user":"x"}]"#,                 // an array
        r#"42"#,                             // a scalar
        "",                                  // empty
    ];
    // Not in the list: arrow-json accepts a raw control character inside a string
    // (RFC 8259 wants it escaped). The text is unambiguous and kept exactly, so such a
    // value fits; see `lenient_about_raw_control_characters`.
    let mut values: Vec<Option<&str>> = Vec::new();
    for b in bad {
        values.push(Some(good));
        values.push(Some(b));
    }
    values.push(None);
    values.push(Some(good));
    let mut bytes = segment(&values);
    // Invalid UTF-8 inside a string, too.
    let mut seg = SegmentBuilder::starting_at(values.len() as i64);
    seg.append_records(
        &[NewRecord::value(b"{\"user\":\"\xff\"}".to_vec(), 1)],
        Compression::None,
        None,
    );
    bytes.extend_from_slice(&seg.bytes);

    let file = convert_segment(&bytes, &json_opts(SCHEMA)).unwrap();
    let s = &file.summary;
    assert_eq!(s.rows, values.len() as u64 + 1);
    let b = one_batch(&file.bytes);
    let raw = raw(&b);
    let v = b.column_by_name("value").unwrap().as_struct();
    let user = v.column_by_name("user").unwrap().as_string::<i32>();
    let mut misfits = 0;
    for (i, want) in values.iter().enumerate() {
        match want {
            Some(w) if *w == good => {
                assert_eq!(raw[i], None, "row {i}");
                assert_eq!(user.value(i), "ok");
            }
            Some(w) => {
                misfits += 1;
                assert_eq!(raw[i].as_deref(), Some(*w), "row {i}");
                assert!(v.is_null(i), "row {i}: {w}");
            }
            None => {
                assert_eq!(raw[i], None);
                assert!(v.is_null(i));
            }
        }
    }
    // The invalid UTF-8 value is kept byte for byte.
    let raw_col = b.column_by_name("_raw").unwrap().as_binary::<i32>();
    assert_eq!(raw_col.value(values.len()), b"{\"user\":\"\xff\"}");
    assert_eq!(s.raw_fallbacks, misfits + 1);
    let first = s.first_raw_fallback.as_ref().unwrap();
    assert_eq!(first.offset, 1);
    assert!(!first.reason.is_empty());
}

#[test]
fn unknown_fields_can_be_refused() {
    let schema = r#"{"fields":[{"name":"user","type":"utf8"}],"unknown_fields":"reject"}"#;
    let values = [Some(r#"{"user":"a"}"#), Some(r#"{"user":"b","more":1}"#)];
    let file = convert_segment(&segment(&values), &json_opts(schema)).unwrap();
    assert_eq!(file.summary.raw_fallbacks, 1);
    assert_eq!(
        raw(&one_batch(&file.bytes)),
        [None, Some(r#"{"user":"b","more":1}"#.to_string())]
    );
}

#[test]
fn a_misfit_in_a_later_chunk_spoils_nothing_else() {
    // Several Arrow chunks; the only bad value is deep in the second.
    let n = CHUNK_ROWS + 3000;
    let vals: Vec<String> = (0..n)
        .map(|i| {
            if i == CHUNK_ROWS + 1234 {
                r#"{"user":"x","n":"oops"}"#.to_string()
            } else {
                format!(r#"{{"user":"u{i}","n":{i}}}"#)
            }
        })
        .collect();
    let refs: Vec<Option<&str>> = vals.iter().map(|v| Some(v.as_str())).collect();
    let file = convert_segment(&segment(&refs), &json_opts(SCHEMA)).unwrap();
    assert_eq!(file.summary.raw_fallbacks, 1);
    assert_eq!(
        file.summary.first_raw_fallback.as_ref().unwrap().offset,
        (CHUNK_ROWS + 1234) as i64
    );
    let b = one_batch(&file.bytes);
    let v = b.column_by_name("value").unwrap().as_struct();
    let num = v.column_by_name("n").unwrap().as_primitive::<Int64Type>();
    for i in 0..n {
        if i == CHUNK_ROWS + 1234 {
            assert!(v.is_null(i));
        } else {
            assert_eq!(num.value(i), i as i64);
        }
    }
}

#[test]
fn json_without_a_schema_keeps_the_value_binary() {
    let config = TopicConfig::resolve(&BTreeMap::from([(
        "parquet.value.format".to_string(),
        "json".to_string(),
    )]))
    .unwrap();
    let opts = ConvertOptions::from_topic_config("t", 0, &config).unwrap();
    let values = [Some(r#"{"user":"a"}"#), Some("not json")];
    let file = convert_segment(&segment(&values), &opts).unwrap();
    let got: Vec<Option<Vec<u8>>> = rows(&file.bytes).into_iter().map(|r| r.value).collect();
    assert_eq!(
        got,
        [
            Some(br#"{"user":"a"}"#.to_vec()),
            Some(b"not json".to_vec())
        ]
    );
    assert_eq!(file.summary.raw_fallbacks, 0);
}

#[test]
fn topic_config_schema_reaches_the_file() {
    let config = TopicConfig::resolve(&BTreeMap::from([
        ("parquet.value.format".to_string(), "json".to_string()),
        ("parquet.value.schema".to_string(), SCHEMA.to_string()),
    ]))
    .unwrap();
    let opts = ConvertOptions::from_topic_config("t", 0, &config).unwrap();
    let file = convert_segment(&segment(&[Some(r#"{"user":"z"}"#)]), &opts).unwrap();
    let b = one_batch(&file.bytes);
    let v = b.column_by_name("value").unwrap().as_struct();
    assert_eq!(
        v.column_by_name("user")
            .unwrap()
            .as_string::<i32>()
            .value(0),
        "z"
    );
}

#[test]
fn lenient_about_raw_control_characters() {
    let v = "{\"user\":\"a\u{1}b\"}";
    let file = convert_segment(&segment(&[Some(v)]), &json_opts(SCHEMA)).unwrap();
    assert_eq!(file.summary.raw_fallbacks, 0);
    let b = one_batch(&file.bytes);
    let user = b.column_by_name("value").unwrap().as_struct();
    let user = user.column_by_name("user").unwrap().as_string::<i32>();
    assert_eq!(user.value(0), "a\u{1}b");
}

/// Each value that does not fit also goes to a dead-letter file beside the partition's
/// files: the row as a binary-value file has it (the value byte for byte) and why it did
/// not fit; it is listed with its file in the manifest and expires with it.
#[tokio::test]
async fn misfits_also_go_to_a_dead_letter_file_with_their_reasons() {
    use strata_parquet::{ParquetLayout, ParquetSink};
    use strata_store::{ErrorKind, ObjectBackend};
    let store = ObjectBackend::memory().into_dyn();
    let sink = ParquetSink::new(store.clone(), ParquetLayout::new("c"), json_opts(SCHEMA));
    let good = r#"{"user":"ok"}"#;
    let values = [
        Some(good),
        Some(r#"{"user":5}"#),
        Some(good),
        None,
        Some("not json"),
        Some(r#"{"amount":1}"#),
        Some(good),
    ];
    sink.write_segment("events", 2, &segment(&values))
        .await
        .unwrap();
    let files = sink.files("events", 2).await.unwrap();
    assert_eq!(files.len(), 1);
    let dead = &files[0].dead_letter_files;
    assert_eq!(dead.len(), 1, "{dead:?}");
    let d = &dead[0];
    assert_eq!((d.first_offset, d.last_offset, d.rows), (1, 5, 3));
    assert!(
        d.key
            .starts_with("c/dead_letters/parquet/topic=events/partition=2/date=2023-11-14/"),
        "{}",
        d.key
    );
    // Read back by the parquet crate's own reader.
    let bytes = store.get(&d.key).await.unwrap();
    assert_eq!(bytes.len() as u64, d.bytes);
    let (_, meta) = read(&bytes);
    assert_eq!(kv(&meta)[metadata_keys::DEAD_LETTERS], "true");
    let b = one_batch(&bytes);
    let schema = b.schema();
    let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
    assert_eq!(
        names,
        [
            "partition",
            "offset",
            "timestamp",
            "key",
            "value",
            "headers",
            "producer_id",
            "sequence",
            "reason"
        ]
    );
    let offsets: Vec<i64> = b
        .column_by_name("offset")
        .unwrap()
        .as_primitive::<Int64Type>()
        .values()
        .to_vec();
    assert_eq!(offsets, [1, 4, 5]);
    let value = b.column_by_name("value").unwrap().as_binary::<i32>();
    let got: Vec<&[u8]> = (0..3).map(|i| value.value(i)).collect();
    assert_eq!(
        got,
        [
            br#"{"user":5}"#.as_slice(),
            b"not json".as_slice(),
            br#"{"amount":1}"#.as_slice()
        ]
    );
    let reason = b.column_by_name("reason").unwrap().as_string::<i32>();
    let reasons: Vec<&str> = (0..3).map(|i| reason.value(i)).collect();
    assert!(reasons.iter().all(|r| !r.is_empty()), "{reasons:?}");
    assert_ne!(reasons[0], reasons[1], "each row says its own reason");
    // The dead-letter file expires with its file.
    sink.expire("events", 2, 100).await.unwrap();
    assert_eq!(
        store.get(&d.key).await.unwrap_err().kind(),
        ErrorKind::NotFound
    );
}
