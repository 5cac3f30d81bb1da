"""Lists, per snapshot of a Strata Iceberg table, the data files a scan of it plans, and
whether each is still in the bucket (a local directory).

usage: iceberg_files.py <table directory (…/iceberg/TOPIC)>

Prints one JSON object: {"current": N rows in the current snapshot's scan,
"snapshots": [{"id": …, "operation": …, "files": F, "missing": [paths]}]}.
"""

import json
import os
import sys
from urllib.parse import urlparse

from pyiceberg.table import StaticTable

table_dir = sys.argv[1]
hint = open(os.path.join(table_dir, "metadata", "version-hint.text")).read().strip()
table = StaticTable.from_metadata(os.path.join(table_dir, "metadata", f"v{hint}.metadata.json"))
out = {"current": table.scan(selected_fields=("offset",)).to_arrow().num_rows, "snapshots": []}
for s in table.snapshots():
    files = [t.file.file_path for t in table.scan(snapshot_id=s.snapshot_id).plan_files()]
    missing = [f for f in files if not os.path.exists(urlparse(f).path)]
    out["snapshots"].append({
        "id": s.snapshot_id,
        "operation": s.summary.operation.value if s.summary else None,
        "files": len(files),
        "missing": missing,
    })
print(json.dumps(out))
