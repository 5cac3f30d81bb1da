"""Scans a Strata Iceberg table with pyiceberg, as a warehouse loader would.

usage: iceberg_scan.py <table directory (…/iceberg/TOPIC)>

Finds the current metadata through metadata/version-hint.text (as Iceberg's file-system
tables do), loads it, and prints one JSON object: the number of data files the scan
plans, and every row as [partition, offset, key, value, timestamp_ms].
"""

import json
import os
import sys

from pyiceberg.table import StaticTable

table_dir = sys.argv[1]
hint = open(os.path.join(table_dir, "metadata", "version-hint.text")).read().strip()
table = StaticTable.from_metadata(os.path.join(table_dir, "metadata", f"v{hint}.metadata.json"))
files = list(table.scan().plan_files())
arrow = table.scan(selected_fields=("partition", "offset", "key", "value", "timestamp")).to_arrow()
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
