"""Compiling SQL views and primitives: DuckDB text for the relay, Spark Columns for the publisher.

The Spark cases are few (Spark is slow): each primitive's Spark filter must keep exactly the rows
its DuckDB predicate keeps, on a table with NULLs, NaN, quotes, dates, timestamps and booleans.
"""

from __future__ import annotations

import datetime as dt
import math
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import duckdb
import pytest

from fanout.views.sql import SqlBox, parse, primitive_to_duckdb, to_duckdb, to_spark
from fanout.views.sql.boxes import Box

ROWS: list[tuple[Any, ...]] = [
    (0, 1, 0.5, "a", dt.date(2024, 1, 1), dt.datetime(2024, 1, 1, 8, 30), True),
    (1, -2, math.nan, "it's", dt.date(2024, 1, 2), dt.datetime(2024, 1, 2, 0, 0), False),
    (2, None, None, None, None, None, None),
    (3, 7, -1.25, "b", dt.date(2023, 12, 31), dt.datetime(2023, 12, 31, 23, 59, 59, 5), True),
    (4, 3, math.inf, "", dt.date(2024, 2, 29), dt.datetime(2024, 2, 29, 12, 0, 0, 250000), None),
    (5, 0, 2.0, "ba", dt.date(2024, 1, 3), dt.datetime(2024, 1, 3, 0, 0, 1), False),
]
COLUMNS = "id BIGINT, i BIGINT, f DOUBLE, s VARCHAR, d DATE, ts TIMESTAMP, b BOOLEAN"

WHERE_CLAUSES = [
    "i > 0",
    "i <> 3 OR i IS NULL",
    "f >= 0.5",
    "f < 2 AND f <> 0.5",
    "f NOT IN (0.5, 2)",
    "s IN ('it''s', 'b', '')",
    "s >= 'b' OR s < 'a'",
    "d BETWEEN DATE '2024-01-01' AND '2024-01-03'",
    "d < '2024-01-02' OR d IS NULL",
    "ts >= TIMESTAMP '2024-01-02 00:00:00' AND ts < TIMESTAMP '2024-02-29 12:00:00.25'",
    "ts > DATE '2024-01-01'",
    "b",
    "NOT b",
    "b IS NOT TRUE",
    "s LIKE 'b%'",
    "FALSE",
    "i IS NOT NULL",
]


@pytest.fixture(scope="module")
def db() -> Iterator[duckdb.DuckDBPyConnection]:
    connection = duckdb.connect()
    connection.execute(f"CREATE TABLE t ({COLUMNS})")
    connection.executemany(f"INSERT INTO t VALUES ({', '.join('?' * 7)})", ROWS)
    yield connection
    connection.close()


def ids(db: duckdb.DuckDBPyConnection, predicate: str) -> set[int]:
    return {row[0] for row in db.execute(f"SELECT id FROM t WHERE {predicate}").fetchall()}


@pytest.mark.parametrize("where", WHERE_CLAUSES)
def test_primitive_predicates_keep_the_querys_rows(
    db: duckdb.DuckDBPyConnection, where: str
) -> None:
    (prim,) = parse(f"SELECT * FROM t WHERE {where}").primitives()
    assert ids(db, where) <= ids(db, primitive_to_duckdb(prim))
    if parse(f"SELECT * FROM t WHERE {where}").exact:
        assert ids(db, where) == ids(db, primitive_to_duckdb(prim))


@pytest.mark.spark
def test_spark_filters_keep_the_primitives_rows(db: duckdb.DuckDBPyConnection, spark: Any) -> None:
    from pyspark.sql.types import (
        BooleanType,
        DateType,
        DoubleType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampNTZType,
    )

    schema = StructType(
        [
            StructField("id", LongType()),
            StructField("i", LongType()),
            StructField("f", DoubleType()),
            StructField("s", StringType()),
            StructField("d", DateType()),
            StructField("ts", TimestampNTZType()),
            StructField("b", BooleanType()),
        ]
    )
    frame = spark.createDataFrame(ROWS, schema)
    prims = [
        prim for w in WHERE_CLAUSES for prim in parse(f"SELECT * FROM t WHERE {w}").primitives()
    ]
    prims += [SqlBox("t", boxes=()), SqlBox("t")]
    # One Spark job for all primitives: each becomes a boolean column of the same rows.
    flags = frame.select("id", *(to_spark(prim).alias(f"p{k}") for k, prim in enumerate(prims)))
    rows = flags.collect()
    for k, prim in enumerate(prims):
        kept = {row["id"] for row in rows if row[f"p{k}"]}
        assert kept == ids(db, primitive_to_duckdb(prim)), str(prim)


def test_primitive_literals_render_for_duckdb() -> None:
    (prim,) = parse(
        "SELECT * FROM t WHERE x IN (-3, 0.1, 1e300) AND s = 'it''s' AND b = FALSE "
        "AND ts >= TIMESTAMP '2024-01-02 03:04:05.000006'"
    ).primitives()
    text = primitive_to_duckdb(prim)
    assert '"x" IN (-3, 0.1, 1e+300)' in text
    assert "\"s\" = 'it''s'" in text
    assert '"b" = FALSE' in text
    assert "\"ts\" >= CAST('2024-01-02 03:04:05.000006' AS TIMESTAMP)" in text
    assert primitive_to_duckdb(SqlBox("t", boxes=())) == "FALSE"
    assert primitive_to_duckdb(SqlBox("t")) == "TRUE"
    assert str(SqlBox("t", ("b", "a"), (Box(),))) == 'SELECT "a", "b" FROM "t" WHERE TRUE'


def test_to_duckdb_quotes_identifiers_and_keeps_the_query(db: duckdb.DuckDBPyConnection) -> None:
    view = parse("select ID, s as Label from T where I > 0 order by id desc limit 2")
    assert to_duckdb(view) == (
        'SELECT "ID", "s" AS "Label" FROM "T" WHERE "I" > 0 ORDER BY "id" DESC LIMIT 2'
    )
    result = db.execute(to_duckdb(view))
    assert [column[0] for column in result.description] == ["id", "Label"]
    assert result.fetchall() == [(4, ""), (3, "b")]


def test_importing_the_views_does_not_import_spark() -> None:
    code = "import sys, fanout.views.sql; sys.exit('pyspark' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


@pytest.mark.spark
def test_timestamp_bounds_select_the_same_instants_in_spark_as_at_the_relay(spark: Any) -> None:
    """A publisher's timestamp columns are Spark ``TIMESTAMP`` (instants). A primitive's bound
    is written without a zone, so it reads in the session's time zone: the publisher's session
    is UTC (``publisher.spark.CLUSTER``), as the relay's DuckDB is. In another zone the same
    filter would keep other rows."""
    from pyspark.sql.types import LongType, StructField, StructType, TimestampType

    from fanout.publisher.spark import CLUSTER

    utc = dt.UTC
    instants = [
        dt.datetime(2025, 12, 31, 22, 0, tzinfo=utc),
        dt.datetime(2026, 1, 1, 2, tzinfo=utc),
    ]
    schema = StructType([StructField("id", LongType()), StructField("ts", TimestampType())])
    (prim,) = parse("SELECT * FROM t WHERE ts >= TIMESTAMPTZ '2026-01-01 00:00:00+00'").primitives()
    zone = spark.conf.get("spark.sql.session.timeZone")
    kept = {}
    try:
        for setting in (CLUSTER["spark.sql.session.timeZone"], "America/Chicago"):
            spark.conf.set("spark.sql.session.timeZone", setting)
            frame = spark.createDataFrame(list(enumerate(instants)), schema)
            kept[setting] = {row["id"] for row in frame.where(to_spark(prim)).collect()}
    finally:
        spark.conf.set("spark.sql.session.timeZone", zone)
    assert kept["UTC"] == {1}  # as DuckDB at the relay: the instant after midnight UTC
    assert kept["America/Chicago"] != {1}
