//! Schema-registry values (Confluent-framed Avro and Protobuf) transcoded to Parquet by
//! `strata_parquet::framed`, against a bare arrow writer: the same rows built with Arrow's
//! builders straight from Rust values, written with the same ArrowWriter settings, in the
//! same run (issue 37: at least 0.7x).
//!
//! `cargo bench -p strata-parquet --bench framed`. 100k records of a dozen fields
//! (strings, longs, an enum, a nested record, an array, nullable unions, a timestamp);
//! STRATA_BENCH_ROWS changes the count. After criterion's report the pairs are timed
//! alternately and the ratios printed.
#![allow(clippy::unwrap_used, missing_docs)]

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use apache_avro::types::Value as Avro;
use arrow::array::{
    Array, ArrayRef, BooleanBuilder, Float64Builder, Int32Builder, Int64Builder, ListBuilder,
    RecordBatch, StringBuilder, StructArray, TimestampMicrosecondBuilder,
};
use arrow::datatypes::{DataType, Field, Schema};
use criterion::{Criterion, Throughput};
use parquet::arrow::ArrowWriter;
use prost::Message;
use prost_reflect::{DynamicMessage, MessageDescriptor, Value as Proto};
use protox::file::{ChainFileResolver, File, FileResolver, GoogleFileResolver};
use strata_parquet::framed::{AvroColumns, ProtoColumns};
use strata_parquet::{CHUNK_ROWS, ConvertOptions, writer_properties};

const KINDS: [&str; 4] = ["VIEW", "CLICK", "BUY", "LEAVE"];
const CITIES: [&str; 5] = ["Oslo", "Lima", "Pune", "Kyiv", "Quito"];
const TS0_MS: i64 = 1_700_000_000_000;

/// One event, as a producer holds it before serializing.
struct Event {
    id: i64,
    user: String,
    session: String,
    kind: usize,
    amount: f64,
    count: i32,
    at_ms: i64,
    tags: Vec<String>,
    lat: f64,
    lon: f64,
    city: usize,
    referrer: Option<String>,
    score: Option<i64>,
    flag: bool,
    note: String,
}

fn events(n: usize) -> Vec<Event> {
    let mut g = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        g ^= g << 13;
        g ^= g >> 7;
        g ^= g << 17;
        g
    };
    (0..n)
        .map(|i| {
            let r = next();
            Event {
                id: i as i64,
                user: format!("user-{}", r % 50_000),
                session: format!("{:016x}", next()),
                kind: (r % 4) as usize,
                amount: (r % 100_000) as f64 / 100.0,
                count: (r % 20) as i32,
                at_ms: TS0_MS + i as i64 * 7,
                tags: (0..(r % 4))
                    .map(|t| format!("tag{}", (r >> t) % 30))
                    .collect(),
                lat: (r % 180) as f64 - 90.0,
                lon: (r % 360) as f64 - 180.0,
                city: (r % 5) as usize,
                referrer: (r % 3 == 0).then(|| format!("https://ref.example/{}", r % 1000)),
                score: (r % 2 == 0).then_some((r % 10_000) as i64),
                flag: r % 7 == 0,
                note: format!("note {} for event {i}", r % 97),
            }
        })
        .collect()
}

const AVRO: &str = r#"{"type":"record","name":"Event","namespace":"bench","fields":[
  {"name":"id","type":"long"},
  {"name":"user","type":"string"},
  {"name":"session","type":"string"},
  {"name":"kind","type":{"type":"enum","name":"Kind","symbols":["VIEW","CLICK","BUY","LEAVE"]}},
  {"name":"amount","type":"double"},
  {"name":"count","type":"int"},
  {"name":"at","type":{"type":"long","logicalType":"timestamp-millis"}},
  {"name":"tags","type":{"type":"array","items":"string"}},
  {"name":"geo","type":{"type":"record","name":"Geo","fields":[
    {"name":"lat","type":"double"},{"name":"lon","type":"double"},{"name":"city","type":"string"}]}},
  {"name":"referrer","type":["null","string"],"default":null},
  {"name":"score","type":["null","long"],"default":null},
  {"name":"flag","type":"boolean"},
  {"name":"note","type":"string"}
]}"#;

const PROTO: &str = r#"
syntax = "proto3";
package bench;
import "google/protobuf/timestamp.proto";
message Event {
  enum Kind { VIEW = 0; CLICK = 1; BUY = 2; LEAVE = 3; }
  message Geo { double lat = 1; double lon = 2; string city = 3; }
  int64 id = 1;
  string user = 2;
  string session = 3;
  Kind kind = 4;
  double amount = 5;
  int32 count = 6;
  google.protobuf.Timestamp at = 7;
  repeated string tags = 8;
  Geo geo = 9;
  optional string referrer = 10;
  optional int64 score = 11;
  bool flag = 12;
  string note = 13;
}
"#;

fn framed(id: i32, extra: &[u8], payload: Vec<u8>) -> Vec<u8> {
    let mut v = vec![0];
    v.extend_from_slice(&id.to_be_bytes());
    v.extend_from_slice(extra);
    v.extend(payload);
    v
}

fn avro_values(evs: &[Event]) -> Vec<Vec<u8>> {
    // apache-avro encodes the plain wire types; the timestamp is a long of milliseconds.
    let schema = apache_avro::Schema::parse_str(&AVRO.replace(
        r#"{"type":"long","logicalType":"timestamp-millis"}"#,
        r#""long""#,
    ))
    .unwrap();
    evs.iter()
        .map(|e| {
            let s = |x: &str| Avro::String(x.to_string());
            let v = Avro::Record(vec![
                ("id".into(), Avro::Long(e.id)),
                ("user".into(), s(&e.user)),
                ("session".into(), s(&e.session)),
                (
                    "kind".into(),
                    Avro::Enum(e.kind as u32, KINDS[e.kind].into()),
                ),
                ("amount".into(), Avro::Double(e.amount)),
                ("count".into(), Avro::Int(e.count)),
                ("at".into(), Avro::Long(e.at_ms)),
                (
                    "tags".into(),
                    Avro::Array(e.tags.iter().map(|t| s(t)).collect()),
                ),
                (
                    "geo".into(),
                    Avro::Record(vec![
                        ("lat".into(), Avro::Double(e.lat)),
                        ("lon".into(), Avro::Double(e.lon)),
                        ("city".into(), s(CITIES[e.city])),
                    ]),
                ),
                (
                    "referrer".into(),
                    match &e.referrer {
                        Some(r) => Avro::Union(1, Box::new(s(r))),
                        None => Avro::Union(0, Box::new(Avro::Null)),
                    },
                ),
                (
                    "score".into(),
                    match e.score {
                        Some(x) => Avro::Union(1, Box::new(Avro::Long(x))),
                        None => Avro::Union(0, Box::new(Avro::Null)),
                    },
                ),
                ("flag".into(), Avro::Boolean(e.flag)),
                ("note".into(), s(&e.note)),
            ]);
            framed(1, &[], apache_avro::to_avro_datum(&schema, v).unwrap())
        })
        .collect()
}

struct Mem(String);

impl FileResolver for Mem {
    fn open_file(&self, name: &str) -> Result<File, protox::Error> {
        if name == "bench.proto" {
            File::from_source(name, &self.0)
        } else {
            Err(protox::Error::file_not_found(name))
        }
    }
}

fn proto_descriptor() -> (MessageDescriptor, prost_reflect::FileDescriptor) {
    let mut chain = ChainFileResolver::new();
    chain.add(Mem(PROTO.to_string()));
    chain.add(GoogleFileResolver::new());
    let mut c = protox::Compiler::with_file_resolver(chain);
    c.include_imports(true);
    c.open_file("bench.proto").unwrap();
    let pool = c.descriptor_pool();
    let file = pool.get_file_by_name("bench.proto").unwrap();
    (pool.get_message_by_name("bench.Event").unwrap(), file)
}

fn proto_values(evs: &[Event], desc: &MessageDescriptor) -> Vec<Vec<u8>> {
    let pool = desc.parent_pool();
    let ts = pool
        .get_message_by_name("google.protobuf.Timestamp")
        .unwrap();
    let geo = pool.get_message_by_name("bench.Event.Geo").unwrap();
    evs.iter()
        .map(|e| {
            let mut m = DynamicMessage::new(desc.clone());
            let s = |x: &str| Proto::String(x.to_string());
            m.set_field_by_name("id", Proto::I64(e.id));
            m.set_field_by_name("user", s(&e.user));
            m.set_field_by_name("session", s(&e.session));
            m.set_field_by_name("kind", Proto::EnumNumber(e.kind as i32));
            m.set_field_by_name("amount", Proto::F64(e.amount));
            m.set_field_by_name("count", Proto::I32(e.count));
            let mut t = DynamicMessage::new(ts.clone());
            t.set_field_by_name("seconds", Proto::I64(e.at_ms / 1000));
            t.set_field_by_name("nanos", Proto::I32((e.at_ms % 1000) as i32 * 1_000_000));
            m.set_field_by_name("at", Proto::Message(t));
            m.set_field_by_name("tags", Proto::List(e.tags.iter().map(|x| s(x)).collect()));
            let mut g = DynamicMessage::new(geo.clone());
            g.set_field_by_name("lat", Proto::F64(e.lat));
            g.set_field_by_name("lon", Proto::F64(e.lon));
            g.set_field_by_name("city", s(CITIES[e.city]));
            m.set_field_by_name("geo", Proto::Message(g));
            if let Some(r) = &e.referrer {
                m.set_field_by_name("referrer", s(r));
            }
            if let Some(x) = e.score {
                m.set_field_by_name("score", Proto::I64(x));
            }
            m.set_field_by_name("flag", Proto::Bool(e.flag));
            m.set_field_by_name("note", s(&e.note));
            // Message indexes [0]: the file's first message.
            framed(2, &[0], m.encode_to_vec())
        })
        .collect()
}

/// A decoder: values in, the struct column out.
type Decode<'a> = dyn FnMut(&[Option<&[u8]>]) -> StructArray + 'a;

fn props() -> parquet::file::properties::WriterProperties {
    writer_properties(&ConvertOptions::new("bench", 0)).unwrap()
}

fn schema_of(dt: &DataType) -> Arc<Schema> {
    Arc::new(Schema::new(vec![Field::new("value", dt.clone(), true)]))
}

/// Decoder output to Parquet, a chunk at a time as the converter does.
fn transcode(
    values: &[Vec<u8>],
    dt: &DataType,
    mut decode: impl FnMut(&[Option<&[u8]>]) -> StructArray,
) -> usize {
    let schema = schema_of(dt);
    let mut w = ArrowWriter::try_new(Vec::new(), schema.clone(), Some(props())).unwrap();
    for chunk in values.chunks(CHUNK_ROWS) {
        let refs: Vec<Option<&[u8]>> = chunk.iter().map(|v| Some(v.as_slice())).collect();
        let col = decode(&refs);
        let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(col)]).unwrap();
        w.write(&batch).unwrap();
    }
    w.into_inner().unwrap().len()
}

/// The same rows built with Arrow's builders from the Rust values, shaped as `dt` (the
/// decoder's type, so both files have one schema), written the same way.
fn bare(evs: &[Event], dt: &DataType) -> usize {
    let DataType::Struct(fields) = dt else {
        panic!("not a struct")
    };
    let DataType::Struct(geo_fields) = fields[8].data_type() else {
        panic!("geo is not a struct")
    };
    let schema = schema_of(dt);
    let mut w = ArrowWriter::try_new(Vec::new(), schema.clone(), Some(props())).unwrap();
    for chunk in evs.chunks(CHUNK_ROWS) {
        let n = chunk.len();
        let mut id = Int64Builder::with_capacity(n);
        let mut user = StringBuilder::new();
        let mut session = StringBuilder::new();
        let mut kind = StringBuilder::new();
        let mut amount = Float64Builder::with_capacity(n);
        let mut count = Int32Builder::with_capacity(n);
        let mut at = TimestampMicrosecondBuilder::with_capacity(n).with_timezone("UTC");
        let mut tags = ListBuilder::new(StringBuilder::new()).with_field(Arc::new(Field::new(
            "element",
            DataType::Utf8,
            false,
        )));
        let (mut lat, mut lon) = (
            Float64Builder::with_capacity(n),
            Float64Builder::with_capacity(n),
        );
        let mut city = StringBuilder::new();
        let mut referrer = StringBuilder::new();
        let mut score = Int64Builder::with_capacity(n);
        let mut flag = BooleanBuilder::with_capacity(n);
        let mut note = StringBuilder::new();
        for e in chunk {
            id.append_value(e.id);
            user.append_value(&e.user);
            session.append_value(&e.session);
            kind.append_value(KINDS[e.kind]);
            amount.append_value(e.amount);
            count.append_value(e.count);
            at.append_value(e.at_ms * 1000);
            for t in &e.tags {
                tags.values().append_value(t);
            }
            tags.append(true);
            lat.append_value(e.lat);
            lon.append_value(e.lon);
            city.append_value(CITIES[e.city]);
            referrer.append_option(e.referrer.as_deref());
            score.append_option(e.score);
            flag.append_value(e.flag);
            note.append_value(&e.note);
        }
        let geo = StructArray::try_new(
            geo_fields.clone(),
            vec![
                Arc::new(lat.finish()),
                Arc::new(lon.finish()),
                Arc::new(city.finish()),
            ],
            None,
        )
        .unwrap();
        let columns: Vec<ArrayRef> = vec![
            Arc::new(id.finish()),
            Arc::new(user.finish()),
            Arc::new(session.finish()),
            Arc::new(kind.finish()),
            Arc::new(amount.finish()),
            Arc::new(count.finish()),
            Arc::new(at.finish()),
            Arc::new(tags.finish()),
            Arc::new(geo),
            Arc::new(referrer.finish()),
            Arc::new(score.finish()),
            Arc::new(flag.finish()),
            Arc::new(note.finish()),
        ];
        let value = StructArray::try_new(fields.clone(), columns, None).unwrap();
        let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(value)]).unwrap();
        w.write(&batch).unwrap();
    }
    w.into_inner().unwrap().len()
}

fn main() {
    // `cargo bench` passes --bench; without it (`cargo test --benches`) criterion runs each
    // benchmark once as a test: keep that quick.
    let test_mode = !std::env::args().any(|a| a == "--bench");
    let rows = std::env::var("STRATA_BENCH_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if test_mode { 2_000 } else { 100_000 });
    let evs = events(rows);

    let avro_in = avro_values(&evs);
    let mut avro = AvroColumns::new(AVRO).unwrap();
    avro.add_writer(1, AVRO).unwrap();
    let avro_dt = avro.data_type();
    let (desc, file) = proto_descriptor();
    let proto_in = proto_values(&evs, &desc);
    let mut proto = ProtoColumns::new(desc).unwrap();
    proto.add_writer(2, file);
    let proto_dt = proto.data_type();

    let mut avro_decode = move |v: &[Option<&[u8]>]| {
        let d = avro.decode(v).unwrap();
        assert!(d.failures.is_empty(), "{:?}", d.failures.first());
        d.column
    };
    let mut proto_decode = move |v: &[Option<&[u8]>]| {
        let d = proto.decode(v).unwrap();
        assert!(d.failures.is_empty(), "{:?}", d.failures.first());
        d.column
    };
    let bytes = |v: &[Vec<u8>]| v.iter().map(Vec::len).sum::<usize>();
    println!(
        "{rows} records: Avro {} bytes, Protobuf {} bytes framed; parquet bytes: avro {} / bare {}, protobuf {} / bare {}",
        bytes(&avro_in),
        bytes(&proto_in),
        transcode(&avro_in, &avro_dt, &mut avro_decode),
        bare(&evs, &avro_dt),
        transcode(&proto_in, &proto_dt, &mut proto_decode),
        bare(&evs, &proto_dt),
    );

    // STRATA_BENCH_PROFILE=avro|protobuf: decode only, in a loop, for a profiler.
    if let Ok(which) = std::env::var("STRATA_BENCH_PROFILE") {
        for _ in 0..150 {
            for chunk in if which == "avro" { &avro_in } else { &proto_in }.chunks(CHUNK_ROWS) {
                let refs: Vec<Option<&[u8]>> = chunk.iter().map(|v| Some(v.as_slice())).collect();
                if which == "avro" {
                    black_box(avro_decode(&refs));
                } else {
                    black_box(proto_decode(&refs));
                }
            }
        }
        return;
    }

    let mut c = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(5))
        .configure_from_args();
    {
        let mut g = c.benchmark_group("framed");
        g.throughput(Throughput::Elements(rows as u64));
        g.bench_function("avro_transcode", |b| {
            b.iter(|| black_box(transcode(&avro_in, &avro_dt, &mut avro_decode)))
        });
        g.bench_function("avro_bare_arrow_writer", |b| {
            b.iter(|| black_box(bare(&evs, &avro_dt)))
        });
        g.bench_function("protobuf_transcode", |b| {
            b.iter(|| black_box(transcode(&proto_in, &proto_dt, &mut proto_decode)))
        });
        g.bench_function("protobuf_bare_arrow_writer", |b| {
            b.iter(|| black_box(bare(&evs, &proto_dt)))
        });
        g.finish();
    }
    c.final_summary();
    if test_mode {
        return;
    }

    // Alternate each pair so both see the same machine state; report medians.
    let rounds = 7;
    let median = |mut v: Vec<Duration>| {
        v.sort();
        v[v.len() / 2]
    };
    let pair = |name: &str,
                mut t: Box<dyn FnMut() -> usize + '_>,
                mut b: Box<dyn FnMut() -> usize + '_>,
                mut decode_only: Box<dyn FnMut() -> usize + '_>| {
        let (mut tt, mut tb, mut td) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..rounds {
            let s = Instant::now();
            black_box(t());
            tt.push(s.elapsed());
            let s = Instant::now();
            black_box(b());
            tb.push(s.elapsed());
            let s = Instant::now();
            black_box(decode_only());
            td.push(s.elapsed());
        }
        let (mt, mb, md) = (median(tt), median(tb), median(td));
        let krps = |d: Duration| rows as f64 / d.as_secs_f64() / 1e3;
        println!(
            "{name}, median of {rounds}: transcode {:.1} ms ({:.0}k records/s), bare {:.1} ms ({:.0}k records/s), ratio {:.2}x (target >= 0.70x); decoding alone {:.1} ms",
            mt.as_secs_f64() * 1e3,
            krps(mt),
            mb.as_secs_f64() * 1e3,
            krps(mb),
            mb.as_secs_f64() / mt.as_secs_f64(),
            md.as_secs_f64() * 1e3,
        );
    };
    // Decoding alone: the columns built, no Parquet written.
    fn decode_only(values: &[Vec<u8>], decode: &mut Decode<'_>) -> usize {
        values
            .chunks(CHUNK_ROWS)
            .map(|chunk| {
                let refs: Vec<Option<&[u8]>> = chunk.iter().map(|v| Some(v.as_slice())).collect();
                decode(&refs).len()
            })
            .sum()
    }
    let avro_decode = std::cell::RefCell::new(avro_decode);
    let proto_decode = std::cell::RefCell::new(proto_decode);
    pair(
        "avro",
        Box::new(|| transcode(&avro_in, &avro_dt, &mut *avro_decode.borrow_mut())),
        Box::new(|| bare(&evs, &avro_dt)),
        Box::new(|| decode_only(&avro_in, &mut *avro_decode.borrow_mut())),
    );
    pair(
        "protobuf",
        Box::new(|| transcode(&proto_in, &proto_dt, &mut *proto_decode.borrow_mut())),
        Box::new(|| bare(&evs, &proto_dt)),
        Box::new(|| decode_only(&proto_in, &mut *proto_decode.borrow_mut())),
    );
}
