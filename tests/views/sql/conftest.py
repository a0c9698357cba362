"""The in-memory DuckDB the SQL views' properties run their queries on."""

from __future__ import annotations

from collections.abc import Iterator

import duckdb
import pytest


@pytest.fixture(scope="module")
def db() -> Iterator[duckdb.DuckDBPyConnection]:
    connection = duckdb.connect()
    yield connection
    connection.close()
