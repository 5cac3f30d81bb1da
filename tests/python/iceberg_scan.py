"""Scans a Strata Iceberg table with pyiceberg, as a warehouse loader would.

usage: iceberg_scan.py <table directory (…/iceberg/TOPIC) | metadata location> [PROP=VALUE…]
                       [--since MS]
       iceberg_scan.py <REST catalog URI (http://…)> <namespace.table> [--since MS]

Given a local table directory, finds the current metadata through
metadata/version-hint.text (as Iceberg's file-system tables do); given a metadata
location (s3://…/vN.metadata.json), loads that, with the FileIO properties given
(s3.endpoint, s3.access-key-id, …). Prints one JSON object: the number of data files the
scan plans, and every row as [partition, offset, key, value, timestamp_ms]. With
--since, the scan is filtered to timestamps at or after MS (milliseconds since the
epoch), so the plan holds only the files whose statistics allow such rows. Given a REST
catalog's URI, loads the table through the catalog (pyiceberg's RestCatalog).
"""

import datetime
import json
import os
import sys

from pyiceberg.expressions import AlwaysTrue, GreaterThanOrEqual
from pyiceberg.table import StaticTable

args = sys.argv[1:]
row_filter = AlwaysTrue()
if "--since" in args:
    i = args.index("--since")
    since = datetime.datetime.fromtimestamp(int(args[i + 1]) / 1000, tz=datetime.timezone.utc)
    row_filter = GreaterThanOrEqual("timestamp", since.isoformat())
    del args[i : i + 2]
where = args[0]
if where.startswith(("http://", "https://")):
    from strata_table import load

    table, _ = load(args)
else:
    properties = dict(arg.split("=", 1) for arg in args[1:])
    if os.path.isdir(where):
        hint = open(os.path.join(where, "metadata", "version-hint.text")).read().strip()
        where = os.path.join(where, "metadata", f"v{hint}.metadata.json")
    table = StaticTable.from_metadata(where, properties=properties)
files = list(table.scan(row_filter=row_filter).plan_files())
arrow = table.scan(
    row_filter=row_filter, selected_fields=("partition", "offset", "key", "value", "timestamp")
).to_arrow()
rows = []
for r in arrow.to_pylist():
    ts = r["timestamp"]
    rows.append([
        r["partition"],
        r["offset"],
        r["key"].decode() if r["key"] is not None else None,
        r["value"].decode() if r["value"] is not None else None,
        int(ts.timestamp() * 1000),
    ])
print(json.dumps({"files": len(files), "rows": rows}))
