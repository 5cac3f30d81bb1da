"""Reads a Strata Iceberg table whose files were added, deleted and replaced, with pyiceberg.

usage: check_live.py <path of vN.metadata.json> <expected.json>

expected.json: {"rows": [...], "files": [...], "snapshots": [{"id", "operation", "keys"}]}
  rows       every row of the current snapshot (as check_table.py's rows_of gives them)
  files      the data files the current snapshot holds
  snapshots  every snapshot the table must still have, oldest first, with its operation
             and the (partition, offset) keys a scan of it returns

Prints one "... ok" line per check; exits non-zero on the first failure.
"""

import datetime
import json
import sys

from pyiceberg.table import StaticTable

metadata, expected_path = sys.argv[1], sys.argv[2]
expected = json.load(open(expected_path))
table = StaticTable.from_metadata(metadata)


def rows_of(arrow_table):
    ts = arrow_table.column("timestamp")
    out = []
    for r, t in zip(arrow_table.to_pylist(), ts.to_pylist()):
        if t.tzinfo is None:
            t = t.replace(tzinfo=datetime.timezone.utc)
        out.append({
            "partition": r["partition"],
            "offset": r["offset"],
            "timestamp_ms": int(t.timestamp() * 1000),
            "key": r["key"].hex() if r["key"] is not None else None,
            "value": r["value"].hex() if r["value"] is not None else None,
            "headers": [[h["key"], h["value"].hex() if h["value"] is not None else None] for h in r["headers"]],
        })
    return out


def key(r):
    return (r["partition"], r["offset"])


# The current snapshot: exactly the live files, every row of them once.
files = sorted(t.file.file_path for t in table.scan().plan_files())
assert files == sorted(expected["files"]), (files, expected["files"])
got = sorted(rows_of(table.scan().to_arrow()), key=key)
want = sorted(expected["rows"], key=key)
assert len(got) == len(set(map(key, got))), "a row read twice"
assert len(got) == len(want), f"{len(got)} rows read, {len(want)} live"
for g, w in zip(got, want):
    assert g == w, f"read {g}, wrote {w}"
print(f"live files ok: {len(files)} files, {len(got)} rows")

# Every snapshot the table keeps: its operation, and what a scan of it returns.
snapshots = [s for s in table.snapshots()]
ids = [s.snapshot_id for s in snapshots]
assert ids == [s["id"] for s in expected["snapshots"]], (ids, expected["snapshots"])
for s, w in zip(snapshots, expected["snapshots"]):
    op = s.summary.operation.value
    assert op == w["operation"], (s.snapshot_id, op, w["operation"])
    scan = table.scan(snapshot_id=s.snapshot_id, selected_fields=("partition", "offset"))
    keys = sorted((r["partition"], r["offset"]) for r in scan.to_arrow().to_pylist())
    assert keys == sorted(tuple(k) for k in w["keys"]), f"snapshot {s.snapshot_id} ({op}): {len(keys)} rows, want {len(w['keys'])}"
print("snapshots ok: " + ", ".join(f"{s.summary.operation.value} {len(w['keys'])} rows" for s, w in zip(snapshots, expected["snapshots"])))
