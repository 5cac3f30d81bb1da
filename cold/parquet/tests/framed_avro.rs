//! Confluent-framed Avro values -> typed columns (strata_parquet::framed), with data
//! encoded by apache-avro.

#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::sync::Arc;

use apache_avro::Schema;
use apache_avro::types::Value;
use arrow::array::{Array, AsArray, RecordBatch, StructArray};
use arrow::datatypes::{
    DataType, Date32Type, Decimal128Type, Field, Float32Type, Float64Type, Int32Type, Int64Type,
    Schema as ArrowSchema, Time64MicrosecondType, TimeUnit, TimestampMicrosecondType,
};
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use strata_parquet::framed::{AvroColumns, FramedError, inline_references};

/// Strips logical types, so apache-avro encodes each value as its plain wire type (it
/// cannot encode some logical values from plain ones); the bytes are the same.
fn plain(text: &str) -> Schema {
    fn strip(v: &mut serde_json::Value) {
        match v {
            serde_json::Value::Object(o) => {
                o.remove("logicalType");
                o.values_mut().for_each(strip);
            }
            serde_json::Value::Array(a) => a.iter_mut().for_each(strip),
            _ => {}
        }
    }
    let mut json: serde_json::Value = serde_json::from_str(text).unwrap();
    strip(&mut json);
    Schema::parse(&json).unwrap()
}

fn frame(id: i32, schema: &Schema, value: Value) -> Vec<u8> {
    let mut out = vec![0];
    out.extend_from_slice(&id.to_be_bytes());
    out.extend(apache_avro::to_avro_datum(schema, value).unwrap());
    out
}

fn record(fields: Vec<(&str, Value)>) -> Value {
    Value::Record(
        fields
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
    )
}

fn decode(cols: &mut AvroColumns, values: &[Vec<u8>]) -> StructArray {
    let refs: Vec<Option<&[u8]>> = values.iter().map(|v| Some(v.as_slice())).collect();
    let d = cols.decode(&refs).unwrap();
    assert!(d.failures.is_empty(), "{:?}", d.failures);
    d.column
}

const ALL: &str = r#"{"type":"record","name":"All","namespace":"t","fields":[
  {"name":"b","type":"boolean"},
  {"name":"i","type":"int"},
  {"name":"l","type":"long"},
  {"name":"f","type":"float"},
  {"name":"d","type":"double"},
  {"name":"s","type":"string"},
  {"name":"by","type":"bytes"},
  {"name":"fx","type":{"type":"fixed","name":"Four","size":4}},
  {"name":"e","type":{"type":"enum","name":"Color","symbols":["RED","GREEN"]}},
  {"name":"arr","type":{"type":"array","items":"string"}},
  {"name":"m","type":{"type":"map","values":"long"}},
  {"name":"nested","type":{"type":"record","name":"Inner","fields":[{"name":"x","type":"int"}]}},
  {"name":"opt","type":["null","string"]},
  {"name":"opt_last","type":["long","null"]},
  {"name":"u","type":["null","int","string","Inner"]},
  {"name":"dec","type":{"type":"bytes","logicalType":"decimal","precision":10,"scale":2}},
  {"name":"decf","type":{"type":"fixed","name":"Money","size":8,"logicalType":"decimal","precision":12,"scale":3}},
  {"name":"date","type":{"type":"int","logicalType":"date"}},
  {"name":"tms","type":{"type":"int","logicalType":"time-millis"}},
  {"name":"tus","type":{"type":"long","logicalType":"time-micros"}},
  {"name":"tsms","type":{"type":"long","logicalType":"timestamp-millis"}},
  {"name":"tsus","type":{"type":"long","logicalType":"timestamp-micros"}},
  {"name":"lts","type":{"type":"long","logicalType":"local-timestamp-millis"}},
  {"name":"uuid","type":{"type":"string","logicalType":"uuid"}},
  {"name":"reused","type":"Inner"}
]}"#;

fn all_value(n: i32) -> Value {
    record(vec![
        ("b", Value::Boolean(n % 2 == 0)),
        ("i", Value::Int(n)),
        ("l", Value::Long(i64::from(n) << 40)),
        ("f", Value::Float(1.5)),
        ("d", Value::Double(-2.25)),
        ("s", Value::String(format!("s{n}"))),
        ("by", Value::Bytes(vec![0, 255, n as u8])),
        ("fx", Value::Fixed(4, vec![1, 2, 3, 4])),
        ("e", Value::Enum(1, "GREEN".into())),
        (
            "arr",
            Value::Array(vec![Value::String("a".into()), Value::String("b".into())]),
        ),
        (
            "m",
            Value::Map(HashMap::from([("k".to_string(), Value::Long(7))])),
        ),
        ("nested", record(vec![("x", Value::Int(n * 10))])),
        (
            "opt",
            if n == 0 {
                Value::Union(0, Box::new(Value::Null))
            } else {
                Value::Union(1, Box::new(Value::String("here".into())))
            },
        ),
        ("opt_last", Value::Union(1, Box::new(Value::Null))),
        (
            "u",
            match n {
                0 => Value::Union(1, Box::new(Value::Int(42))),
                1 => Value::Union(2, Box::new(Value::String("str".into()))),
                _ => Value::Union(3, Box::new(record(vec![("x", Value::Int(9))]))),
            },
        ),
        // -123.45: unscaled -12345 = 0xcfc7.
        ("dec", Value::Bytes(vec![0xcf, 0xc7])),
        // 1.000 = unscaled 1000 in 8 bytes.
        ("decf", Value::Fixed(8, 1000i64.to_be_bytes().to_vec())),
        ("date", Value::Int(19_000)),
        ("tms", Value::Int(3_600_000)),
        ("tus", Value::Long(1_500_000)),
        ("tsms", Value::Long(1_700_000_000_123)),
        ("tsus", Value::Long(1_700_000_000_123_456)),
        ("lts", Value::Long(1_000)),
        (
            "uuid",
            Value::String("6ba7b810-9dad-11d1-80b4-00c04fd430c8".into()),
        ),
        ("reused", record(vec![("x", Value::Int(-1))])),
    ])
}

fn field<'a>(s: &'a StructArray, name: &str) -> &'a Arc<dyn Array> {
    s.column_by_name(name)
        .unwrap_or_else(|| panic!("no column {name}"))
}

#[test]
fn every_avro_type_becomes_its_iceberg_column() {
    let mut cols = AvroColumns::new(ALL).unwrap();
    cols.add_writer(1, ALL).unwrap();
    let DataType::Struct(fields) = cols.data_type() else {
        panic!("not a struct")
    };
    let ty = |n: &str| fields.find(n).unwrap().1.clone();
    let utc = Some(Arc::from("UTC"));
    assert_eq!(ty("b").data_type(), &DataType::Boolean);
    assert_eq!(ty("i").data_type(), &DataType::Int32);
    assert!(!ty("i").is_nullable());
    assert_eq!(ty("fx").data_type(), &DataType::FixedSizeBinary(4));
    assert_eq!(ty("e").data_type(), &DataType::Utf8);
    assert!(
        matches!(ty("arr").data_type(), DataType::List(f) if f.name() == "element" && !f.is_nullable())
    );
    assert!(matches!(ty("m").data_type(), DataType::Map(_, false)));
    assert!(ty("opt").is_nullable() && ty("opt").data_type() == &DataType::Utf8);
    assert!(ty("opt_last").is_nullable() && ty("opt_last").data_type() == &DataType::Int64);
    match ty("u").data_type() {
        DataType::Struct(f) => {
            let names: Vec<&str> = f.iter().map(|f| f.name().as_str()).collect();
            assert_eq!(names, ["int", "string", "Inner"]);
            assert!(f.iter().all(|f| f.is_nullable()));
        }
        t => panic!("{t}"),
    }
    assert_eq!(ty("dec").data_type(), &DataType::Decimal128(10, 2));
    assert_eq!(ty("decf").data_type(), &DataType::Decimal128(12, 3));
    assert_eq!(ty("date").data_type(), &DataType::Date32);
    assert_eq!(
        ty("tms").data_type(),
        &DataType::Time64(TimeUnit::Microsecond)
    );
    assert_eq!(
        ty("tus").data_type(),
        &DataType::Time64(TimeUnit::Microsecond)
    );
    assert_eq!(
        ty("tsms").data_type(),
        &DataType::Timestamp(TimeUnit::Microsecond, utc.clone())
    );
    assert_eq!(
        ty("tsus").data_type(),
        &DataType::Timestamp(TimeUnit::Microsecond, utc)
    );
    assert_eq!(
        ty("lts").data_type(),
        &DataType::Timestamp(TimeUnit::Microsecond, None)
    );
    assert_eq!(ty("uuid").data_type(), &DataType::Utf8);
    assert!(matches!(ty("reused").data_type(), DataType::Struct(f) if f.len() == 1));

    let w = plain(ALL);
    let values: Vec<Vec<u8>> = (0..3).map(|n| frame(1, &w, all_value(n))).collect();
    let s = decode(&mut cols, &values);
    assert_eq!(s.len(), 3);
    assert_eq!(s.null_count(), 0);
    assert!(field(&s, "b").as_boolean().value(0));
    assert_eq!(field(&s, "i").as_primitive::<Int32Type>().value(2), 2);
    assert_eq!(field(&s, "l").as_primitive::<Int64Type>().value(1), 1 << 40);
    assert_eq!(field(&s, "f").as_primitive::<Float32Type>().value(0), 1.5);
    assert_eq!(field(&s, "d").as_primitive::<Float64Type>().value(0), -2.25);
    assert_eq!(field(&s, "s").as_string::<i32>().value(1), "s1");
    assert_eq!(field(&s, "by").as_binary::<i32>().value(2), &[0, 255, 2]);
    assert_eq!(
        field(&s, "fx").as_fixed_size_binary().value(0),
        &[1, 2, 3, 4]
    );
    assert_eq!(field(&s, "e").as_string::<i32>().value(0), "GREEN");
    let arr = field(&s, "arr").as_list::<i32>();
    assert_eq!(arr.value_length(0), 2);
    assert_eq!(arr.value(1).as_string::<i32>().value(1), "b");
    let m = field(&s, "m").as_map();
    assert_eq!(m.keys().as_string::<i32>().value(0), "k");
    assert_eq!(m.values().as_primitive::<Int64Type>().value(0), 7);
    let nested = field(&s, "nested").as_struct();
    assert_eq!(nested.column(0).as_primitive::<Int32Type>().value(2), 20);
    let opt = field(&s, "opt");
    assert!(opt.is_null(0) && opt.is_valid(1));
    assert_eq!(opt.as_string::<i32>().value(1), "here");
    assert_eq!(field(&s, "opt_last").null_count(), 3);
    let u = field(&s, "u").as_struct();
    assert_eq!(u.column(0).as_primitive::<Int32Type>().value(0), 42);
    assert!(u.column(1).is_null(0) && u.column(2).is_null(0));
    assert_eq!(u.column(1).as_string::<i32>().value(1), "str");
    assert!(u.column(0).is_null(1));
    assert_eq!(
        u.column(2)
            .as_struct()
            .column(0)
            .as_primitive::<Int32Type>()
            .value(2),
        9
    );
    let dec = field(&s, "dec").as_primitive::<Decimal128Type>();
    assert_eq!(dec.value(0), -12345);
    assert_eq!(dec.value_as_string(0), "-123.45");
    assert_eq!(
        field(&s, "decf")
            .as_primitive::<Decimal128Type>()
            .value_as_string(0),
        "1.000"
    );
    assert_eq!(
        field(&s, "date").as_primitive::<Date32Type>().value(0),
        19_000
    );
    assert_eq!(
        field(&s, "tms")
            .as_primitive::<Time64MicrosecondType>()
            .value(0),
        3_600_000_000
    );
    assert_eq!(
        field(&s, "tus")
            .as_primitive::<Time64MicrosecondType>()
            .value(0),
        1_500_000
    );
    assert_eq!(
        field(&s, "tsms")
            .as_primitive::<TimestampMicrosecondType>()
            .value(0),
        1_700_000_000_123_000
    );
    assert_eq!(
        field(&s, "tsus")
            .as_primitive::<TimestampMicrosecondType>()
            .value(0),
        1_700_000_000_123_456
    );
    assert_eq!(
        field(&s, "lts")
            .as_primitive::<TimestampMicrosecondType>()
            .value(0),
        1_000_000
    );
    assert_eq!(
        field(&s, "uuid").as_string::<i32>().value(0),
        "6ba7b810-9dad-11d1-80b4-00c04fd430c8"
    );
}

#[test]
fn a_fixed_uuid_becomes_its_text() {
    let schema = r#"{"type":"record","name":"R","fields":[
        {"name":"id","type":{"type":"fixed","name":"U","size":16,"logicalType":"uuid"}}]}"#;
    let mut cols = AvroColumns::new(schema).unwrap();
    cols.add_writer(3, schema).unwrap();
    let mut v = vec![0, 0, 0, 0, 3];
    v.extend(0u8..16);
    let s = decode(&mut cols, &[v]);
    assert_eq!(
        s.column(0).as_string::<i32>().value(0),
        "00010203-0405-0607-0809-0a0b0c0d0e0f"
    );
}

const V1: &str = r#"{"type":"record","name":"User","fields":[
  {"name":"id","type":"int"},
  {"name":"name","type":"string"},
  {"name":"dropped","type":{"type":"array","items":"string"}},
  {"name":"level","type":{"type":"enum","name":"Level","symbols":["LOW","HIGH","OLD"]}}]}"#;
const V2: &str = r#"{"type":"record","name":"User","fields":[
  {"name":"id","type":"long"},
  {"name":"full_name","type":"string","aliases":["name"]},
  {"name":"email","type":["null","string"],"default":null},
  {"name":"score","type":"double","default":1.5},
  {"name":"level","type":{"type":"enum","name":"Level","symbols":["LOW","HIGH","UNKNOWN"],"default":"UNKNOWN"}}]}"#;

fn v1(id: i32, level: u32) -> Value {
    let symbols = ["LOW", "HIGH", "OLD"];
    record(vec![
        ("id", Value::Int(id)),
        ("name", Value::String(format!("u{id}"))),
        (
            "dropped",
            Value::Array(vec![Value::String("x".into()); id as usize]),
        ),
        ("level", Value::Enum(level, symbols[level as usize].into())),
    ])
}

#[test]
fn old_versions_are_read_in_the_latest_shape() {
    let mut cols = AvroColumns::new(V2).unwrap();
    cols.add_writer(1, V1).unwrap();
    cols.add_writer(2, V2).unwrap();
    let w1 = Schema::parse_str(V1).unwrap();
    let w2 = Schema::parse_str(V2).unwrap();
    let new = record(vec![
        ("id", Value::Long(1 << 40)),
        ("full_name", Value::String("new".into())),
        (
            "email",
            Value::Union(1, Box::new(Value::String("a@b".into()))),
        ),
        ("score", Value::Double(9.0)),
        ("level", Value::Enum(1, "HIGH".into())),
    ]);
    // Versions interleave within a chunk; rows stay in order.
    let values = vec![
        frame(1, &w1, v1(5, 0)),
        frame(2, &w2, new),
        frame(1, &w1, v1(7, 2)),
    ];
    let s = decode(&mut cols, &values);
    let ids = field(&s, "id").as_primitive::<Int64Type>();
    assert_eq!(
        ids.values().to_vec(),
        vec![5, 1 << 40, 7],
        "int promoted to long"
    );
    let names = field(&s, "full_name").as_string::<i32>();
    assert_eq!(
        (names.value(0), names.value(1)),
        ("u5", "new"),
        "read by alias"
    );
    let email = field(&s, "email");
    assert!(
        email.is_null(0) && email.is_null(2),
        "added optional field is null"
    );
    assert_eq!(email.as_string::<i32>().value(1), "a@b");
    let score = field(&s, "score").as_primitive::<Float64Type>();
    assert_eq!(
        score.values().to_vec(),
        vec![1.5, 9.0, 1.5],
        "the reader's default"
    );
    let level = field(&s, "level").as_string::<i32>();
    assert_eq!(level.value(0), "LOW");
    assert_eq!(
        level.value(2),
        "UNKNOWN",
        "a symbol the reader lacks takes its default"
    );
    assert!(
        s.column_by_name("dropped").is_none(),
        "a removed field is skipped"
    );
}

#[test]
fn unions_resolve_across_versions() {
    let writer = r#"{"type":"record","name":"R","fields":[
        {"name":"a","type":["null","int"]},
        {"name":"b","type":"int"},
        {"name":"c","type":["int","string"]}]}"#;
    let reader = r#"{"type":"record","name":"R","fields":[
        {"name":"a","type":["null","long"]},
        {"name":"b","type":["null","string","long"]},
        {"name":"c","type":["null","string","long"]}]}"#;
    let mut cols = AvroColumns::new(reader).unwrap();
    cols.add_writer(1, writer).unwrap();
    let w = Schema::parse_str(writer).unwrap();
    let rows = [
        record(vec![
            ("a", Value::Union(1, Box::new(Value::Int(3)))),
            ("b", Value::Int(4)),
            ("c", Value::Union(0, Box::new(Value::Int(5)))),
        ]),
        record(vec![
            ("a", Value::Union(0, Box::new(Value::Null))),
            ("b", Value::Int(6)),
            ("c", Value::Union(1, Box::new(Value::String("s".into())))),
        ]),
    ];
    let values: Vec<Vec<u8>> = rows.into_iter().map(|r| frame(1, &w, r)).collect();
    let s = decode(&mut cols, &values);
    let a = field(&s, "a").as_primitive::<Int64Type>();
    assert_eq!((a.value(0), a.is_null(1)), (3, true));
    let b = field(&s, "b").as_struct();
    assert_eq!(
        b.column_by_name("long")
            .unwrap()
            .as_primitive::<Int64Type>()
            .value(1),
        6
    );
    assert!(b.column_by_name("string").unwrap().is_null(1));
    let c = field(&s, "c").as_struct();
    assert_eq!(
        c.column_by_name("long")
            .unwrap()
            .as_primitive::<Int64Type>()
            .value(0),
        5
    );
    assert_eq!(
        c.column_by_name("string")
            .unwrap()
            .as_string::<i32>()
            .value(1),
        "s"
    );
}

#[test]
fn a_bad_value_fails_its_row_alone() {
    let mut cols = AvroColumns::new(V2).unwrap();
    cols.add_writer(1, V1).unwrap();
    let w1 = Schema::parse_str(V1).unwrap();
    let good = frame(1, &w1, v1(2, 1));
    // Cut inside the array of the dropped field: the id and name were already pushed.
    let truncated = good[..good.len() - 3].to_vec();
    let mut trailing = good.clone();
    trailing.push(0);
    let mut unknown = good.clone();
    unknown[4] = 9;
    let mut bad_enum = good.clone();
    *bad_enum.last_mut().unwrap() = 20; // symbol index 10
    let long_varint = vec![
        0, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,
    ];
    let huge_array = {
        // id 1, name "", then an array claiming 2^40 items.
        let mut v = vec![0, 0, 0, 0, 1, 2, 0];
        v.extend([0x80, 0x80, 0x80, 0x80, 0x80, 0x40]);
        v
    };
    let values: Vec<Option<&[u8]>> = vec![
        Some(&good),
        None,
        Some(b"{\"json\":1}"),
        Some(&unknown),
        Some(&truncated),
        Some(&trailing),
        Some(&[0, 0, 0]),
        Some(&long_varint),
        Some(&huge_array),
        Some(&bad_enum),
        Some(&good),
    ];
    let d = cols.decode(&values).unwrap();
    let rows: Vec<usize> = d.failures.iter().map(|f| f.row).collect();
    assert_eq!(rows, vec![2, 3, 4, 5, 6, 7, 8, 9]);
    let errors: Vec<&FramedError> = d.failures.iter().map(|f| &f.error).collect();
    assert_eq!(errors[0], &FramedError::Magic(b'{'));
    assert_eq!(errors[1], &FramedError::UnknownId(9));
    assert!(
        matches!(errors[2], FramedError::Payload(m) if m.contains("bytes left")),
        "{}",
        errors[2]
    );
    assert_eq!(errors[3], &FramedError::Trailing(1));
    assert_eq!(errors[4], &FramedError::Short(3));
    assert!(matches!(errors[5], FramedError::Payload(m) if m.contains("varint")));
    assert!(matches!(errors[6], FramedError::Payload(m) if m.contains("items")));
    assert!(matches!(errors[7], FramedError::Payload(m) if m.contains("enum")));
    let s = d.column;
    assert_eq!(s.len(), 11);
    for row in 1..10 {
        assert!(s.is_null(row), "row {row}");
    }
    // The good rows are whole, the failed ones left nothing behind.
    let ids = field(&s, "id").as_primitive::<Int64Type>();
    assert_eq!((ids.value(0), ids.value(10)), (2, 2));
    let names = field(&s, "full_name").as_string::<i32>();
    assert_eq!((names.value(0), names.value(10)), ("u2", "u2"));
    assert_eq!(
        names.value_data().len(),
        4,
        "only the two good names' bytes"
    );
    // And the next chunk starts clean.
    let d = cols.decode(&[Some(&good)]).unwrap();
    assert_eq!(d.column.len(), 1);
    assert!(d.failures.is_empty());
}

#[test]
fn schemas_parquet_cannot_hold_are_refused() {
    let recursive = r#"{"type":"record","name":"Node","fields":[
        {"name":"next","type":["null","Node"]}]}"#;
    let e = AvroColumns::new(recursive).unwrap_err();
    assert!(e.contains("recursive"), "{e}");
    let e = AvroColumns::new(r#""string""#).unwrap_err();
    assert!(e.contains("not a record"), "{e}");
    let e = AvroColumns::new(
        r#"{"type":"record","name":"D","fields":[{"name":"d","type":{"type":"bytes","logicalType":"decimal","precision":40,"scale":2}}]}"#,
    )
    .unwrap_err();
    assert!(e.contains("precision 40"), "{e}");
    let e = AvroColumns::new(r#"{"type":"record","name":"E","fields":[]}"#).unwrap_err();
    assert!(e.contains("no fields"), "{e}");
    let mut deep = r#""int""#.to_string();
    for _ in 0..70 {
        deep = format!(r#"{{"type":"array","items":{deep}}}"#);
    }
    let e = AvroColumns::new(&format!(
        r#"{{"type":"record","name":"Deep","fields":[{{"name":"a","type":{deep}}}]}}"#
    ))
    .unwrap_err();
    assert!(e.contains("deeper"), "{e}");
    assert!(AvroColumns::new("not json").is_err());
    // A writer whose data the reader cannot read: a reader field without a default.
    let mut cols = AvroColumns::new(
        r#"{"type":"record","name":"User","fields":[{"name":"id","type":"long"},{"name":"must","type":"string"}]}"#,
    )
    .unwrap();
    let e = cols.add_writer(1, V1).unwrap_err();
    assert!(e.contains("must") && e.contains("default"), "{e}");
    // long cannot narrow to int.
    let mut cols = AvroColumns::new(
        r#"{"type":"record","name":"User","fields":[{"name":"id","type":"int"}]}"#,
    )
    .unwrap();
    assert!(cols.add_writer(1, V2).is_err());
}

#[test]
fn references_are_inlined_into_one_schema() {
    let address = r#"{"type":"record","name":"Address","namespace":"geo","fields":[{"name":"city","type":"string"}]}"#;
    let user = r#"{"type":"record","name":"User","namespace":"app","fields":[
        {"name":"home","type":"geo.Address"},
        {"name":"work","type":["null","geo.Address"],"default":null}]}"#;
    let refs = [("geo.Address".to_string(), address.to_string())];
    let full = inline_references(user, &refs).unwrap();
    Schema::parse_str(&full).unwrap();
    let mut cols = AvroColumns::new(&full).unwrap();
    cols.add_writer(4, &full).unwrap();
    let w = Schema::parse_str_with_list(user, [address]).unwrap().0;
    let value = record(vec![
        ("home", record(vec![("city", Value::String("Oslo".into()))])),
        ("work", Value::Union(0, Box::new(Value::Null))),
    ]);
    let enc =
        apache_avro::to_avro_datum_schemata(&w, vec![&Schema::parse_str(address).unwrap()], value)
            .unwrap();
    let mut v = vec![0, 0, 0, 0, 4];
    v.extend(enc);
    let s = decode(&mut cols, &[v]);
    let home = field(&s, "home").as_struct();
    assert_eq!(home.column(0).as_string::<i32>().value(0), "Oslo");
    assert!(field(&s, "work").is_null(0));
    // Without the reference the schema does not parse.
    assert!(inline_references(user, &[]).is_err());

    // A referenced type without a namespace keeps none inside a namespaced schema; a
    // second use stays a name.
    let point = r#"{"type":"record","name":"Point","fields":[{"name":"x","type":"int"}]}"#;
    let shape = r#"{"type":"record","name":"Shape","namespace":"draw","fields":[
        {"name":"a","type":"Point"},{"name":"b","type":{"type":"array","items":"geo.Address"}},
        {"name":"c","type":"geo.Address"}]}"#;
    let refs = [
        ("Point".to_string(), point.to_string()),
        ("geo.Address".to_string(), address.to_string()),
    ];
    let full = inline_references(shape, &refs).unwrap();
    assert_eq!(full.matches("\"fields\"").count(), 3, "{full}");
    let cols = AvroColumns::new(&full).unwrap();
    let DataType::Struct(f) = cols.data_type() else {
        panic!()
    };
    assert!(matches!(f[0].data_type(), DataType::Struct(p) if p[0].name() == "x"));
    assert!(matches!(f[2].data_type(), DataType::Struct(p) if p[0].name() == "city"));
}

#[test]
fn the_column_survives_a_parquet_round_trip() {
    let mut cols = AvroColumns::new(ALL).unwrap();
    cols.add_writer(1, ALL).unwrap();
    let w = plain(ALL);
    let values: Vec<Option<Vec<u8>>> = (0..5)
        .map(|n| (n != 3).then(|| frame(1, &w, all_value(n))))
        .collect();
    let refs: Vec<Option<&[u8]>> = values.iter().map(|v| v.as_deref()).collect();
    let d = cols.decode(&refs).unwrap();
    assert!(d.failures.is_empty());
    let column = Arc::new(d.column) as Arc<dyn Array>;
    let schema = Arc::new(ArrowSchema::new(vec![Field::new(
        "value",
        cols.data_type(),
        true,
    )]));
    let batch = RecordBatch::try_new(schema.clone(), vec![column]).unwrap();
    let mut file = Vec::new();
    let mut writer = ArrowWriter::try_new(&mut file, schema, None).unwrap();
    writer.write(&batch).unwrap();
    writer.close().unwrap();
    let reader = ParquetRecordBatchReaderBuilder::try_new(bytes::Bytes::from(file))
        .unwrap()
        .build()
        .unwrap();
    let back: Vec<RecordBatch> = reader.map(Result::unwrap).collect();
    assert_eq!(back.len(), 1);
    assert_eq!(back[0], batch);
    assert!(back[0].column(0).is_null(3));
}

/// Garbage after a valid header, and valid values with bytes flipped: every value gets
/// a row, none panics, and the good ones still decode.
#[test]
fn random_bytes_never_panic() {
    let mut cols = AvroColumns::new(ALL).unwrap();
    cols.add_writer(1, ALL).unwrap();
    let good = frame(1, &plain(ALL), all_value(2));
    let mut g = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        g ^= g << 13;
        g ^= g >> 7;
        g ^= g << 17;
        g
    };
    let values: Vec<Vec<u8>> = (0..3000)
        .map(|i| {
            if i % 3 == 0 {
                let mut v = vec![0, 0, 0, 0, 1];
                v.extend((0..next() % 200).map(|_| next() as u8));
                v
            } else {
                let mut v = good.clone();
                for _ in 0..1 + next() % 3 {
                    let at = 5 + (next() as usize) % (v.len() - 5);
                    v[at] = next() as u8;
                }
                v
            }
        })
        .chain(std::iter::once(good.clone()))
        .collect();
    let refs: Vec<Option<&[u8]>> = values.iter().map(|v| Some(v.as_slice())).collect();
    let d = cols.decode(&refs).unwrap();
    assert_eq!(d.column.len(), values.len());
    assert!(d.column.is_valid(values.len() - 1));
    assert!(!d.failures.is_empty());
    assert_eq!(d.column.null_count(), d.failures.len());
}
