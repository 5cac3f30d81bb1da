"""Reads a Strata Iceberg table's typed JSON value columns with pyiceberg.

usage: iceberg_values.py <table directory (…/iceberg/TOPIC)> MEMBER…
       iceberg_values.py <REST catalog URI> <namespace.table> MEMBER…

Loads the table (strata_table.py) and prints one JSON object: the ids of the table's
schemas, the current schema's value members, and every row as
[partition, offset, {member: value}] for the members named (a member a file's schema
lacks reads as null).
"""

import json
import sys

from strata_table import load

table, members = load(sys.argv[1:])
value = table.schema().find_field("value")
arrow = table.scan(selected_fields=("partition", "offset", "value")).to_arrow()
rows = []
for r in arrow.to_pylist():
    v = r["value"] or {}
    rows.append([r["partition"], r["offset"], {m: v.get(m) for m in members}])
print(json.dumps({
    "schema_ids": sorted(s.schema_id for s in table.schemas().values()),
    "current_schema_id": table.schema().schema_id,
    "value_members": [f.name for f in value.field_type.fields],
    "rows": rows,
}))
