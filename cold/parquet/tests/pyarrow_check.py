"""Reads Parquet files written by strata-parquet with pyarrow, an independent reader.

Called by tests/pyarrow.rs as: python3 pyarrow_check.py DIR, where DIR holds
expect.json (what the Rust side built), binary.parquet, json.parquet and a Hive-style
tree under hive/. Exits non-zero with a message on the first mismatch.
"""

import json
import os
import sys

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq


def check(cond, msg):
    if not cond:
        print(f"pyarrow check failed: {msg}", file=sys.stderr)
        sys.exit(1)


def unhex(v):
    return None if v is None else bytes.fromhex(v)


def check_binary(path, want):
    table = pq.read_table(path)
    check(table.num_rows == want["rows"], f"rows {table.num_rows} != {want['rows']}")
    schema = table.schema
    check(schema.field("partition").type == pa.int32(), f"partition type {schema.field('partition').type}")
    check(schema.field("offset").type == pa.int64(), "offset type")
    ts = schema.field("timestamp").type
    check(pa.types.is_timestamp(ts) and ts.unit == "ms" and ts.tz == "UTC", f"timestamp type {ts}")
    check(schema.field("key").type == pa.binary(), "key type")
    check(schema.field("value").type == pa.binary(), "value type")
    headers = schema.field("headers").type
    check(pa.types.is_list(headers), f"headers type {headers}")
    item = headers.value_type
    check(item.field("key").type == pa.string() and item.field("value").type == pa.binary(),
          f"header struct {item}")
    check(schema.field("producer_id").type == pa.int64(), "producer_id type")
    check(schema.field("sequence").type == pa.int32(), "sequence type")

    offsets = table.column("offset").to_pylist()
    check(offsets == list(range(want["first_offset"], want["first_offset"] + want["rows"])),
          "offsets are not contiguous from first_offset")
    check(set(table.column("partition").to_pylist()) == {want["partition"]}, "partition values")

    rows = table.to_pylist()
    for w in want["samples"]:
        r = rows[w["offset"] - want["first_offset"]]
        check(r["offset"] == w["offset"], f"offset {r['offset']}")
        got_ts = int(r["timestamp"].timestamp() * 1000)
        check(got_ts == w["timestamp"], f"timestamp at {w['offset']}: {got_ts} != {w['timestamp']}")
        check(r["key"] == unhex(w["key"]), f"key at {w['offset']}")
        check(r["value"] == unhex(w["value"]), f"value at {w['offset']}")
        got_headers = [(h["key"], h["value"]) for h in r["headers"]]
        want_headers = [(k, unhex(v)) for k, v in w["headers"]]
        check(got_headers == want_headers, f"headers at {w['offset']}: {got_headers} != {want_headers}")
        check(r["producer_id"] == w["producer_id"], f"producer_id at {w['offset']}")
        check(r["sequence"] == w["sequence"], f"sequence at {w['offset']}")

    meta = pq.read_metadata(path)
    kv = {k.decode(): v.decode() for k, v in (meta.metadata or {}).items()}
    check(kv.get("strata.topic") == want["topic"], f"metadata topic {kv.get('strata.topic')}")
    check(kv.get("strata.partition") == str(want["partition"]), "metadata partition")
    check(kv.get("strata.first_offset") == str(want["first_offset"]), "metadata first_offset")
    check(kv.get("strata.last_offset") == str(want["last_offset"]), "metadata last_offset")
    rg = meta.row_group(0)
    names = [rg.column(i).path_in_schema for i in range(rg.num_columns)]
    for name in ("offset", "timestamp"):
        col = rg.column(names.index(name))
        check(col.is_stats_set and col.statistics.has_min_max, f"{name} statistics")
        check(col.compression == "ZSTD", f"{name} compression {col.compression}")
    off = rg.column(names.index("offset")).statistics
    check(off.min == want["first_offset"] and off.max == want["last_offset"], "offset min/max")
    return table.num_rows


def check_json(path, want):
    table = pq.read_table(path)
    check(table.num_rows == len(want), f"json rows {table.num_rows} != {len(want)}")
    value = table.schema.field("value").type
    check(pa.types.is_struct(value), f"value type {value}")
    check(value.field("user").type == pa.string(), "user type")
    check(value.field("n").type == pa.int64(), "n type")
    at = value.field("at").type
    check(pa.types.is_timestamp(at) and at.tz == "UTC", f"at type {at}")
    rows = table.to_pylist()
    for r, w in zip(rows, want):
        if w["raw"] is not None:
            check(r["value"] is None, f"misfit value {r}")
            check(r["_raw"] == w["raw"].encode(), f"_raw {r['_raw']!r}")
        else:
            check(r["_raw"] is None, f"_raw set for a good row {r}")
            check(r["value"]["user"] == w["user"], f"user {r['value']}")
            check(r["value"]["n"] == w["n"], f"n {r['value']}")


def check_hive(root, want_rows):
    # The layout of issue 7: topic=/partition=/date= directories, read as one table.
    dataset = ds.dataset(root, format="parquet", partitioning="hive")
    table = dataset.to_table()
    check(table.num_rows == want_rows, f"hive rows {table.num_rows} != {want_rows}")
    parts = sorted(set(table.column("partition").to_pylist()))
    check(parts == [0, 1], f"hive partitions {parts}")


def main():
    d = sys.argv[1]
    with open(os.path.join(d, "expect.json")) as f:
        want = json.load(f)
    n = check_binary(os.path.join(d, "binary.parquet"), want["binary"])
    check_json(os.path.join(d, "json.parquet"), want["json"])
    check_hive(os.path.join(d, "hive"), want["hive_rows"])
    print(f"pyarrow {pa.__version__}: {n} rows, JSON and Hive layout OK")


if __name__ == "__main__":
    main()
