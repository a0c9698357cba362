"""``TIMESTAMPTZ`` literals in SQL views: read as the instant DuckDB reads (the oracle), so that
a comparison with one bounds the view's primitive, which then holds every row the query
returns."""

from __future__ import annotations

import datetime as dt

import duckdb
import pytest
import sqlglot
from hypothesis import given, settings
from hypothesis import strategies as st

from fanout.views.sql import parse
from fanout.views.sql.literals import constant
from fanout.views.sql.values import EPOCH_TIMESTAMP

MOMENTS = st.datetimes(dt.datetime(1970, 1, 2), dt.datetime(2200, 1, 1))
OFFSETS = st.integers(-12 * 60, 14 * 60).map(lambda minutes: minutes - minutes % 15)


def spelled(moment: dt.datetime, minutes: int, style: int) -> str:
    """An ISO time with a zone offset, in one of the ways DuckDB takes."""
    text = moment.isoformat(sep=" ")
    if style == 0 and minutes == 0:
        return text + "Z"
    sign = "-" if minutes < 0 else "+"
    hours, rest = divmod(abs(minutes), 60)
    if style == 1 and rest == 0:
        return f"{text}{sign}{hours:02d}"
    if style == 2:
        return f"{text}{sign}{hours:02d}{rest:02d}"
    return f"{text}{sign}{hours:02d}:{rest:02d}"


@pytest.fixture(scope="module")
def db() -> duckdb.DuckDBPyConnection:
    connection = duckdb.connect()
    connection.execute("SET TimeZone = 'UTC'")  # as the relay's (relay.tables)
    return connection


@settings(max_examples=200, deadline=None)
@given(MOMENTS, OFFSETS, st.integers(0, 3))
def test_an_instant_is_read_as_duckdb_reads_it(
    db: duckdb.DuckDBPyConnection, moment: dt.datetime, minutes: int, style: int
) -> None:
    text = spelled(moment, minutes, style)
    read = constant(sqlglot.parse_one(f"TIMESTAMPTZ '{text}'", read="duckdb"))
    assert read is not None and read.domain == "timestamp"
    (want,) = db.execute("SELECT epoch_us(CAST(? AS TIMESTAMPTZ))", [text]).fetchone()
    assert read.value == want, text


def test_an_instant_without_a_zone_is_utc_and_a_named_zone_is_left_to_duckdb() -> None:
    plain = constant(sqlglot.parse_one("TIMESTAMPTZ '2026-01-01 00:00:00'", read="duckdb"))
    midnight = (dt.datetime(2026, 1, 1) - EPOCH_TIMESTAMP) // dt.timedelta(microseconds=1)
    assert plain is not None and plain.value == midnight
    named = "TIMESTAMPTZ '2026-01-01 00:00:00 America/Chicago'"
    assert constant(sqlglot.parse_one(named, read="duckdb")) is None


def test_a_comparison_with_an_instant_bounds_the_primitive() -> None:
    view = parse("SELECT * FROM events WHERE ts >= TIMESTAMPTZ '2026-01-01 02:00:00+02'")
    assert view.exact
    (box,) = view.primitives()[0].boxes
    ((name, values),) = box.ranges
    midnight = (dt.datetime(2026, 1, 1) - EPOCH_TIMESTAMP) // dt.timedelta(microseconds=1)
    assert name == "ts" and values.intervals[0].low == midnight
