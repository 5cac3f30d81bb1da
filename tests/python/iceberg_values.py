"""Reads a Strata Iceberg table's typed JSON value columns with pyiceberg.

usage: iceberg_values.py <table directory (…/iceberg/TOPIC)> MEMBER…

Loads the current metadata through metadata/version-hint.text and prints one JSON
object: the ids of the table's schemas, the current schema's value members, and every
row as [partition, offset, {member: value}] for the members named (a member a file's
schema lacks reads as null).
"""

import json
import os
import sys

from pyiceberg.table import StaticTable

where, members = sys.argv[1], sys.argv[2:]
hint = open(os.path.join(where, "metadata", "version-hint.text")).read().strip()
table = StaticTable.from_metadata(os.path.join(where, "metadata", f"v{hint}.metadata.json"))
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
