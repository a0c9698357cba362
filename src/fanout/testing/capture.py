"""What the postgres source's tests and benchmark share: an ``orders`` table's columns and the
schema a change reader yields for it, statements run in autocommit, and a stream's rows."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pyarrow as pa
from pyspark.sql.types import (
    BooleanType,
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
)

#: The ``orders`` table's columns as a dataset declares them.
COLUMNS = {"order_id": "long", "customer": "string", "amount": "double"}
#: What a change reader of ``orders`` yields: the columns, then each change's bookkeeping.
SCHEMA = StructType(
    [
        StructField("order_id", LongType()),
        StructField("customer", StringType()),
        StructField("amount", DoubleType()),
        StructField("_version", LongType()),
        StructField("_deleted", BooleanType()),
        StructField("_problem", StringType()),
    ]
)


def execute(dsn: str, *statements: str) -> None:
    """Run ``statements`` in order, each committed on its own."""
    with psycopg.connect(dsn, autocommit=True) as db:
        for statement in statements:
            db.execute(statement)


def changes(batches: Iterator[pa.RecordBatch]) -> list[dict[str, Any]]:
    """A reader's batches as rows."""
    return [row for batch in batches for row in batch.to_pylist()]
