"""DuckDB as the SQL views' oracle: a table loaded into it, the settings of its slower
properties, a column's values or NULL."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import duckdb
import pyarrow as pa
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def load(db: duckdb.DuckDBPyConnection, name: str, table: pa.Table) -> None:
    """Make ``table`` DuckDB's table ``name``, replacing it."""
    db.register("incoming", table)
    db.execute(f'CREATE OR REPLACE TABLE "{name}" AS SELECT * FROM incoming')
    db.unregister("incoming")


def maybe(values: Sequence[Any]) -> st.SearchStrategy[Any]:
    """One of ``values``, or NULL."""
    return st.none() | st.sampled_from(values)
