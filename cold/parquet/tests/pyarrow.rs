//! pyarrow, a reader that shares no code with us, reads the files (tests/pyarrow_check.py).
//! Needs python3 with pyarrow (scripts/deps installs it); fails, not skips, without it.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::process::Command;

use common::*;
use serde_json::json;
use strata_parquet::{ConvertOptions, ValueFormat, ValueSchema, convert_segment};
use strata_proto::Compression;
use strata_proto::batch::build::{NewRecord, ProducerFields};

fn python() -> String {
    std::env::var("STRATA_PYTHON").unwrap_or_else(|_| "python3".to_string())
}

fn hex(b: &Option<bytes::Bytes>) -> serde_json::Value {
    match b {
        None => serde_json::Value::Null,
        Some(b) => b
            .iter()
            .map(|x| format!("{x:02x}"))
            .collect::<String>()
            .into(),
    }
}

fn write(path: &Path, bytes: &[u8]) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn pyarrow_reads_the_files() {
    let py = python();
    let probe = Command::new(&py)
        .args(["-c", "import pyarrow"])
        .output()
        .unwrap_or_else(|e| panic!("cannot run {py} ({e}): install python3 (scripts/deps)"));
    assert!(
        probe.status.success(),
        "pyarrow is missing for {py}: run scripts/deps, or `python3 -m pip install pyarrow==23.0.1` \
         ({})",
        String::from_utf8_lossy(&probe.stderr).trim()
    );

    let dir = tempfile::tempdir().unwrap();
    let ts0 = 1_700_000_000_000;

    // Binary values: every codec, producers on some batches.
    let mut seg = SegmentBuilder::starting_at(300);
    let mut samples = Vec::new();
    for (b, codec) in CODECS.iter().enumerate() {
        let records = varied_records(30, b as u64 + 1, ts0 + b as i64 * 1000);
        let producer = (b % 2 == 0).then_some(ProducerFields {
            producer_id: 77,
            producer_epoch: 1,
            base_sequence: b as i32 * 30,
        });
        let first = seg.append_records(&records, *codec, producer);
        for (i, r) in records.iter().enumerate().step_by(7) {
            samples.push(json!({
                "offset": first + i as i64,
                "timestamp": r.timestamp,
                "key": hex(&r.key),
                "value": hex(&r.value),
                "headers": r.headers.iter().map(|(k, v)| json!([k, hex(v)])).collect::<Vec<_>>(),
                "producer_id": producer.map(|p| p.producer_id),
                "sequence": producer.map(|p| p.base_sequence + i as i32),
            }));
        }
    }
    let file = convert_segment(&seg.bytes, &ConvertOptions::new("py", 4)).unwrap();
    write(&dir.path().join("binary.parquet"), &file.bytes);
    let s = &file.summary;

    // JSON values, one of which does not fit.
    let schema = r#"{"fields":[{"name":"user","type":"utf8"},{"name":"n","type":"int64","nullable":true},
        {"name":"at","type":"timestamp_ms","nullable":true}]}"#;
    let values = [
        r#"{"user":"ann","n":1,"at":1700000000000}"#,
        r#"{"user":"bob","n":"two"}"#,
        r#"{"user":"cy"}"#,
    ];
    let mut jseg = SegmentBuilder::default();
    jseg.append_records(
        &values
            .iter()
            .map(|v| NewRecord::value(v.to_string(), ts0))
            .collect::<Vec<_>>(),
        Compression::Snappy,
        None,
    );
    let mut o = ConvertOptions::new("py", 0);
    o.value_format = ValueFormat::Json(ValueSchema::parse(schema).unwrap());
    let jfile = convert_segment(&jseg.bytes, &o).unwrap();
    write(&dir.path().join("json.parquet"), &jfile.bytes);

    // The Hive layout of issue 7, two partitions, read as one dataset.
    let mut hive_rows = 0;
    for p in 0..2 {
        let mut hseg = SegmentBuilder::default();
        hseg.append_records(&varied_records(10 + p, 9, ts0), Compression::Zstd, None);
        let f = convert_segment(&hseg.bytes, &ConvertOptions::new("py", p as i32)).unwrap();
        hive_rows += f.summary.rows;
        write(
            &dir.path().join(format!(
                "hive/topic=py/partition={p}/date=2023-11-14/0-{}.parquet",
                9 + p
            )),
            &f.bytes,
        );
    }

    let expect = json!({
        "binary": {
            "rows": s.rows, "topic": "py", "partition": 4,
            "first_offset": s.first_offset, "last_offset": s.last_offset, "samples": samples,
        },
        "json": [
            {"raw": null, "user": "ann", "n": 1},
            {"raw": values[1]},
            {"raw": null, "user": "cy", "n": null},
        ],
        "hive_rows": hive_rows,
    });
    std::fs::write(dir.path().join("expect.json"), expect.to_string()).unwrap();

    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/pyarrow_check.py");
    let out = Command::new(&py)
        .arg(&script)
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "pyarrow_check.py failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    println!("{}", String::from_utf8_lossy(&out.stdout).trim());
}
