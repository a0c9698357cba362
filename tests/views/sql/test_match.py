"""Vectorised matching of rows against SQL primitives: batch forms, NULL and NaN, column types."""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterator

import duckdb
import numpy as np
import pyarrow as pa
import pytest

from fanout.views.sql import SqlBox, parse, primitive_to_duckdb


def prim(where: str) -> SqlBox:
    (only,) = parse(f"SELECT * FROM t WHERE {where}").primitives()
    return only


@pytest.fixture(scope="module")
def db() -> Iterator[duckdb.DuckDBPyConnection]:
    connection = duckdb.connect()
    yield connection
    connection.close()


def test_numpy_batches_read_nulls_the_documented_way() -> None:
    batch = {
        "A": np.ma.masked_array([1, 5, 9], mask=[False, True, False]),
        "f": np.array([0.5, math.nan, 3.0]),
        "s": np.array(["x", None, "y"], dtype=object),
        "d": np.array(["2024-01-01", "NaT", "2024-03-01"], dtype="datetime64[D]"),
        "u": np.array(["b", "a", "c"]),
    }
    assert prim("a < 6").match(batch).tolist() == [True, False, False]
    assert prim("a IS NULL").match(batch).tolist() == [False, True, False]
    assert prim("f > 1").match(batch).tolist() == [False, True, True]  # NaN is the largest number
    assert prim("f IS NULL").match(batch).tolist() == [False, False, False]  # NaN is not NULL
    assert prim("s IS NOT NULL AND s <> 'x'").match(batch).tolist() == [False, False, True]
    assert prim("d >= DATE '2024-02-01' OR d IS NULL").match(batch).tolist() == [False, True, True]
    assert prim("u IN ('a', 'c')").match(batch).tolist() == [False, True, True]


def test_whole_table_and_empty_primitives() -> None:
    batch = pa.table({"a": [1, 2, 3]})
    assert SqlBox("t").match(batch).tolist() == [True, True, True]
    assert SqlBox("t", boxes=()).match(batch).tolist() == [False, False, False]
    assert prim("FALSE").match(batch).tolist() == [False, False, False]


def test_match_errors_name_the_problem() -> None:
    with pytest.raises(KeyError, match="no column 'b'"):
        prim("b = 1").match({"a": np.array([1])})
    with pytest.raises(TypeError, match="column 'a' holds string values"):
        prim("a < 1").match(pa.table({"a": ["x"]}))
    with pytest.raises(ValueError, match="empty mapping"):
        SqlBox("t").match({})
    with pytest.raises(ValueError, match="differ in length"):
        prim("a < 1").match({"a": np.array([1, 2]), "b": np.array([1])})


TYPED_COLUMNS = {
    "small": "TINYINT",
    "dec": "DECIMAL(10, 2)",
    "ts": "TIMESTAMP",
    "tstz": "TIMESTAMPTZ",
    "dict": "VARCHAR",
}
TYPED_ROWS = [
    (
        0,
        -100,
        1.25,
        dt.datetime(2024, 1, 1, 0, 0),
        dt.datetime(2024, 1, 1, 12, 0, tzinfo=dt.UTC),
        "a",
    ),
    (1, 100, 2.5, dt.datetime(2024, 1, 2, 6, 0), dt.datetime(2024, 1, 2, 0, 0, tzinfo=dt.UTC), "b"),
    (2, None, None, None, None, None),
    (3, 7, 0.01, dt.datetime(2023, 12, 31, 23, 0), dt.datetime(2023, 12, 31, tzinfo=dt.UTC), "a"),
]


@pytest.mark.parametrize(
    "where",
    [
        "small > 99",
        "small < 1000 AND small <> 7",
        "dec >= 1.25",
        "dec < 2.5 OR dec IS NULL",
        "ts >= DATE '2024-01-01'",
        "ts < TIMESTAMP '2024-01-02 06:00:00'",
        "ts BETWEEN '2024-01-01' AND '2024-01-02'",
        "dict IN ('a')",
    ],
)
def test_typed_columns_match_like_duckdb(db: duckdb.DuckDBPyConnection, where: str) -> None:
    columns = ", ".join(f"{name} {kind}" for name, kind in TYPED_COLUMNS.items())
    db.execute("SET TimeZone = 'UTC'")
    db.execute(f"CREATE OR REPLACE TABLE typed (id BIGINT, {columns})")
    db.executemany("INSERT INTO typed VALUES (?, ?, ?, ?, ?, ?)", TYPED_ROWS)
    table = db.sql("SELECT * FROM typed").to_arrow_table()
    table = table.set_column(5, "dict", table["dict"].dictionary_encode())
    primitive = prim(where)
    expected = {row[0] for row in db.execute(f"SELECT id FROM typed WHERE {where}").fetchall()}
    masked = {
        i
        for i, inside in zip(table["id"].to_pylist(), primitive.match(table), strict=True)
        if inside
    }
    assert masked == expected
    by_predicate = f"SELECT id FROM typed WHERE {primitive_to_duckdb(primitive)}"
    assert {row[0] for row in db.execute(by_predicate).fetchall()} == expected


def test_time_zone_aware_timestamps_compare_in_utc() -> None:
    moments = pa.array([0, 3_600_000_000], pa.timestamp("us", tz="Europe/Paris"))
    mask = prim("t >= TIMESTAMP '1970-01-01 00:30:00'").match(pa.table({"t": moments}))
    assert mask.tolist() == [False, True]
