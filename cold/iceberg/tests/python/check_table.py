"""Reads a Strata Iceberg table with pyiceberg and checks it against what was written.

usage: check_table.py <path of vN.metadata.json> <expected.json> <day0 start, ms>

Prints one "... ok" line per check; exits non-zero on the first failure.
"""

import datetime
import json
import sys

from pyiceberg.expressions import And, GreaterThanOrEqual, LessThan
from pyiceberg.table import StaticTable

metadata, expected_path, day0_ms = sys.argv[1], sys.argv[2], int(sys.argv[3])
expected = json.load(open(expected_path))
table = StaticTable.from_metadata(metadata)

# Schema: every column, timestamp as timestamptz.
names = [f.name for f in table.schema().fields]
assert names == ["partition", "offset", "timestamp", "key", "value", "headers", "producer_id", "sequence"], names
assert str(table.schema().find_field("timestamp").field_type) == "timestamptz", table.schema()
mapping = json.loads(table.properties["schema.name-mapping.default"])
assert [m["names"] for m in mapping][:3] == [["partition"], ["offset"], ["timestamp"]], mapping
assert table.name_mapping() is not None
print("schema ok")


def rows_of(arrow_table):
    ts = arrow_table.column("timestamp")
    assert str(ts.type).startswith("timestamp"), ts.type
    out = []
    for r, t in zip(arrow_table.to_pylist(), ts.to_pylist()):
        out.append({
            "partition": r["partition"],
            "offset": r["offset"],
            "timestamp_ms": int(t.timestamp() * 1000) if t.tzinfo else int(t.replace(tzinfo=datetime.timezone.utc).timestamp() * 1000),
            "key": r["key"].hex() if r["key"] is not None else None,
            "value": r["value"].hex() if r["value"] is not None else None,
            "headers": [[h["key"], h["value"].hex() if h["value"] is not None else None] for h in r["headers"]],
        })
    return out


def check_same(got, want, what):
    keys = [(r["partition"], r["offset"]) for r in got]
    assert len(keys) == len(set(keys)), f"{what}: a record read twice"
    got = sorted(got, key=lambda r: (r["partition"], r["offset"]))
    want = sorted(want, key=lambda r: (r["partition"], r["offset"]))
    assert len(got) == len(want), f"{what}: {len(got)} rows, {len(want)} written"
    for g, w in zip(got, want):
        assert g == w, f"{what}: read {g}, wrote {w}"


all_files = list(table.scan().plan_files())
check_same(rows_of(table.scan().to_arrow()), expected, "full scan")
offsets = {}
for r in expected:
    offsets.setdefault(r["partition"], []).append(r["offset"])
print(f"records ok: {len(expected)} rows in {len(all_files)} files, offsets per partition " +
      ", ".join(f"{p}: {min(o)}..{max(o)}" for p, o in sorted(offsets.items())))

day0 = datetime.datetime.fromtimestamp(day0_ms / 1000, datetime.timezone.utc)
day1 = day0 + datetime.timedelta(days=1)
row_filter = And(GreaterThanOrEqual("timestamp", day0.isoformat()), LessThan("timestamp", day1.isoformat()))
day_files = list(table.scan(row_filter=row_filter).plan_files())
assert len(day_files) < len(all_files), (len(day_files), len(all_files))
assert len(day_files) == 2, [f.file.file_path for f in day_files]
print(f"pruning ok: {len(day_files)} of {len(all_files)} files for one day")

want_day0 = [r for r in expected if day0_ms <= r["timestamp_ms"] < day0_ms + 86_400_000]
check_same(rows_of(table.scan(row_filter=row_filter).to_arrow()), want_day0, "day-0 scan")
print(f"filtered records ok: {len(want_day0)} rows")
