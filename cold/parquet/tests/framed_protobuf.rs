//! Confluent-framed Protobuf values -> typed columns (strata_parquet::framed), with
//! descriptors compiled by protox and data encoded by prost-reflect.

#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{Array, AsArray, RecordBatch, StructArray};
use arrow::datatypes::{
    DataType, Field, Float32Type, Float64Type, Int32Type, Int64Type, Schema as ArrowSchema,
    TimeUnit, TimestampMicrosecondType,
};
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use prost::Message;
use prost_reflect::{DynamicMessage, FileDescriptor, MapKey, MessageDescriptor, Value};
use protox::file::{ChainFileResolver, File, FileResolver, GoogleFileResolver};
use strata_parquet::framed::{FramedError, ProtoColumns};

struct Mem(Vec<(String, String)>);

impl FileResolver for Mem {
    fn open_file(&self, name: &str) -> Result<File, protox::Error> {
        match self.0.iter().find(|(n, _)| n == name) {
            Some((n, src)) => File::from_source(n, src),
            None => Err(protox::Error::file_not_found(name)),
        }
    }
}

fn compile(source: &str) -> FileDescriptor {
    let mut chain = ChainFileResolver::new();
    chain.add(Mem(vec![("t.proto".into(), source.into())]));
    chain.add(GoogleFileResolver::new());
    let mut c = protox::Compiler::with_file_resolver(chain);
    c.include_imports(true);
    c.open_file("t.proto").unwrap();
    c.descriptor_pool().get_file_by_name("t.proto").unwrap()
}

fn message(file: &FileDescriptor, name: &str) -> MessageDescriptor {
    file.parent_pool().get_message_by_name(name).unwrap()
}

/// Magic byte, id, the message indexes (zigzag count and indexes), the payload.
fn frame(id: i32, indexes: &[i32], payload: &[u8]) -> Vec<u8> {
    let mut out = vec![0];
    out.extend_from_slice(&id.to_be_bytes());
    if indexes == [0] {
        out.push(0);
    } else {
        out.push((indexes.len() * 2) as u8);
        out.extend(indexes.iter().map(|i| (i * 2) as u8));
    }
    out.extend_from_slice(payload);
    out
}

const SHOP: &str = r#"
syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
import "google/protobuf/duration.proto";
import "google/protobuf/wrappers.proto";
import "google/protobuf/struct.proto";
import "google/protobuf/any.proto";

message Other { string x = 1; }
message Order {
  enum Status { UNKNOWN = 0; PAID = 1; SHIPPED = 2; }
  message Line { string sku = 1; int32 qty = 2; }
  int64 id = 1;
  string customer = 2;
  double total = 3;
  float f = 4;
  bool gift = 5;
  bytes blob = 6;
  int32 i32 = 7;
  sint32 s32 = 8;
  sint64 s64 = 9;
  uint32 u32 = 10;
  uint64 u64 = 11;
  fixed32 fx32 = 12;
  fixed64 fx64 = 13;
  sfixed32 sfx32 = 14;
  sfixed64 sfx64 = 15;
  Status status = 16;
  repeated Line lines = 17;
  map<string, int64> counts = 18;
  optional string note = 19;
  oneof pay { string card = 20; int64 voucher = 21; }
  google.protobuf.Timestamp at = 22;
  google.protobuf.Duration took = 23;
  google.protobuf.Int64Value maybe = 24;
  google.protobuf.StringValue label = 25;
  google.protobuf.Struct extra = 26;
  google.protobuf.Any any = 27;
  repeated int32 nums = 28;
  Line main = 29;
}
"#;

fn full_order(desc: &MessageDescriptor) -> DynamicMessage {
    let pool = desc.parent_pool();
    let sub = |name: &str, fields: Vec<(&str, Value)>| {
        let mut m = DynamicMessage::new(pool.get_message_by_name(name).unwrap());
        for (k, v) in fields {
            m.set_field_by_name(k, v);
        }
        Value::Message(m)
    };
    let mut m = DynamicMessage::new(desc.clone());
    let line = |sku: &str, qty: i32| {
        sub(
            "shop.Order.Line",
            vec![("sku", Value::String(sku.into())), ("qty", Value::I32(qty))],
        )
    };
    let set: Vec<(&str, Value)> = vec![
        ("id", Value::I64(1 << 40)),
        ("customer", Value::String("ann".into())),
        ("total", Value::F64(12.5)),
        ("f", Value::F32(0.25)),
        ("gift", Value::Bool(true)),
        ("blob", Value::Bytes(vec![0, 1, 255].into())),
        ("i32", Value::I32(-5)),
        ("s32", Value::I32(-6)),
        ("s64", Value::I64(-7)),
        ("u32", Value::U32(u32::MAX)),
        ("u64", Value::U64(u64::MAX)),
        ("fx32", Value::U32(9)),
        ("fx64", Value::U64(10)),
        ("sfx32", Value::I32(-11)),
        ("sfx64", Value::I64(-12)),
        ("status", Value::EnumNumber(2)),
        ("lines", Value::List(vec![line("a", 1), line("b", 2)])),
        (
            "counts",
            Value::Map(HashMap::from([(MapKey::String("k".into()), Value::I64(3))])),
        ),
        ("note", Value::String("hi".into())),
        ("voucher", Value::I64(77)),
        (
            "at",
            sub(
                "google.protobuf.Timestamp",
                vec![
                    ("seconds", Value::I64(1_700_000_000)),
                    ("nanos", Value::I32(123_456_789)),
                ],
            ),
        ),
        (
            "took",
            sub(
                "google.protobuf.Duration",
                vec![("seconds", Value::I64(2)), ("nanos", Value::I32(5_000))],
            ),
        ),
        ("maybe", sub("google.protobuf.Int64Value", vec![])),
        (
            "label",
            sub(
                "google.protobuf.StringValue",
                vec![("value", Value::String("L".into()))],
            ),
        ),
        (
            "extra",
            sub(
                "google.protobuf.Struct",
                vec![(
                    "fields",
                    Value::Map(HashMap::from([(
                        MapKey::String("n".into()),
                        sub(
                            "google.protobuf.Value",
                            vec![("number_value", Value::F64(1.5))],
                        ),
                    )])),
                )],
            ),
        ),
        (
            "any",
            sub(
                "google.protobuf.Any",
                vec![
                    (
                        "type_url",
                        Value::String("type.googleapis.com/shop.Other".into()),
                    ),
                    ("value", Value::Bytes(vec![10, 1, b'z'].into())),
                ],
            ),
        ),
        (
            "nums",
            Value::List(vec![Value::I32(1), Value::I32(-2), Value::I32(300)]),
        ),
        ("main", line("m", 9)),
    ];
    for (k, v) in set {
        m.set_field_by_name(k, v);
    }
    m
}

fn field<'a>(s: &'a StructArray, name: &str) -> &'a Arc<dyn Array> {
    s.column_by_name(name)
        .unwrap_or_else(|| panic!("no column {name}"))
}

fn decode_ok(cols: &mut ProtoColumns, values: &[Vec<u8>]) -> StructArray {
    let refs: Vec<Option<&[u8]>> = values.iter().map(|v| Some(v.as_slice())).collect();
    let d = cols.decode(&refs).unwrap();
    assert!(d.failures.is_empty(), "{:?}", d.failures);
    d.column
}

#[test]
fn every_protobuf_type_becomes_its_iceberg_column() {
    let file = compile(SHOP);
    let order = message(&file, "shop.Order");
    let mut cols = ProtoColumns::new(order.clone()).unwrap();
    cols.add_writer(1, file.clone());
    let DataType::Struct(fields) = cols.data_type() else {
        panic!()
    };
    let f = |n: &str| fields.find(n).unwrap().1.clone();
    assert!(!f("id").is_nullable() && f("id").data_type() == &DataType::Int64);
    assert_eq!(f("u32").data_type(), &DataType::Int64);
    assert_eq!(f("s32").data_type(), &DataType::Int32);
    assert_eq!(f("status").data_type(), &DataType::Utf8);
    assert!(f("note").is_nullable(), "proto3 optional");
    assert!(
        f("card").is_nullable() && f("voucher").is_nullable(),
        "oneof members"
    );
    assert!(f("main").is_nullable(), "a message field");
    assert!(matches!(f("lines").data_type(), DataType::List(e) if !e.is_nullable()));
    assert!(matches!(f("counts").data_type(), DataType::Map(_, _)));
    assert_eq!(
        f("at").data_type(),
        &DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()))
    );
    assert_eq!(f("took").data_type(), &DataType::Int64);
    assert!(f("maybe").is_nullable() && f("maybe").data_type() == &DataType::Int64);
    assert_eq!(f("label").data_type(), &DataType::Utf8);
    assert_eq!(f("extra").data_type(), &DataType::Utf8);

    let full = full_order(&order).encode_to_vec();
    let empty = DynamicMessage::new(order.clone()).encode_to_vec();
    let s = decode_ok(&mut cols, &[frame(1, &[1], &full), frame(1, &[1], &empty)]);
    assert_eq!(
        field(&s, "id").as_primitive::<Int64Type>().value(0),
        1 << 40
    );
    assert_eq!(field(&s, "customer").as_string::<i32>().value(0), "ann");
    assert_eq!(
        field(&s, "total").as_primitive::<Float64Type>().value(0),
        12.5
    );
    assert_eq!(field(&s, "f").as_primitive::<Float32Type>().value(0), 0.25);
    assert!(field(&s, "gift").as_boolean().value(0));
    assert_eq!(field(&s, "blob").as_binary::<i32>().value(0), &[0, 1, 255]);
    assert_eq!(field(&s, "i32").as_primitive::<Int32Type>().value(0), -5);
    assert_eq!(field(&s, "s32").as_primitive::<Int32Type>().value(0), -6);
    assert_eq!(field(&s, "s64").as_primitive::<Int64Type>().value(0), -7);
    assert_eq!(
        field(&s, "u32").as_primitive::<Int64Type>().value(0),
        i64::from(u32::MAX)
    );
    assert_eq!(
        field(&s, "u64").as_primitive::<Int64Type>().value(0),
        -1,
        "the bits, as protobuf-java"
    );
    assert_eq!(field(&s, "fx32").as_primitive::<Int64Type>().value(0), 9);
    assert_eq!(field(&s, "fx64").as_primitive::<Int64Type>().value(0), 10);
    assert_eq!(field(&s, "sfx32").as_primitive::<Int32Type>().value(0), -11);
    assert_eq!(field(&s, "sfx64").as_primitive::<Int64Type>().value(0), -12);
    assert_eq!(field(&s, "status").as_string::<i32>().value(0), "SHIPPED");
    let lines = field(&s, "lines").as_list::<i32>();
    let l0 = lines.value(0);
    let l0 = l0.as_struct();
    assert_eq!(l0.column(0).as_string::<i32>().value(1), "b");
    assert_eq!(l0.column(1).as_primitive::<Int32Type>().value(1), 2);
    let counts = field(&s, "counts").as_map();
    assert_eq!(counts.keys().as_string::<i32>().value(0), "k");
    assert_eq!(counts.values().as_primitive::<Int64Type>().value(0), 3);
    assert_eq!(field(&s, "note").as_string::<i32>().value(0), "hi");
    assert!(field(&s, "card").is_null(0));
    assert_eq!(
        field(&s, "voucher").as_primitive::<Int64Type>().value(0),
        77
    );
    assert_eq!(
        field(&s, "at")
            .as_primitive::<TimestampMicrosecondType>()
            .value(0),
        1_700_000_000_123_456
    );
    assert_eq!(
        field(&s, "took").as_primitive::<Int64Type>().value(0),
        2_000_005
    );
    let maybe = field(&s, "maybe");
    assert!(
        maybe.is_valid(0),
        "a present wrapper holding the default is not null"
    );
    assert_eq!(maybe.as_primitive::<Int64Type>().value(0), 0);
    assert_eq!(field(&s, "label").as_string::<i32>().value(0), "L");
    assert_eq!(
        field(&s, "extra").as_string::<i32>().value(0),
        r#"{"n":1.5}"#
    );
    assert_eq!(
        field(&s, "any").as_string::<i32>().value(0),
        r#"{"@type":"type.googleapis.com/shop.Other","value":"CgF6"}"#
    );
    let nums = field(&s, "nums").as_list::<i32>().value(0);
    assert_eq!(
        nums.as_primitive::<Int32Type>().values().to_vec(),
        vec![1, -2, 300],
        "packed"
    );
    let main = field(&s, "main").as_struct();
    assert_eq!(main.column(1).as_primitive::<Int32Type>().value(0), 9);

    // The empty message: proto3 scalars are their defaults, the rest null or empty.
    assert_eq!(field(&s, "id").as_primitive::<Int64Type>().value(1), 0);
    assert!(field(&s, "id").is_valid(1));
    assert_eq!(field(&s, "customer").as_string::<i32>().value(1), "");
    assert_eq!(field(&s, "status").as_string::<i32>().value(1), "UNKNOWN");
    for n in [
        "note", "card", "voucher", "at", "took", "maybe", "label", "extra", "main",
    ] {
        assert!(field(&s, n).is_null(1), "{n}");
    }
    assert_eq!(field(&s, "lines").as_list::<i32>().value_length(1), 0);
    assert_eq!(field(&s, "counts").as_map().value_length(1), 0);
}

#[test]
fn wire_details_decode_as_protobuf_says() {
    let file = compile(SHOP);
    let order = message(&file, "shop.Order");
    let mut cols = ProtoColumns::new(order.clone()).unwrap();
    cols.add_writer(1, file.clone());
    let pool = order.parent_pool().clone();
    let line = pool.get_message_by_name("shop.Order.Line").unwrap();
    let with = |fields: Vec<(&str, Value)>| {
        let mut m = DynamicMessage::new(order.clone());
        for (k, v) in fields {
            m.set_field_by_name(k, v);
        }
        m.encode_to_vec()
    };
    let sub = |fields: Vec<(&str, Value)>| {
        let mut m = DynamicMessage::new(line.clone());
        for (k, v) in fields {
            m.set_field_by_name(k, v);
        }
        Value::Message(m)
    };
    // A message field given twice merges; a scalar given twice keeps the last; a oneof
    // keeps the member set last.
    let mut merged = with(vec![
        ("main", sub(vec![("sku", Value::String("x".into()))])),
        ("customer", Value::String("first".into())),
        ("card", Value::String("4111".into())),
    ]);
    merged.extend(with(vec![
        ("main", sub(vec![("qty", Value::I32(4))])),
        ("customer", Value::String("second".into())),
        ("voucher", Value::I64(5)),
    ]));
    // An enum number the enum lacks, and unpacked repeated numbers.
    let mut odd = with(vec![("status", Value::EnumNumber(7))]);
    odd.extend([0xe0, 0x01, 0x05, 0xe0, 0x01, 0x06]); // field 28 (varint) twice
    // A field the reader does not know, of each wire type, is skipped.
    let mut unknown = with(vec![("id", Value::I64(3))]);
    unknown.extend([0xf8, 0x07, 0x01]); // 127: varint
    unknown.extend([0xf9, 0x07, 1, 2, 3, 4, 5, 6, 7, 8]); // 127: fixed64
    unknown.extend([0xfa, 0x07, 0x02, b'h', b'i']); // 127: bytes
    unknown.extend([0xfd, 0x07, 1, 2, 3, 4]); // 127: fixed32
    unknown.extend([0xfb, 0x07, 0x08, 0x01, 0xfc, 0x07]); // 127: a group
    let s = decode_ok(
        &mut cols,
        &[
            frame(1, &[1], &merged),
            frame(1, &[1], &odd),
            frame(1, &[1], &unknown),
        ],
    );
    let main = field(&s, "main").as_struct();
    assert_eq!(main.column(0).as_string::<i32>().value(0), "x");
    assert_eq!(main.column(1).as_primitive::<Int32Type>().value(0), 4);
    assert_eq!(field(&s, "customer").as_string::<i32>().value(0), "second");
    assert!(field(&s, "card").is_null(0));
    assert_eq!(field(&s, "voucher").as_primitive::<Int64Type>().value(0), 5);
    assert_eq!(field(&s, "status").as_string::<i32>().value(1), "7");
    let nums = field(&s, "nums").as_list::<i32>().value(1);
    assert_eq!(
        nums.as_primitive::<Int32Type>().values().to_vec(),
        vec![5, 6]
    );
    assert_eq!(field(&s, "id").as_primitive::<Int64Type>().value(2), 3);
}

const V1: &str = r#"
syntax = "proto3";
package app;
message User { int64 id = 1; string name = 2; string legacy = 3; int32 age = 5; }
"#;
const V2: &str = r#"
syntax = "proto3";
package app;
message Account { string owner = 1; }
message User {
  int64 id = 1;
  string name = 2;
  reserved 3;
  optional string email = 4;
  int64 age = 5;
  repeated string tags = 6;
}
"#;

#[test]
fn old_versions_decode_with_the_latest_message() {
    let f1 = compile(V1);
    let f2 = compile(V2);
    let mut cols = ProtoColumns::new(message(&f2, "app.User")).unwrap();
    cols.add_writer(10, f1.clone());
    cols.add_writer(11, f2.clone());
    let mut old = DynamicMessage::new(message(&f1, "app.User"));
    old.set_field_by_name("id", Value::I64(1));
    old.set_field_by_name("name", Value::String("old".into()));
    old.set_field_by_name("legacy", Value::String("dropped".into()));
    old.set_field_by_name("age", Value::I32(-30));
    let mut new = DynamicMessage::new(message(&f2, "app.User"));
    new.set_field_by_name("id", Value::I64(2));
    new.set_field_by_name("email", Value::String("a@b".into()));
    new.set_field_by_name("tags", Value::List(vec![Value::String("t".into())]));
    // User is message 0 in v1 and message 1 in v2: each writer's own indexes.
    let s = decode_ok(
        &mut cols,
        &[
            frame(10, &[0], &old.encode_to_vec()),
            frame(11, &[1], &new.encode_to_vec()),
        ],
    );
    assert_eq!(
        field(&s, "id")
            .as_primitive::<Int64Type>()
            .values()
            .to_vec(),
        vec![1, 2]
    );
    assert_eq!(field(&s, "name").as_string::<i32>().value(0), "old");
    let email = field(&s, "email");
    assert!(email.is_null(0), "a field added since is null");
    assert_eq!(email.as_string::<i32>().value(1), "a@b");
    assert_eq!(
        field(&s, "age").as_primitive::<Int64Type>().value(0),
        -30,
        "int32 read as int64"
    );
    assert!(
        s.column_by_name("legacy").is_none(),
        "a removed field is skipped"
    );
    assert_eq!(field(&s, "tags").as_list::<i32>().value_length(0), 0);
}

#[test]
fn a_bad_value_fails_its_row_alone() {
    let f2 = compile(V2);
    let user = message(&f2, "app.User");
    let mut cols = ProtoColumns::new(user.clone()).unwrap();
    cols.add_writer(11, f2.clone());
    let mut m = DynamicMessage::new(user.clone());
    m.set_field_by_name("id", Value::I64(9));
    m.set_field_by_name(
        "tags",
        Value::List(vec![Value::String("a".into()), Value::String("b".into())]),
    );
    m.set_field_by_name("name", Value::String("good".into()));
    let payload = m.encode_to_vec();
    let good = frame(11, &[1], &payload);
    // Cut after the tags (pushed into the list) but inside the name.
    let truncated = frame(11, &[1], &payload[..payload.len() - 2]);
    let other = frame(11, &[0], &payload);
    let unknown = frame(12, &[1], &payload);
    let bad_utf8 = frame(11, &[1], &[0x12, 0x02, 0xff, 0xfe]);
    let wrong_wire = frame(11, &[1], &[0x0d, 1, 2, 3, 4]); // id as fixed32
    let huge_indexes = {
        let mut v = vec![0, 0, 0, 0, 11, 0xfe, 0xff, 0xff, 0xff, 0x0f];
        v.extend_from_slice(&payload);
        v
    };
    let values: Vec<Option<&[u8]>> = vec![
        Some(&good),
        Some(&truncated),
        None,
        Some(&other),
        Some(&unknown),
        Some(&bad_utf8),
        Some(&wrong_wire),
        Some(&huge_indexes),
        Some(b"\x01junk"),
        Some(&good),
    ];
    let d = cols.decode(&values).unwrap();
    let rows: Vec<usize> = d.failures.iter().map(|f| f.row).collect();
    assert_eq!(rows, vec![1, 3, 4, 5, 6, 7, 8]);
    let e: Vec<&FramedError> = d.failures.iter().map(|f| &f.error).collect();
    assert!(matches!(e[0], FramedError::Payload(_)), "{}", e[0]);
    assert_eq!(
        e[1],
        &FramedError::WrongMessage {
            id: 11,
            found: "app.Account".into(),
            expected: "app.User".into()
        }
    );
    assert_eq!(e[2], &FramedError::UnknownId(12));
    assert!(
        matches!(e[3], FramedError::Payload(m) if m.contains("UTF-8")),
        "{}",
        e[3]
    );
    assert!(
        matches!(e[4], FramedError::Payload(m) if m.contains("wire type")),
        "{}",
        e[4]
    );
    assert!(matches!(e[5], FramedError::MessageIndexes(_)), "{}", e[5]);
    assert_eq!(e[6], &FramedError::Magic(1));
    let s = d.column;
    assert_eq!(s.len(), 10);
    assert_eq!(s.null_count(), 8);
    let tags = field(&s, "tags").as_list::<i32>();
    assert_eq!(tags.value_length(0), 2);
    assert_eq!(tags.value_length(9), 2);
    assert_eq!(
        tags.values().len(),
        4,
        "the truncated row's tags were taken back"
    );
    assert_eq!(field(&s, "name").as_string::<i32>().value(9), "good");
}

#[test]
fn messages_parquet_cannot_hold_are_refused() {
    let f = compile("syntax = \"proto3\"; message Node { int32 v = 1; Node next = 2; }");
    let e = ProtoColumns::new(message(&f, "Node")).unwrap_err();
    assert!(e.contains("recursive"), "{e}");
    let f = compile("syntax = \"proto3\"; message A { B b = 1; } message B { repeated A a = 1; }");
    let e = ProtoColumns::new(message(&f, "A")).unwrap_err();
    assert!(e.contains("recursive"), "{e}");
    let f = compile("syntax = \"proto3\"; message E {} message H { E e = 1; }");
    let e = ProtoColumns::new(message(&f, "H")).unwrap_err();
    assert!(e.contains("no fields"), "{e}");
}

#[test]
fn proto2_fields_are_nullable_and_survive_parquet() {
    let f = compile(
        r#"syntax = "proto2"; package p;
           message M { required int64 id = 1; optional string s = 2 [default = "d"];
                       repeated double xs = 3 [packed = true]; map<int32, M2> m = 4; }
           message M2 { optional bool ok = 1; }"#,
    );
    let desc = message(&f, "p.M");
    let mut cols = ProtoColumns::new(desc.clone()).unwrap();
    cols.add_writer(5, f.clone());
    let DataType::Struct(fields) = cols.data_type() else {
        panic!()
    };
    assert!(fields.iter().take(2).all(|f| f.is_nullable()));
    let mut m = DynamicMessage::new(desc.clone());
    m.set_field_by_name("id", Value::I64(4));
    m.set_field_by_name("xs", Value::List(vec![Value::F64(0.5), Value::F64(1.5)]));
    let mut m2 = DynamicMessage::new(message(&f, "p.M2"));
    m2.set_field_by_name("ok", Value::Bool(true));
    m.set_field_by_name(
        "m",
        Value::Map(HashMap::from([(MapKey::I32(3), Value::Message(m2))])),
    );
    let v = frame(5, &[0], &m.encode_to_vec());
    let refs: Vec<Option<&[u8]>> = vec![Some(&v), None, Some(&v)];
    let d = cols.decode(&refs).unwrap();
    assert!(d.failures.is_empty());
    let s = &d.column;
    assert!(
        field(s, "s").is_null(0),
        "absent proto2 optional is null, not its default"
    );
    let map = field(s, "m").as_map();
    assert_eq!(map.keys().as_primitive::<Int32Type>().value(0), 3);
    assert!(map.values().as_struct().column(0).as_boolean().value(0));

    let schema = Arc::new(ArrowSchema::new(vec![Field::new(
        "value",
        cols.data_type(),
        true,
    )]));
    let batch =
        RecordBatch::try_new(schema.clone(), vec![Arc::new(d.column) as Arc<dyn Array>]).unwrap();
    let mut file = Vec::new();
    let mut w = ArrowWriter::try_new(&mut file, schema, None).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
    let back: Vec<RecordBatch> = ParquetRecordBatchReaderBuilder::try_new(bytes::Bytes::from(file))
        .unwrap()
        .build()
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(back, vec![batch]);
}

#[test]
fn the_shop_order_survives_parquet() {
    let file = compile(SHOP);
    let order = message(&file, "shop.Order");
    let mut cols = ProtoColumns::new(order.clone()).unwrap();
    cols.add_writer(1, file);
    let full = frame(1, &[1], &full_order(&order).encode_to_vec());
    let empty = frame(1, &[1], &[]);
    let refs: Vec<Option<&[u8]>> = vec![Some(&full), Some(&empty), None];
    let d = cols.decode(&refs).unwrap();
    assert!(d.failures.is_empty());
    let schema = Arc::new(ArrowSchema::new(vec![Field::new(
        "value",
        cols.data_type(),
        true,
    )]));
    let batch =
        RecordBatch::try_new(schema.clone(), vec![Arc::new(d.column) as Arc<dyn Array>]).unwrap();
    let mut out = Vec::new();
    let mut w = ArrowWriter::try_new(&mut out, schema, None).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
    let back: Vec<RecordBatch> = ParquetRecordBatchReaderBuilder::try_new(bytes::Bytes::from(out))
        .unwrap()
        .build()
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(back, vec![batch]);
}

/// Garbage after a valid header, and valid values with bytes flipped: every value gets
/// a row, none panics, and the good ones still decode.
#[test]
fn random_bytes_never_panic() {
    let file = compile(SHOP);
    let order = message(&file, "shop.Order");
    let mut cols = ProtoColumns::new(order.clone()).unwrap();
    cols.add_writer(1, file);
    let good = frame(1, &[1], &full_order(&order).encode_to_vec());
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
                let mut v = frame(1, &[1], &[]);
                v.extend((0..next() % 200).map(|_| next() as u8));
                v
            } else {
                let mut v = good.clone();
                for _ in 0..1 + next() % 3 {
                    let at = 7 + (next() as usize) % (v.len() - 7);
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
