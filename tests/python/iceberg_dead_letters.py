"""Scans a Strata dead-letter table with pyiceberg: the rows of a topic with typed JSON
values whose value did not fit the value schema.

usage: iceberg_dead_letters.py <table directory (…/dead_letters/iceberg/TOPIC)>

Finds the current metadata through metadata/version-hint.text and prints one JSON
object: every row as [partition, offset, value (UTF-8 text), reason].
"""

import json
import os
import sys

from pyiceberg.table import StaticTable

where = sys.argv[1]
hint = open(os.path.join(where, "metadata", "version-hint.text")).read().strip()
table = StaticTable.from_metadata(os.path.join(where, "metadata", f"v{hint}.metadata.json"))
arrow = table.scan(selected_fields=("partition", "offset", "value", "reason")).to_arrow()
rows = [
    [r["partition"], r["offset"], r["value"].decode() if r["value"] is not None else None, r["reason"]]
    for r in arrow.to_pylist()
]
print(json.dumps({"rows": rows}))
