"""Scans a Strata dead-letter table with pyiceberg: the rows of a topic with typed JSON
values whose value did not fit the value schema.

usage: iceberg_dead_letters.py <table directory (…/dead_letters/iceberg/TOPIC)>
       iceberg_dead_letters.py <REST catalog URI> <namespace.dead_letters.TOPIC>

Loads the table (strata_table.py) and prints one JSON object: every row as [partition, offset, value (UTF-8 text), reason].
"""

import json
import sys

from strata_table import load

table, _ = load(sys.argv[1:])
arrow = table.scan(selected_fields=("partition", "offset", "value", "reason")).to_arrow()
rows = [
    [r["partition"], r["offset"], r["value"].decode() if r["value"] is not None else None, r["reason"]]
    for r in arrow.to_pylist()
]
print(json.dumps({"rows": rows}))
