"""Loads a Strata Iceberg table for the test scripts beside this one.

`load(args)` takes the table from the front of `args` and returns it with the rest:
  <table directory (…/iceberg/TOPIC)>     current metadata through metadata/version-hint.text
                                          (as Iceberg's file-system tables do)
  <REST catalog URI> <namespace.table>    through the catalog (pyiceberg's RestCatalog)
"""

import os

from pyiceberg.table import StaticTable


def load(args):
    where = args[0]
    if where.startswith(("http://", "https://")):
        from pyiceberg.catalog.rest import RestCatalog

        namespace, name = args[1].rsplit(".", 1)
        return RestCatalog("rest", uri=where).load_table((*namespace.split("."), name)), args[2:]
    hint = open(os.path.join(where, "metadata", "version-hint.text")).read().strip()
    return StaticTable.from_metadata(os.path.join(where, "metadata", f"v{hint}.metadata.json")), args[1:]
